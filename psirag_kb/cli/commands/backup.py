"""`backup` and `restore`: a copy of the knowledge base, and bringing one back."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from psirag_kb.cli.connection import client
from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.status_text import human_bytes
from psirag_kb.storage.backup import backup_name


def cmd_backup(args: argparse.Namespace, config: Config) -> int:
    """A backup into DEST: in-process when no daemon runs; else the running daemon takes one
    named into its [backup] dir (over the API a backup is named, never placed) and this
    command, the same OS user at the daemon's machine, moves it to DEST; with --server, DEST is
    the name."""
    with client(config) as kb:
        remote = getattr(kb, "remote", None)
        if remote is None:  # in-process: the operator's own shell writes DEST
            report = kb.backup(os.path.abspath(args.dest))
        elif remote:
            report = kb.backup(backup_name(args.dest))
        else:
            report = _moved(kb, Path(os.path.abspath(args.dest)), config)
    if args.json:
        print(json.dumps(report))
        return 0
    where = "" if not remote else " (in the [backup] dir on the daemon's machine)"
    stale = {k: v for k, v in report.get("indexes", {}).items() if v != "ok"}
    print(f"backup of generation {report['generation']} ({report['chunks']} chunks) in "
          f"{report['path']}{where}: {len(report['files'])} files, "
          f"{human_bytes(report['bytes'])}, {report['seconds']} s (writes waited "
          f"{report['writer_held_s']} s)")
    for name, state in stale.items():
        print(f"  {name}: {state}")
    return 0


def _moved(kb: Any, dest: Path, config: Config) -> dict[str, Any]:
    """Have the local daemon take a backup named for this command into its [backup] dir, then
    move it to `dest` (a new or empty folder outside the data directory)."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise KBError(f"{dest} exists and is not an empty folder; give a new one")
    if dest.resolve().is_relative_to(config.data_dir.resolve()):
        raise KBError(f"{dest} is inside the data directory {config.data_dir}; put backups "
                      "elsewhere (another disk is best)")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    report = kb.backup(f"cli-{stamp}-{os.getpid()}")
    taken = Path(report["path"])
    try:
        if dest.exists():
            dest.rmdir()
        shutil.move(taken, dest)
    except OSError as exc:
        raise KBError(f"the daemon took the backup into {taken}; moving it to {dest} failed "
                      f"({exc}): move it yourself") from exc
    return report | {"path": str(dest)}


def cmd_restore(args: argparse.Namespace, config: Config) -> int:
    """Verify a backup's manifest and copy it into the data directory (empty, or replaced
    with --force), holding the directory so no daemon opens it meanwhile."""
    from psirag_kb.storage.backup import restore
    from psirag_kb.storage.datadir import COMMAND, DaemonError, DataDirLock

    lock = DataDirLock(config.data_dir)
    found = lock.try_acquire(COMMAND, "restore")  # named: a daemon starting waits for it
    if found is not None:
        raise DaemonError(f"{found.describe()} holds {config.data_dir}; stop it before "
                          "restoring into it")
    try:
        report = restore(args.src, config.data_dir, args.force)
    finally:
        lock.release()
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"restored {report['path']} (generation {report['generation']}, {report['chunks']} "
          f"chunks, {human_bytes(report['bytes'])}) into {report['data_dir']} in "
          f"{report['seconds']} s; start it with `psirag-kb --data-dir {report['data_dir']} "
          "daemon`")
    return 0

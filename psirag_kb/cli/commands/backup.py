"""`backup` and `restore`: a copy of the knowledge base, and bringing one back."""

from __future__ import annotations

import argparse
import json
import os

from psirag_kb.cli.connection import client
from psirag_kb.config import Config
from psirag_kb.status_text import human_bytes


def cmd_backup(args: argparse.Namespace, config: Config) -> int:
    """Have the daemon that owns the stores copy them between two commits (or do it
    in-process), with people, audit and a manifest."""
    with client(config) as kb:
        remote = getattr(kb, "remote", False)
        report = kb.backup(args.dest if remote else os.path.abspath(args.dest))
    if args.json:
        print(json.dumps(report))
        return 0
    where = "" if not remote else " (on the daemon's machine)"
    stale = {k: v for k, v in report.get("indexes", {}).items() if v != "ok"}
    print(f"backup of generation {report['generation']} ({report['chunks']} chunks) in "
          f"{report['path']}{where}: {len(report['files'])} files, "
          f"{human_bytes(report['bytes'])}, {report['seconds']} s (writes waited "
          f"{report['writer_held_s']} s)")
    for name, state in stale.items():
        print(f"  {name}: {state}")
    return 0


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

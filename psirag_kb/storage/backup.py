"""Online backups of a data directory taken between two commits of the writer, and restores.

A backup is a folder: DuckDB's file (checkpointed, or with its write-ahead log), the Tantivy
index saved at the same generation, hnswlib's last saved index (at that generation or an earlier
one: the restored copy adds the vectors committed since from DuckDB), people, audit and the
token, and `manifest.json` naming the generation, the database's identity and every file with
its size and SHA-256. The folder appears under its final name only once complete.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import duckdb

from psirag_kb.errors import KBError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT = 1
"""Version of the backup layout (the manifest's "format")."""
LAST_BACKUP = "last-backup.json"
"""In the data directory: what the last backup was (time, generation, bytes, path)."""
RESTORING = "restore.incomplete"
"""In a data directory while a restore writes it; the stores refuse to open beside it."""
PREFIX = "psirag-backup-"
"""Name prefix of the backups the daemon takes on a schedule (and prunes)."""
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A named backup's folder name (one path component: no separator, never "." or "..")."""
RUNTIME = frozenset({"daemon.lock", "daemon.json", "daemon.starting.json", "takeover.request",
                     "people.lock",
                     LAST_BACKUP, RESTORING, "kb.duckdb", "kb.duckdb.wal", "bm25", "dense"})
"""Entries of a data directory that are copied on the writer (the stores) or never (the
running process's own files)."""
LOGS = ("daemon.log", "tui.log", "ray.log")
"""Log files (and their rotations): left out, they describe the source's processes."""
HASH_BLOCK = 1 << 20
SYNC_BLOCK = 1 << 22
"""Bytes compared at a time when DuckDB's file is brought up to date on the writer."""
STAGE = "backup.stage."
"""Name prefix of a backup's staging folder in the data directory (hard links, removed after)."""


DENSE_BEHIND = 10_000
"""A backup saves hnswlib's index on the writer only when nothing was saved, or when memory
holds more than this many vectors (or a twentieth of the live ones, if more) added since the
last save: otherwise it copies the saved file, and the restored copy adds the vectors committed
since from the database (`DenseIndex.catch_up`, no embedding), which is cheaper than holding
every commit for a save of the whole index (1.1 GB at a million 256-d chunks)."""


def save_behind(live: int) -> int:
    """How many vectors added since the dense index's last save a backup leaves to the
    restore's catch-up."""
    return max(DENSE_BEHIND, live // 20)


class BackupError(KBError):
    """A backup could not be taken or a restore could not be done."""


def _version() -> str:
    try:
        return metadata.version("psirag-kb")
    except metadata.PackageNotFoundError:
        return "unknown"


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def sync_file(source: Path, target: Path, block: int = SYNC_BLOCK) -> int:
    """Make `target` byte for byte equal to `source`, writing only the blocks that differ (a
    plain copy when `target` does not exist); the bytes written."""
    if not target.exists():
        _copy(source, target)
        return source.stat().st_size
    written = 0
    with source.open("rb") as reading, target.open("r+b") as writing:
        offset = 0
        while data := reading.read(block):
            writing.seek(offset)
            if writing.read(len(data)) != data:
                writing.seek(offset)
                writing.write(data)
                written += len(data)
            offset += len(data)
        writing.truncate(offset)
    return written


def seed_copy(stores: Any, target: Path) -> None:
    """Copy DuckDB's file into `target` off the writer, while commits go on: a possibly torn
    copy that `copy_stores` then makes exact on the writer by rewriting the blocks that differ
    (reading a file in the page cache is much faster than writing a copy of it)."""
    target.mkdir(parents=True, exist_ok=True)
    _copy(stores.store.path, target / stores.store.path.name)


def _tantivy_files(folder: Path) -> tuple[bytes, list[Path]]:
    """meta.json's bytes and the files of the segments it names (what a reader opens)."""
    meta = (folder / "meta.json").read_bytes()
    segments = {s["segment_id"].replace("-", "") for s in json.loads(meta).get("segments", [])}
    files = [p for p in folder.iterdir()
             if p.is_file() and p.name.split(".", 1)[0] in segments]
    return meta, files


class Later:
    """Files that never change once written (Tantivy segments, a saved hnswlib file), hard-linked
    into a staging folder of the data directory on the writer and copied to the backup after it
    is released; copied at once where links cannot be made."""

    def __init__(self, stage: Path | None) -> None:
        self.stage = stage
        self.pending: list[tuple[Path, Path]] = []
        self._made = 0

    def put(self, source: Path, target: Path) -> None:
        """Link `source` now (to copy it later), or copy it now."""
        if self.stage is not None:
            self._made += 1
            staged = self.stage / f"{self._made}-{source.name}"
            try:
                self.stage.mkdir(parents=True, exist_ok=True)
                os.link(source, staged)
            except OSError:
                pass
            else:
                self.pending.append((staged, target))
                return
        _copy(source, target)

    def finish(self) -> None:
        """Copy what was linked, then drop the staging folder."""
        try:
            for staged, target in self.pending:
                _copy(staged, target)
        finally:
            if self.stage is not None:
                shutil.rmtree(self.stage, ignore_errors=True)
            self.pending = []


def copy_tantivy(folder: Path, target: Path, attempts: int = 5,
                 later: Later | None = None) -> None:
    """Copy a Tantivy index whose background merges may replace segments meanwhile: meta.json
    and its segments, again until meta.json did not change during the copy (segments through
    `later` when given: linked now, copied once the writer is free)."""
    later = later or Later(None)
    for _ in range(attempts):
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        mark = len(later.pending)
        try:
            meta, files = _tantivy_files(folder)
            for path in files:
                later.put(path, target / path.name)
            if (folder / "meta.json").read_bytes() != meta:
                del later.pending[mark:]
                continue
        except FileNotFoundError:  # a merge removed a segment we were about to copy
            del later.pending[mark:]
            continue
        (target / "meta.json").write_bytes(meta)
        for name in (".managed.json", "GENERATION", "ANALYZER"):  # what SparseIndex reads
            if (folder / name).exists():
                _copy(folder / name, target / name)
        return
    raise BackupError(f"the BM25 index {folder} kept changing during {attempts} copies")


def copy_stores(stores: Any, target: Path, later: Later | None = None) -> dict[str, Any]:
    """Copy DuckDB and the derived indexes at the current generation (on the writer thread,
    between two commits: nothing changes them meanwhile); what was copied and how. With
    `later`, the files that never change are only linked now (`Later.finish` copies them). A
    DuckDB file already in `target` (`seed_copy`) is made equal to the source block by block."""
    later = later or Later(None)
    store, sparse, dense = stores.store, stores.sparse, stores.dense
    if not stores.writer.on_writer_thread() and not stores.writer.closed:
        raise BackupError("the stores are copied on the writer thread only")
    generation = store.generation
    started = time.perf_counter()
    indexes: dict[str, str] = {}
    if dense.memory_generation == generation and dense.generation != generation and (
            dense.saved_files() is None or dense.unsaved > save_behind(dense.count)):
        dense.save(generation)  # else the restore adds the few missing vectors from DuckDB
    checkpoint_started = time.perf_counter()
    try:
        store.db.execute("CHECKPOINT")
        checkpointed = True
    except duckdb.Error as exc:  # a reader's transaction is open: the log goes with it
        log.info("backup: DuckDB checkpoint put off (%s); copying its write-ahead log", exc)
        checkpointed = False
    checkpoint_s = time.perf_counter() - checkpoint_started
    target.mkdir(parents=True, exist_ok=True)
    duckdb_written = sync_file(store.path, target / store.path.name)  # seeded: rewrites blocks
    wal = store.path.with_name(store.path.name + ".wal")
    if wal.exists() and wal.stat().st_size > 0:
        _copy(wal, target / wal.name)
    duckdb_s = time.perf_counter() - checkpoint_started
    if "bm25" in stores.stale or sparse.generation != generation:
        indexes["bm25"] = "stale: rebuilt from the database after a restore"
    else:
        copy_tantivy(sparse.folder, target / "bm25", later=later)
        indexes["bm25"] = "ok"
    saved = dense.saved_files()
    if "dense" in stores.stale or saved is None:
        indexes["dense"] = "stale: rebuilt from the database after a restore"
    else:
        index_file, generation_file = saved  # replaced by a save (on this thread), never edited
        later.put(index_file, target / "dense" / index_file.name)
        _copy(generation_file, target / "dense" / generation_file.name)
        if (dense.folder / "dense.dim").exists():
            _copy(dense.folder / "dense.dim", target / "dense" / "dense.dim")
        indexes["dense"] = "ok" if dense.generation == generation else (
            f"saved at generation {dense.generation}: the restore adds the vectors committed "
            "since from the database")
    indexes["tree"] = "ok" if not stores.tree_missing and not stores.defer_tree else (
        "missing: rebuilt from the stored vectors after a restore")
    return {"generation": generation, "identity": store.identity, "model": store.meta().get(
        "model"), "chunks": store.chunk_count(), "checkpointed": checkpointed,
        "dense_generation": dense.generation if saved is not None else None,
        "indexes": indexes, "duckdb_s": round(duckdb_s, 3),
        "checkpoint_s": round(checkpoint_s, 3), "duckdb_bytes_written": duckdb_written,
        "writer_held_s": round(time.perf_counter() - started, 3)}


def copy_rest(data_dir: Path, target: Path, skip: tuple[Path, ...] = ()) -> None:
    """Copy what else the data directory holds (people, audit, token, other files) but its
    logs, runtime files, the stores (copied on the writer) and the folders in `skip`."""
    skipped = {p.resolve() for p in skip}
    for entry in sorted(data_dir.iterdir()):
        if (entry.name in RUNTIME or entry.name.startswith((*LOGS, STAGE))
                or entry.name.endswith(".tmp")):
            continue
        if entry.resolve() in skipped or any(s.is_relative_to(entry.resolve()) for s in skipped):
            continue
        if entry.is_dir():
            shutil.copytree(entry, target / entry.name, symlinks=True)
        elif entry.is_file():
            _copy(entry, target / entry.name)
            if entry.name.endswith(".token"):
                os.chmod(target / entry.name, 0o600)


def sha256(path: Path) -> str:
    """The SHA-256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _listing(folder: Path) -> list[dict[str, Any]]:
    return [{"path": p.relative_to(folder).as_posix(), "bytes": p.stat().st_size,
             "sha256": sha256(p)}
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST]


def take_backup(data_dir: Path, dest: Path, copy: Callable[[Path, Later], dict[str, Any]],
                skip: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Write a backup of `data_dir` into the new or empty folder `dest`: `copy(folder, later)`
    copies the stores (run on the writer by the caller), then what it linked, the rest and the
    manifest; the folder gets its name once complete. The manifest as a dict."""
    dest = Path(dest).absolute()
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"{dest} exists and is not an empty folder; give a new one")
    if dest.resolve().is_relative_to(Path(data_dir).resolve()):
        raise BackupError(f"{dest} is inside the data directory {data_dir}; put backups "
                          "elsewhere (another disk is best)")
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    started = time.time()
    clock = time.perf_counter()
    later = Later(Path(data_dir) / f"{STAGE}{uuid.uuid4().hex}")
    try:
        stores = copy(partial, later)
        later.finish()
        copy_rest(Path(data_dir), partial, (dest, partial, *skip))
        files = _listing(partial)
        manifest = {"format": FORMAT, "psirag_kb": _version(), "duckdb": duckdb.__version__,
                    "taken": started, "data_dir": str(data_dir), **stores,
                    "bytes": sum(f["bytes"] for f in files), "files": files,
                    "seconds": round(time.perf_counter() - clock, 3)}
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        if dest.exists():
            dest.rmdir()
        os.replace(partial, dest)
    except BaseException:
        if later.stage is not None:
            shutil.rmtree(later.stage, ignore_errors=True)
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log.info("backup of %s at generation %s in %s: %d files, %d bytes, %.1f s (writer held "
             "%.2f s)", data_dir, manifest["generation"], dest, len(files), manifest["bytes"],
             manifest["seconds"], manifest["writer_held_s"])
    return manifest | {"path": str(dest)}


def backup_name(name: str) -> str:
    """`name` when it may name a backup folder under [backup] dir, else a BackupError that
    says why (a path, "..", a scheduled backup's prefix, a partial one's suffix)."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BackupError(f"{name!r} is not a backup name: give 1 to 64 letters, digits, '.', "
                          "'_' or '-', starting with a letter or digit (a name, not a path)")
    if name.startswith(PREFIX) or name.endswith(".partial"):
        raise BackupError(f"{name!r} is not a backup name: names starting {PREFIX!r} are the "
                          "scheduled backups' (pruned) and '.partial' marks an unfinished one")
    return name


def summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """What `backup --json` and status report of a backup (no file list)."""
    keys = ("path", "taken", "generation", "identity", "chunks", "bytes", "seconds",
            "writer_held_s", "checkpointed", "indexes")
    return {k: manifest[k] for k in keys if k in manifest} | {
        "files": [f["path"] for f in manifest.get("files", [])]}


def record_last(data_dir: Path, manifest: dict[str, Any]) -> None:
    """Remember the last backup in the data directory (for status and metrics)."""
    shown = {k: manifest.get(k) for k in ("path", "taken", "generation", "bytes", "seconds")}
    temporary = Path(data_dir) / (LAST_BACKUP + ".tmp")
    temporary.write_text(json.dumps(shown), encoding="utf-8")
    os.replace(temporary, Path(data_dir) / LAST_BACKUP)


def last_backup(data_dir: Path) -> dict[str, Any] | None:
    """The last backup recorded in the data directory, or None."""
    try:
        return json.loads((Path(data_dir) / LAST_BACKUP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def prune(folder: Path, keep: int) -> list[str]:
    """Delete the oldest complete scheduled backups in `folder` beyond the newest `keep` (and
    partial ones left by an interruption); the paths deleted."""
    if not folder.is_dir():
        return []
    ours = sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith(PREFIX))
    partial = [p for p in ours if p.name.endswith(".partial")]
    complete = sorted((p for p in ours if p not in partial and (p / MANIFEST).exists()),
                      key=_taken)
    doomed = partial + complete[:max(0, len(complete) - keep)]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return [str(p) for p in doomed]


def _taken(folder: Path) -> tuple[float, str]:
    """When a backup was taken (by its manifest), then its name."""
    try:
        taken = float(json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["taken"])
    except (OSError, ValueError, KeyError, TypeError):
        taken = 0.0
    return taken, folder.name


def scheduled_name(generation: int, when: float | None = None) -> str:
    """The folder name of a scheduled backup: sortable by time."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if when is None else when))
    return f"{PREFIX}{stamp}-g{generation}"


def read_manifest(source: Path) -> dict[str, Any]:
    """A backup's manifest, checked against its files (sizes and hashes)."""
    source = Path(source)
    try:
        manifest = json.loads((source / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BackupError(f"{source} is not a psirag-kb backup (no {MANIFEST}); an interrupted "
                          "backup leaves a .partial folder, which cannot be restored") from exc
    except (OSError, ValueError) as exc:
        raise BackupError(f"the manifest of {source} cannot be read: {exc}") from exc
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{source} has backup format {manifest.get('format')!r}; this "
                          f"psirag-kb ({_version()}) reads format {FORMAT}")
    problems = []
    for entry in manifest.get("files", []):
        path = source / entry["path"]
        if not path.is_file():
            problems.append(f"{entry['path']} is missing")
        elif path.stat().st_size != entry["bytes"]:
            problems.append(f"{entry['path']} has {path.stat().st_size} bytes, the manifest "
                            f"says {entry['bytes']}")
        elif sha256(path) != entry["sha256"]:
            problems.append(f"{entry['path']} does not match its SHA-256")
    if problems:
        raise BackupError(f"the backup {source} is damaged: " + "; ".join(problems[:5]))
    return manifest


def restore(source: Path, data_dir: Path, force: bool = False) -> dict[str, Any]:
    """Verify a backup and copy it into `data_dir` (empty, or emptied with `force`); the
    caller holds the data directory's lock. The manifest's summary."""
    source, data_dir = Path(source).absolute(), Path(data_dir).absolute()
    manifest = read_manifest(source)
    data_dir.mkdir(parents=True, exist_ok=True)
    if source.resolve().is_relative_to(data_dir.resolve()):
        raise BackupError(f"the backup {source} lies inside the data directory {data_dir}")
    # a daemon started meanwhile waits for the restore: its lock and starting file are its own
    present = [p for p in data_dir.iterdir()
               if p.name not in ("daemon.lock", RESTORING, "daemon.starting.json")]
    if present and not force:
        raise BackupError(f"{data_dir} is not empty ({len(present)} entries such as "
                          f"{present[0].name}); restore into an empty data directory, or add "
                          "--force to replace what it holds")
    marker = data_dir / RESTORING
    marker.write_text(str(source), encoding="utf-8")
    for path in present:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    started = time.perf_counter()
    for entry in manifest["files"]:
        _copy(source / entry["path"], data_dir / entry["path"])
        if entry["path"].endswith(".token"):
            os.chmod(data_dir / entry["path"], 0o600)
    marker.unlink()
    log.info("restored %s (generation %s) into %s", source, manifest["generation"], data_dir)
    return summary(manifest) | {"path": str(source), "data_dir": str(data_dir),
                                "seconds": round(time.perf_counter() - started, 3)}


def check_not_restoring(data_dir: Path) -> None:
    """Refuse to open a data directory a restore left half-written."""
    marker = Path(data_dir) / RESTORING
    if marker.exists():
        source = marker.read_text(encoding="utf-8", errors="replace").strip()
        raise BackupError(f"a restore into {data_dir} from {source} did not finish (the process "
                          "that ran it ended before it copied every file, so the data "
                          "directory is half-written and does not open); run "
                          f"`psirag-kb --data-dir {data_dir} restore {source} --force` again")

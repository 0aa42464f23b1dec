"""Ingest: walk folders, read and chunk files, reuse or embed chunks, commit them in batches."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from psirag_kb.errors import Cancelled, KBError
from psirag_kb.ingest.chunking import content_hash
from psirag_kb.ingest.cluster import Cluster, ClusterGone, check_ray
from psirag_kb.ingest.clusterpipe import ClusterPipeline, ClusterStage
from psirag_kb.ingest.context import file_title, fit
from psirag_kb.ingest.documents import link_inside, link_outside
from psirag_kb.ingest.pipeline import POLL_S, Pipeline, Prepared
from psirag_kb.ingest.reading import BatchReader, Known, path_hash, reuse
from psirag_kb.ingest.report import IngestReport
from psirag_kb.paths import inside, resolved
from psirag_kb.storage.backup import save_behind
from psirag_kb.storage.records import UNAVAILABLE, ChunkRow, FileChange, FileRecord
from psirag_kb.storage.writer import WriterClosed

if TYPE_CHECKING:
    from psirag_kb.config import Config
    from psirag_kb.ingest.embedding import Embedder
    from psirag_kb.storage.store import Store
    from psirag_kb.storage.writer import Writer
    from psirag_kb.tree.stores import Stores

log = logging.getLogger(__name__)

BATCH_FILES = 64
BATCH_CHUNKS = 256
"""A batch ends after the file that brings it to this many chunks: a commit every few seconds
with MiniLM on two cores, so a stop or a kill loses little."""
SMALL_INGEST = 8
"""Ingests of more files than this run one at a time (the bulk lane); smaller ones never wait
for it, so an edit is committed while a folder is being indexed."""
STALE_RETRIES = 2
"""Times a batch whose files changed meanwhile is prepared again before the writer reads it."""
CLUSTER_RETRY_S = 60.0
"""After a Ray cluster could not be reached, ingests stay local this long before trying again
(each try costs a connection probe, and a child process when the head answers)."""
CLOSE_WAIT_S = 3.0
"""How long closing waits for a reader thread to notice the stop."""

Progress = Callable[[int, int, str], None]
"""progress(done, total, current item)"""


def file_hash(data: bytes) -> str:
    """Content hash of a file's bytes."""
    return hashlib.sha256(data).hexdigest()


def _storable(path: Path) -> bool:
    """Whether a path can be stored in DuckDB (names that are not UTF-8 decode to surrogates)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(path: Path) -> str:
    """A path with undecodable bytes shown as \\xNN escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _external_reason(path: Path, folder: Path) -> str | None:
    """Why a symlink to a file outside the folder being indexed is skipped; None if it is not."""
    target = link_outside(path, folder)
    if target is None:
        return None
    return (f"symlink to {_printable(target)}, outside the folder {folder}; "
            "set [ingest] follow_external_links = true to index it")


def one_per_file(found: Iterable[tuple[Path, Path]]) -> tuple[dict[Path, Path], list[Path]]:
    """(file -> folder it was found in, the other spellings of those files) from (file,
    folder) pairs in the order named: one entry per directory entry, two spellings being the
    same when their folders resolve to the same one (`D/sub` named beside `D`, a file named
    beside its folder, a link to a folder beside the folder). The first spelling wins."""
    folders: dict[Path, Path] = {}
    first: dict[str, str] = {}  # resolved folder + name -> the first spelling; strings, as
    others: list[Path] = []     # with Path objects 100,000 files took 2.5 s, with these 0.4 s
    real: dict[str, str] = {}
    for path, folder in found:
        spelling = str(path)
        head, _, name = spelling.rpartition(os.sep)
        parent = real.get(head)
        if parent is None:
            parent = real[head] = str(resolved(head or os.sep)).rstrip(os.sep)
        if first.setdefault(f"{parent}{os.sep}{name}", spelling) == spelling:
            folders.setdefault(path, folder)
        else:
            others.append(path)
    return folders, list(dict.fromkeys(others))


def name_header(old: Path | str, new: Path | str) -> str | None:
    """The header a file's old name gave its chunks with no title and no heading, when the
    new name gives them another (None when the name stays the same)."""
    before, after = fit([file_title(old)]), fit([file_title(new)])
    return before if before != after else None


def _empty(folder: Path) -> bool:
    """Whether a folder is missing or holds no entry at all (an unmounted drive's mount point)."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return True


def _gone_reason(folder: Path) -> str:
    """Why a vanished folder's files are unavailable."""
    if folder.is_dir():
        return f"folder {folder} is empty (a drive or share not mounted?)"
    return f"folder {folder} is missing (moved, or a drive or share not mounted?)"


def read_records(path: Path, data: bytes) -> list[ChunkRow]:
    """One chunk row per {"id","title","text"} line of a benchmark corpus."""
    rows: list[ChunkRow] = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            title, text = str(item.get("title", "")).strip(), str(item["text"]).strip()
            source = str(item["id"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KBError(f"{path}:{number}: not a {{id, title, text}} record ({exc})") from exc
        body = f"{title}\n{text}" if title else text
        rows.append(ChunkRow(len(rows), source, None, None, None, None, body, content_hash(body)))
    return rows


class Ingestion:
    """Files and corpora in, removals and renames, written through the stores' writer.

    A file ingest reads on a reader thread and embeds on an embedder thread (`pipeline.py`) and
    hands the writer thread only ready batches; removals, renames and corpora are writer tasks.
    Large ingests run one at a time; small ones (an edited file) interleave with them.
    """

    def __init__(self, config: Config, embedder: Embedder, stores: Stores) -> None:
        self.config = config
        self.data_dir = config.data_dir
        self.embedder = embedder
        self.stores = stores
        self.reader = BatchReader(config, embedder)
        self.embed_seconds = 0.0
        self._lane = threading.Lock()
        self._stopping = threading.Event()
        self._readers = 0
        self._running = 0
        self._idle = threading.Condition()
        self._cluster_lock = threading.Lock()
        self._ray: Cluster | None = None
        self._ray_retry = 0.0
        self.ray_actors: int | None = None
        """Ray actors to start (None: one per CPU of the cluster); benchmarks set it."""

    def _cluster(self, large: bool, check_stop: Callable[[], None]) -> Cluster | None:
        """The Ray cluster a large ingest runs on ([compute] ray_address), started on first
        use; None for local work (no address, a small ingest, or the cluster unreachable: a
        warning says so, and it is tried again after `CLUSTER_RETRY_S`)."""
        address = self.config.compute.ray_address
        if not address or not large:
            return None
        with self._cluster_lock:
            if self._ray is not None and self._ray.alive:
                return self._ray
            if time.monotonic() < self._ray_retry:
                return None
            self._ray = None
            cluster = Cluster(address, self.config, self.ray_actors)
            try:
                check_ray(self.config, self.embedder)
                cluster.start(check_stop)
            except ClusterGone as exc:
                log.warning("%s; ingesting on this machine", exc)
                self._ray_retry = time.monotonic() + CLUSTER_RETRY_S
                return None
            self._ray = cluster
            return cluster

    def compute_status(self) -> dict[str, Any]:
        """Where large ingests read and embed: {"ray_address", "state" (local, not started,
        connected, gone: lost mid-ingest, unreachable: at the last try), "workers", "nodes"}."""
        address = self.config.compute.ray_address
        ray = self._ray
        if not address:
            return {"ray_address": "", "state": "local", "workers": 0, "nodes": []}
        if ray is not None and ray.alive:
            nodes = sorted({node for node, _ in ray.nodes})
            return {"ray_address": address, "state": "connected", "workers": ray.workers,
                    "nodes": nodes}
        state = "gone" if ray is not None else "unreachable" if self._ray_retry else "not started"
        return {"ray_address": address, "state": state, "workers": 0, "nodes": []}

    def stop(self, wait_s: float = 0.0) -> None:
        """Stop every running and later ingest after its committed batch (the knowledge base
        is closing); wait up to `wait_s` for reader threads inside a batch (one file at most)
        to stop using the store."""
        self._stopping.set()
        with self._cluster_lock:
            if self._ray is not None:
                self._ray.close()
        with self._idle:
            self._idle.wait_for(lambda: self._readers == 0, wait_s)

    def _check_stop(self) -> None:
        """Raise `Cancelled` when closing (asked between files, slices and batches)."""
        if self._stopping.is_set() or self.writer.closed:
            raise Cancelled("stopped after the committed batch")

    @property
    def store(self) -> Store:
        """The DuckDB store."""
        return self.stores.store

    @property
    def writer(self) -> Writer:
        """The stores' writer thread."""
        return self.stores.writer

    def _ignored(self, path: Path) -> bool:
        """Whether a path component matches an ignore pattern or is hidden."""
        for part in path.parts:
            if part in ("", "/", ".", ".."):
                continue
            if not self.config.ingest.include_hidden and part.startswith("."):
                return True
            if any(fnmatch.fnmatch(part, pattern) for pattern in self.config.ingest.ignore):
                return True
        return False

    def ignored(self, path: Path) -> bool:
        """Whether a path (relative to a watched or ingested folder) is never indexed."""
        return self._ignored(path)

    def _walk(self, folder: Path) -> Iterator[Path]:
        """Files below a folder (no symlinked folders, no links to files inside it, ignore
        patterns applied)."""
        for root, dirs, files in os.walk(folder, followlinks=False):
            root_path = Path(root)
            if inside(root_path, self.data_dir):
                dirs[:] = []
                continue
            dirs[:] = sorted(d for d in dirs if not self._ignored(Path(d)))
            for name in sorted(files):
                path = root_path / name
                if not self._ignored(Path(name)) and not link_inside(path, [folder]):
                    yield path

    def ingest(
        self, paths: Iterable[Path | str], progress: Progress | None = None,
        keep_vanished: bool = False,
    ) -> IngestReport:
        """Index files and folders; unchanged files are skipped, missing ones removed.

        A known file that vanishes between listing and reading is removed, unless
        `keep_vanished` (the watcher's choice: the delete or move event that follows decides,
        so a folder moved mid-ingest keeps its leaves).
        """
        paths = [Path(os.path.abspath(os.path.expanduser(raw))) for raw in paths]
        if self.writer.closed:
            raise WriterClosed("the knowledge base is closing; the write was not done")
        with self._idle:
            self._running += 1
        try:
            return self._ingest(paths, progress, keep_vanished)
        finally:
            with self._idle:
                self._running -= 1

    @property
    def running(self) -> int:
        """File ingests in progress (they read and embed before the writer sees them)."""
        return self._running

    def _plan(self, paths: list[Path], keep_vanished: bool, report: IngestReport
              ) -> tuple[list[Path], list[str], dict[Path, Path], dict[str, str]]:
        """The files to read (once each, whatever the overlap of the paths named), the known
        paths to remove, each file's folder (a named file's parent) and the files whose folder
        vanished (-> why), from a listing and a snapshot of the records."""
        named: list[tuple[Path, Path]] = []  # (file, folder it was found in or its parent)
        removals: list[str] = []
        vanished: dict[str, str] = {}  # path of a file whose folder vanished -> why
        for path in paths:
            if path.is_dir():
                found = list(self._walk(path))
                named.extend((p, path) for p in found)
                present = {str(p) for p in found}
                known = self.store.files(str(path))
                gone = [r for r in known if r.origin == "file" and r.path not in present]
                removals.extend(self._vanished_below(path, gone, vanished))
            elif path.is_file():
                named.append((path, path.parent))
            elif known := self.store.files(str(path)):
                removals.extend(self._missing(path, known, keep_vanished, vanished, report))
            elif not keep_vanished:  # the watcher's paths may vanish before they are read
                raise KBError(f"{path} does not exist")
        folders, doubles = one_per_file(named)  # file -> folder, once per file
        files = list(folders)
        removals.extend(self.store.records(str(p) for p in doubles))
        removals = [r for r in dict.fromkeys(removals) if Path(r) not in folders]
        for path in [p for p in files if not _storable(p)]:
            files.remove(path)
            report.failed += 1
            report.problems.append((_printable(path), "failed",
                                    "file name is not valid UTF-8; rename the file to index it"))
        return files, removals, folders, vanished

    def _ingest(self, paths: list[Path], progress: Progress | None,
                keep_vanished: bool) -> IngestReport:
        """`ingest`: plan, apply removals and renames, then read, embed and commit batches
        (in a pipeline; one batch after another when already on the writer thread)."""
        report = IngestReport()
        inline = self.writer.on_writer_thread()
        large = len(paths) > SMALL_INGEST or any(path.is_dir() for path in paths)
        with self._bulk_lane() if large and not inline else nullcontext():
            files, removals, folders, vanished = self._plan(paths, keep_vanished, report)
            linked = self._external_links(files, folders, report)
            files = [p for p in files if p not in linked]
            build = self.stores.last_build
            changed = [c for c in linked.values() if c is not None]
            expected = self.store.records(removals)
            pairs = self._rename_pairs(files, expected)
            owned = self.writer.call(
                lambda: self._begin(changed, removals, expected, pairs, vanished, report))
            stopped = True
            try:
                if inline:
                    self._ingest_inline(files, report, progress, keep_vanished)
                else:
                    self._ingest_pipelined(files, report, progress, keep_vanished, large)
                stopped = False
            finally:
                if owned:  # a bulk ingest builds the tree here, unless the KB is closing
                    self._end_bulk(stopped, report)
        if large and not inline:
            self._save_when_far_behind()
        if self.stores.last_build is not build:
            report.tree_build = self.stores.last_build
        return report

    def _missing(self, path: Path, known: list[FileRecord], keep_vanished: bool,
                 vanished: dict[str, str], report: IngestReport) -> list[str]:
        """A named path that does not exist: a file is removed; a folder's files are kept as
        unavailable (unless the watcher saw a small folder go: then they are removed)."""
        if known[0].path == str(path):
            return [str(path)]
        indexed = [r.path for r in known if r.state == "indexed"]
        kept = sum(r.state in ("indexed", UNAVAILABLE) for r in known)
        if keep_vanished and kept < self.config.ingest.vanished_folder_min_files:
            return [r.path for r in known]
        reason = _gone_reason(path)
        vanished.update(dict.fromkeys(indexed, reason))
        if not keep_vanished:
            report.problems.append((str(path), UNAVAILABLE, (
                f"{reason}: its {len(known)} indexed file(s) stay searchable as unavailable "
                f"until it returns; `psirag-kb forget {path}` removes them")))
        return []

    def _vanished_below(self, folder: Path, gone: list[FileRecord],
                        vanished: dict[str, str]) -> list[str]:
        """Split the known files missing from a walked folder: those whose folder vanished as a
        whole (the walked folder itself empty, or a folder below it missing or empty that held
        [ingest] vanished_folder_min_files or more) go to `vanished`; the rest are returned, to
        be removed. Costs one check per folder of the missing files."""
        empty: dict[Path, bool] = {}
        groups: dict[Path, list[FileRecord]] = defaultdict(list)
        removals: list[str] = []
        for record in gone:
            ancestor = folder
            for part in (None, *Path(record.path).relative_to(folder).parts[:-1]):
                ancestor = ancestor if part is None else ancestor / part
                if ancestor not in empty:
                    empty[ancestor] = _empty(ancestor)
                if empty[ancestor]:
                    groups[ancestor].append(record)
                    break
            else:
                removals.append(record.path)  # its folder is there: the file was deleted
        least = self.config.ingest.vanished_folder_min_files
        for top, records in groups.items():
            indexed = [r.path for r in records if r.state == "indexed"]
            kept = sum(r.state in ("indexed", UNAVAILABLE) for r in records)
            if top != folder and kept < least:
                removals.extend(r.path for r in records)
            else:
                vanished.update(dict.fromkeys(indexed, _gone_reason(top)))
        return removals

    def _mark_unavailable(self, vanished: dict[str, str], report: IngestReport) -> None:
        """Mark files whose folder vanished unavailable, one update per reason."""
        by_reason: dict[str, list[str]] = defaultdict(list)
        for path, reason in vanished.items():
            by_reason[reason].append(path)
        for reason, paths in by_reason.items():
            marked = self.store.mark_unavailable(paths, reason)
            report.unavailable += marked
            if marked:
                log.info("%d file(s) unavailable: %s", marked, reason)

    def vanish(self, folders: Iterable[Path | str]) -> int:
        """Mark the indexed files of watched folders that vanished unavailable (their chunks
        stay searchable); returns how many were marked."""
        keys = [Path(os.path.abspath(f)) for f in folders]

        def run() -> int:
            report = IngestReport()
            for folder in keys:
                paths = [r.path for r in self.store.files(str(folder)) if r.state == "indexed"]
                self._mark_unavailable(dict.fromkeys(paths, _gone_reason(folder)), report)
            return report.unavailable

        return self.writer.call(run, key=("vanish", tuple(map(str, keys))))

    def _save_when_far_behind(self) -> None:
        """After a large ingest, save hnswlib and checkpoint DuckDB when the saved index lacks
        more vectors than a backup leaves to a restore: so that neither the next backup nor a
        restart after a crash does it (a million vectors would be inserted again)."""
        dense = self.stores.dense
        if dense.unsaved <= save_behind(dense.count):
            return
        try:
            self.writer.call(self.stores.checkpoint_now, key="checkpoint")
        except WriterClosed:  # closing: the close saves it
            pass

    @contextmanager
    def _bulk_lane(self) -> Iterator[None]:
        """Hold the lane of large ingests (waiting for the one running, unless closing)."""
        while not self._lane.acquire(timeout=POLL_S):
            self._check_stop()
        try:
            yield
        finally:
            self._lane.release()

    def _end_bulk(self, stopped: bool, report: IngestReport) -> None:
        """Build the tree a bulk ingest deferred; a closing knowledge base leaves it to the
        next start (which finds chunks without a tree and rebuilds it)."""
        closing = stopped and (self._stopping.is_set() or self.writer.closed)
        started = time.perf_counter()
        try:
            self.writer.call(lambda: self.stores.end_bulk(build=not closing))
        except WriterClosed:
            return
        report.timed("tree", time.perf_counter() - started)

    def _begin(self, changed: list[FileChange], removals: list[str],
               expected: dict[str, FileRecord], pairs: list[tuple[str, str]],
               vanished: dict[str, str], report: IngestReport) -> bool:
        """On the writer: defer the tree of a bulk ingest, apply renames (chunks headed by the
        old file name are read again), removals, files whose folder vanished and linked files'
        states; True when this call must end the bulk."""
        owned = self.stores.begin_bulk()
        left = set(removals)
        for old, new in pairs:
            if self.stores.rename(old, new, self._name_header(old, new)):
                left.discard(old)
                report.renamed += 1
        self._mark_unavailable(vanished, report)
        current = self.store.records(left)
        removals = [p for p in removals if p in left and current.get(p) == expected.get(p)]
        if removals or changed:
            self._apply(changed, removals, report)
            report.removed += len(removals)
        return owned

    def _ingest_inline(self, files: list[Path], report: IngestReport,
                       progress: Progress | None, keep_vanished: bool) -> None:
        """Read, embed and commit batch after batch on the writer thread itself."""
        total = len(files)
        for start in range(0, total, BATCH_FILES):
            self.writer.check_cancel()
            batch = files[start:start + BATCH_FILES]
            self._ingest_batch(batch, report, keep_vanished)
            if progress:
                progress(min(start + len(batch), total), total, str(batch[-1]))

    def _ingest_pipelined(self, files: list[Path], report: IngestReport,
                          progress: Progress | None, keep_vanished: bool,
                          large: bool = False) -> None:
        """Read on a reader thread, embed on an embedder thread (or, for a large ingest with
        [compute] ray_address, both on the Ray cluster), commit ready batches on the writer;
        this thread waits (a Ctrl-C stops the pipeline after its committed batch)."""
        total, done = len(files), 0

        def committed(prepared: Prepared, future: Future) -> None:
            nonlocal done
            try:
                fresh = future.result()
            except WriterClosed as exc:  # closing: the batch is read again at the next start
                raise Cancelled("the knowledge base closed before the batch was committed") \
                    from exc
            batch = prepared.report if fresh else self._redo(prepared, keep_vanished)
            report.merge(batch)
            done += len(prepared.paths)
            if progress:
                progress(done, total, str(prepared.paths[-1]))

        interrupted = threading.Event()

        def check_stop() -> None:
            if interrupted.is_set():
                raise Cancelled("interrupted")
            self._check_stop()

        def commit(prepared: Prepared) -> Future:
            return self.writer.submit(lambda: self._commit(prepared))

        def local(paths: list[Path]) -> None:
            Pipeline(
                prepare=lambda batch: self._prepare_batch(batch, keep_vanished, BATCH_CHUNKS),
                embed=lambda prepared: self._embed(prepared.pending, prepared.report),
                commit=commit, committed=committed, check_stop=check_stop,
                batch_files=BATCH_FILES,
            ).run(paths)

        cluster = self._cluster(large, check_stop) if files else None
        if cluster is None:
            run: Callable[[list[Path]], None] = local
        else:
            stage = ClusterStage(self, keep_vanished, BATCH_CHUNKS)
            run = ClusterPipeline(cluster, stage.send, stage.receive, commit, committed,
                                  check_stop, local, BATCH_FILES).run
        outcome: list[BaseException] = []
        started, embedded_before = time.perf_counter(), report.chunks_embedded

        def embed_and_commit() -> None:
            try:
                run(files)
            except BaseException as exc:  # noqa: BLE001 - raised again by the caller
                outcome.append(exc)

        # the model runs on a thread of its own, as it did on the writer: on the caller's
        # (the main) thread it embedded at half the speed (BENCHMARKS.md, issue 24)
        worker = threading.Thread(target=embed_and_commit, name="psirag-embedder", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(POLL_S)
        except BaseException:  # Ctrl-C: stop after the committed batch
            interrupted.set()
            worker.join()
            raise
        if outcome:
            raise outcome[0]
        if self.config.compute.ray_address:
            report.compute = self._where(cluster, large, len(files),
                                         report.chunks_embedded - embedded_before,
                                         time.perf_counter() - started)

    def _where(self, cluster: Cluster | None, large: bool, files: int, chunks: int,
               seconds: float) -> dict[str, Any]:
        """Where an ingest with [compute] ray_address ran: the cluster (address, workers,
        nodes, rates; whether it went away midway) or this machine and why."""
        rates = {"files": files, "chunks": chunks, "seconds": round(seconds, 3),
                 "files_per_s": round(files / seconds, 2) if seconds > 0 else None,
                 "chunks_per_s": round(chunks / seconds, 2) if seconds > 0 else None}
        if cluster is None:
            why = ("a small ingest runs here" if not large else
                   "the cluster could not be reached (see the warning)")
            return {"where": "local", "ray_address": self.config.compute.ray_address,
                    "reason": why, **rates}
        return {"where": "ray", "ray_address": cluster.address, "workers": cluster.workers,
                "nodes": sorted({node for node, _ in cluster.nodes}),
                "finished_on_ray": cluster.alive, **rates}

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Count a batch being read, so closing can wait until no reader uses the store."""
        with self._idle:
            self._readers += 1
        try:
            yield
        finally:
            with self._idle:
                self._readers -= 1
                self._idle.notify_all()

    def _prepare_batch(self, paths: list[Path], keep_vanished: bool,
                       max_chunks: int | None) -> tuple[Prepared, list[Path]]:
        """Read and chunk files from a snapshot of their records, and pick the chunks to
        embed (off the writer); returns the batch and the paths left for the next one."""
        with self._reading():
            self._check_stop()
            report = IngestReport()
            started = time.perf_counter()
            records = self.store.records(str(p) for p in paths)
            changes, taken = self._read_batch(paths, records, report, keep_vanished,
                                              max_chunks)
            report.timed("read", time.perf_counter() - started)
            self._check_stop()
            kept = [c for c in changes if c.state != "removed"]
            changed = {c.path: records[c.path] for c in kept if c.path in records}
            pending = reuse(kept, self._known(changed), report)
        expected = {c.path: records.get(c.path) for c in changes}
        return Prepared(paths[:taken], changes, expected, report, pending), paths[taken:]

    def _commit(self, prepared: Prepared) -> bool:
        """On the writer: apply a ready batch, or nothing (False) when one of its files or
        records changed since it was prepared."""
        if self._stale(prepared):
            return False
        removals = [c.path for c in prepared.changes if c.state == "removed"]
        changes = [c for c in prepared.changes if c.state != "removed"]
        if changes or removals:
            self._apply(changes, removals, prepared.report)
        return True

    def _stale(self, prepared: Prepared) -> bool:
        """Whether a record changed since the batch was prepared (another write came between)
        or a file read for it changed or vanished on disk since."""
        current = self.store.records(prepared.expected)
        for change in prepared.changes:
            if current.get(change.path) != prepared.expected[change.path]:
                return True
            if change.state == "indexed" and not change.keep_chunks:
                try:
                    stat = os.stat(change.path)
                except OSError:
                    return True
                if (stat.st_size, stat.st_mtime) != (change.size, change.mtime):
                    return True
        return False

    def _redo(self, prepared: Prepared, keep_vanished: bool) -> IngestReport:
        """Prepare a stale batch again and commit it; after `STALE_RETRIES` the writer reads
        it itself, against the records it holds."""
        paths = prepared.paths
        for _ in range(STALE_RETRIES):
            self._check_stop()
            again, _ = self._prepare_batch(paths, keep_vanished, None)
            self._embed(again.pending, again.report)
            if self.writer.call(lambda batch=again: self._commit(batch)):
                return again.report
        report = IngestReport()
        self.writer.call(lambda: self._ingest_batch(paths, report, keep_vanished))
        return report

    def _external_links(self, files: list[Path], folders: dict[Path, Path],
                        report: IngestReport) -> dict[Path, FileChange | None]:
        """Symlinks to files outside their folder, each with its skipped state (None when that
        is recorded already); none with [ingest] follow_external_links."""
        if self.config.ingest.follow_external_links:
            return {}
        reasons = {p: r for p in dict.fromkeys(files) if (r := _external_reason(p, folders[p]))}
        records = self.store.records(str(p) for p in reasons)
        linked: dict[Path, FileChange | None] = {}
        for path, reason in reasons.items():
            report.skipped += 1
            report.problems.append((str(path), "skipped", reason))
            record = records.get(str(path))
            known = record is not None and (record.state, record.reason) == ("skipped", reason)
            linked[path] = None if known else FileChange(str(path), "file", "", 0, 0.0,
                                                         "skipped", reason)
        return linked

    def _apply(self, changes: list[FileChange], removals: list[str],
               report: IngestReport) -> None:
        """Commit, timing the tree update apart from the rest of the store."""
        started, tree_before = time.perf_counter(), self.stores.tree_seconds
        self.stores.apply(changes, removals)
        tree = self.stores.tree_seconds - tree_before
        report.timed("tree", tree)
        report.timed("store", time.perf_counter() - started - tree)

    def _rename_pairs(self, files: list[Path],
                      expected: dict[str, FileRecord]) -> list[tuple[str, str]]:
        """(vanished path, new path) of new files with a vanished file's content (hashed here,
        off the writer)."""
        by_hash: dict[str, str] = {}
        for path, record in expected.items():
            if record.state == "indexed" and record.hash:
                by_hash.setdefault(record.hash, path)
        if not by_hash:
            return []
        known = self.store.records(str(p) for p in files)
        pairs = []
        for path in files:
            if not by_hash:
                break
            if str(path) in known:
                continue
            try:
                digest = path_hash(path)
            except OSError:
                continue
            old = by_hash.pop(digest, None)
            if old is not None:
                pairs.append((old, str(path)))
        return pairs

    def is_indexed(self, path: Path | str) -> bool:
        """Whether a file, or anything below a folder, is known to the knowledge base."""
        return bool(self.store.files(os.path.abspath(path)))

    def _name_header(self, old: Path | str, new: Path | str) -> str | None:
        """`name_header` when chunks have headers."""
        return name_header(old, new) if self.config.ingest.chunk_context else None

    def rename(self, old: Path | str, new: Path | str) -> bool:
        """A file moved: its record and leaves stay, its path changes; chunks whose header
        was the old file name are embedded again with the new one."""
        old, new = os.path.abspath(old), os.path.abspath(new)
        header = self._name_header(old, new)
        moved = self.writer.call(lambda: self.stores.rename(old, new, header),
                                 key=("rename", old, new))
        record = self.store.file(new) if moved and header else None
        if (record is not None and record.state == "indexed" and not record.hash
                and os.path.isfile(new)):
            self.ingest([new], keep_vanished=True)  # read again: the headers name it
        return moved

    def _prepare(
        self, path: Path, record: FileRecord | None, report: IngestReport,
        keep_vanished: bool = False,
    ) -> FileChange | None:
        """Read and chunk one file (known as `record`); None when it is unchanged."""
        return self.reader.prepare(path, record, report, keep_vanished)

    def _known(self, records: dict[str, FileRecord]) -> Known:
        """The stored chunks (id, hash) of known files, for `reuse` (one lookup per file)."""
        return {path: self.store.chunk_hashes(record.id) for path, record in records.items()
                if record.chunks}

    def _reuse_and_embed(self, changes: list[FileChange], report: IngestReport) -> None:
        """Keep chunks whose hash is unchanged; embed the others."""
        records = self.store.records(change.path for change in changes)
        self._embed(reuse(changes, self._known(records), report), report)

    def _embed(self, rows: list[ChunkRow], report: IngestReport) -> None:
        """Embed chunks in slices of similar length (a stop is noticed between slices)."""
        inline = self.writer.on_writer_thread()
        self.embed_seconds += self.reader.embed(rows, report,
                                                None if inline else self._check_stop)

    def _read_batch(
        self, paths: list[Path], records: dict[str, FileRecord], report: IngestReport,
        keep_vanished: bool = False, max_chunks: int | None = None,
    ) -> tuple[list[FileChange], int]:
        """Read and chunk files until they run out or (after at least one) their chunks reach
        `max_chunks`; returns the changes and how many paths were taken."""
        check = None if self.writer.on_writer_thread() else self._check_stop
        return self.reader.read_batch(paths, records, report, keep_vanished, max_chunks, check)

    def _ingest_batch(
        self, paths: list[Path], report: IngestReport, keep_vanished: bool = False
    ) -> None:
        """Prepare, embed and commit a batch of files (on the writer thread)."""
        started = time.perf_counter()
        records = self.store.records(str(p) for p in paths)
        changes, _ = self._read_batch(paths, records, report, keep_vanished)
        report.timed("read", time.perf_counter() - started)
        removals = [c.path for c in changes if c.state == "removed"]
        changes = [c for c in changes if c.state != "removed"]
        if changes or removals:
            self._reuse_and_embed(changes, report)
            self._apply(changes, removals, report)

    def ingest_jsonl(self, path: Path | str, progress: Progress | None = None) -> IngestReport:
        """Index a benchmark corpus: one leaf per {"id","title","text"} record."""
        path = Path(os.path.abspath(path))
        return self.writer.call(lambda: self._ingest_jsonl(path, progress),
                                key=("ingest-jsonl", str(path)))

    def _ingest_jsonl(self, path: Path, progress: Progress | None) -> IngestReport:
        """`ingest_jsonl` on the writer thread."""
        report = IngestReport()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise KBError(f"cannot read corpus {path}: {exc}") from exc
        digest = file_hash(data)
        record = self.store.file(str(path))
        if record and record.hash == digest:
            report.unchanged += 1
            return report
        rows = read_records(path, data)
        change = FileChange(str(path), "corpus", digest, len(data), path.stat().st_mtime,
                            "indexed", "", rows)
        with self.stores.bulk():
            if record is None:
                report.added += 1
            else:
                report.updated += 1
            self._reuse_and_embed([change], report)
            self.stores.apply([change])
        if progress:
            progress(len(rows), len(rows), str(path))
        return report

    def ingest_corpora(
        self, corpora: Iterable[Path], batches: int = 1, seed: int = 0
    ) -> dict[str, float]:
        """Index benchmark corpora: at once, or shuffled in sequential incremental batches."""
        corpora = [Path(os.path.abspath(c)) for c in corpora]
        return self.writer.call(lambda: self._ingest_corpora(corpora, batches, seed))

    def _ingest_corpora(self, corpora: list[Path], batches: int, seed: int) -> dict[str, float]:
        """`ingest_corpora` on the writer thread."""
        self.embed_seconds = self.stores.tree_seconds = 0.0
        if batches <= 1:
            with self.stores.bulk():
                for corpus in corpora:
                    self._ingest_jsonl(corpus, None)
        else:
            rows = [row for corpus in corpora
                    for row in read_records(Path(corpus), Path(corpus).read_bytes())]
            order = np.random.default_rng(seed).permutation(len(rows))
            for number, part in enumerate(np.array_split(order, batches)):
                batch = [rows[i] for i in part]
                for ordinal, row in enumerate(batch):
                    row.ordinal = ordinal
                change = FileChange(f"batch-{number:05d}", "corpus", f"batch-{number}",
                                    0, 0.0, "indexed", "", batch)
                self._reuse_and_embed([change], IngestReport())
                self.stores.apply([change])
        return {"embed_s": round(self.embed_seconds, 2),
                "tree_build_s": round(self.stores.tree_seconds, 2)}

    def forget(self, paths: Iterable[Path | str]) -> int:
        """Remove files and folders on purpose, available or not; an error when nothing is
        known under a path."""
        keys = [os.path.abspath(os.path.expanduser(raw)) for raw in paths]
        unknown = [key for key in keys if not self.store.files(key)]
        if unknown:
            raise KBError(f"nothing is indexed at or below {', '.join(unknown)}")
        return self.remove(keys)

    def forget_unwatched(self, folders: Iterable[Path | str]) -> int:
        """Record the watched folders; remove the unavailable files of folders watched the
        last time and not now (they could only come back through the watcher)."""
        now = [os.path.abspath(f) for f in folders]

        def run() -> int:
            before = json.loads(self.store.meta().get("watched_folders", "[]"))
            dropped = [f for f in before if not any(inside(Path(f), Path(n)) for n in now)]
            targets = [r.path for f in dropped for r in self.store.files(f)
                       if r.state == UNAVAILABLE]
            if targets:
                self.stores.apply([], targets)
                log.warning("forgot %d unavailable file(s) of folder(s) no longer watched: %s",
                            len(targets), ", ".join(dropped))
            self.store.set_meta_value("watched_folders", json.dumps(now))
            return len(targets)

        return self.writer.call(run, key="forget-unwatched")

    def remove(self, paths: Iterable[Path | str]) -> int:
        """Forget files (and everything below folders); returns how many were removed."""
        keys = tuple(os.path.abspath(os.path.expanduser(raw)) for raw in paths)

        def run() -> int:
            targets = [r.path for key in keys for r in self.store.files(key)]
            if targets:
                self.stores.apply([], targets)
            return len(targets)

        return self.writer.call(run, key=("remove", keys))


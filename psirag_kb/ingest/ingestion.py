"""Ingest: walk folders, read and chunk files, reuse or embed chunks, commit them in batches."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psirag_kb.errors import Cancelled, KBError
from psirag_kb.ingest.clusterpipe import ClusterPipeline, ClusterStage
from psirag_kb.ingest.compute import Compute
from psirag_kb.ingest.corpora import Corpora
from psirag_kb.ingest.pipeline import POLL_S, Pipeline, Prepared
from psirag_kb.ingest.reading import BatchReader, Known, reuse
from psirag_kb.ingest.renames import Renames
from psirag_kb.ingest.report import IngestReport, Progress
from psirag_kb.ingest.vanished import Vanished
from psirag_kb.ingest.walk import Walker, one_per_file, printable, storable
from psirag_kb.storage.backup import save_behind
from psirag_kb.storage.records import ChunkRow, FileChange, FileRecord
from psirag_kb.storage.writer import WriterClosed

if TYPE_CHECKING:
    from psirag_kb.config import Config
    from psirag_kb.ingest.embedding import Embedder
    from psirag_kb.storage.store import Store
    from psirag_kb.storage.writer import Writer
    from psirag_kb.tree.stores import Stores

BATCH_FILES = 64
BATCH_CHUNKS = 256
"""A batch ends after the file that brings it to this many chunks: a commit every few seconds
with MiniLM on two cores, so a stop or a kill loses little."""
SMALL_INGEST = 8
"""Ingests of more files than this run one at a time (the bulk lane); smaller ones never wait
for it, so an edit is committed while a folder is being indexed."""
STALE_RETRIES = 2
"""Times a batch whose files changed meanwhile is prepared again before the writer reads it."""
CLOSE_WAIT_S = 3.0
"""How long closing waits for a reader thread to notice the stop."""


class Ingestion:
    """Files and corpora in, removals and renames, written through the stores' writer.

    A file ingest reads on a reader thread and embeds on an embedder thread (`pipeline.py`) and
    hands the writer thread only ready batches; removals, renames and corpora are writer tasks.
    Large ingests run one at a time; small ones (an edited file) interleave with them.
    """

    def __init__(self, config: Config, embedder: Embedder, stores: Stores) -> None:
        self.config = config
        self.embedder = embedder
        self.stores = stores
        self.reader = BatchReader(config, embedder)
        self.walker = Walker(config)
        self.vanished = Vanished(config, stores)
        self.renames = Renames(config, stores)
        self.corpora = Corpora(stores, self)
        self.compute = Compute(config)
        self.embed_seconds = 0.0
        self._lane = threading.Lock()
        self._stopping = threading.Event()
        self._readers = 0
        self._running = 0
        self._idle = threading.Condition()

    def stop(self, wait_s: float = 0.0) -> None:
        """Stop every running and later ingest after its committed batch (the knowledge base
        is closing); wait up to `wait_s` for reader threads inside a batch (one file at most)
        to stop using the store."""
        self._stopping.set()
        self.compute.close()
        with self._idle:
            self._idle.wait_for(lambda: self._readers == 0, wait_s)

    def check_stop(self) -> None:
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

    def ignored(self, path: Path) -> bool:
        """Whether a path (relative to a watched or ingested folder) is never indexed."""
        return self.walker.ignored(path)

    def compute_status(self) -> dict[str, Any]:
        """Where large ingests read and embed (see `Compute.status`)."""
        return self.compute.status()

    def ingest(
        self, paths: Iterable[Path | str], progress: Progress | None = None,
        keep_vanished: bool = False,
    ) -> IngestReport:
        """Index files and folders; unchanged files are skipped, missing ones removed.

        A known file that vanishes between listing and reading is removed, unless
        `keep_vanished` (the watcher's choice: the delete or move event that follows decides,
        so a folder moved mid-ingest keeps its leaves).
        """
        wanted = [Path(os.path.abspath(os.path.expanduser(raw))) for raw in paths]
        if self.writer.closed:
            raise WriterClosed("the knowledge base is closing; the write was not done")
        with self._idle:
            self._running += 1
        try:
            return self._ingest(wanted, progress, keep_vanished)
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
                found = list(self.walker.files(path))
                named.extend((p, path) for p in found)
                present = {str(p) for p in found}
                known = self.store.files(str(path))
                gone = [r for r in known if r.origin == "file" and r.path not in present]
                removals.extend(self.vanished.below(path, gone, vanished))
            elif path.is_file():
                named.append((path, path.parent))
            elif known := self.store.files(str(path)):
                removals.extend(self.vanished.missing(path, known, keep_vanished, vanished,
                                                          report))
            elif not keep_vanished:  # the watcher's paths may vanish before they are read
                raise KBError(f"{path} does not exist")
        folders, doubles = one_per_file(named)  # file -> folder, once per file
        files = list(folders)
        removals.extend(self.store.records(str(p) for p in doubles))
        removals = [r for r in dict.fromkeys(removals) if Path(r) not in folders]
        for path in [p for p in files if not storable(p)]:
            files.remove(path)
            report.failed += 1
            report.problems.append((printable(path), "failed",
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
            linked = self.walker.external_links(self.store, files, folders, report)
            files = [p for p in files if p not in linked]
            build = self.stores.last_build
            changed = [c for c in linked.values() if c is not None]
            expected = self.store.records(removals)
            pairs = self.renames.pairs(files, expected)
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
            self.check_stop()
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
        left = set(removals) - self.renames.apply(pairs, report)
        self.vanished.mark_unavailable(vanished, report)
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
            self.check_stop()

        def commit(prepared: Prepared) -> Future:
            return self.writer.submit(lambda: self._commit(prepared))

        def local(paths: list[Path]) -> None:
            Pipeline(
                prepare=lambda batch: self._prepare_batch(batch, keep_vanished, BATCH_CHUNKS),
                embed=lambda prepared: self._embed(prepared.pending, prepared.report),
                commit=commit, committed=committed, check_stop=check_stop,
                batch_files=BATCH_FILES,
            ).run(paths)

        cluster = self.compute.cluster(large, self.embedder, check_stop) if files else None
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
        # (the main) thread it embedded at half the speed (docs/benchmarks/archive.md)
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
            report.compute = self.compute.where(cluster, large, len(files),
                                         report.chunks_embedded - embedded_before,
                                         time.perf_counter() - started)

    @contextmanager
    def reading(self) -> Iterator[None]:
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
        with self.reading():
            self.check_stop()
            report = IngestReport()
            started = time.perf_counter()
            records = self.store.records(str(p) for p in paths)
            changes, taken = self.read_batch(paths, records, report, keep_vanished,
                                              max_chunks)
            report.timed("read", time.perf_counter() - started)
            self.check_stop()
            kept = [c for c in changes if c.state != "removed"]
            changed = {c.path: records[c.path] for c in kept if c.path in records}
            pending = reuse(kept, self.known(changed), report)
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
            self.check_stop()
            again, _ = self._prepare_batch(paths, keep_vanished, None)
            self._embed(again.pending, again.report)
            if self.writer.call(functools.partial(self._commit, again)):
                return again.report
        report = IngestReport()
        self.writer.call(lambda: self._ingest_batch(paths, report, keep_vanished))
        return report

    def _apply(self, changes: list[FileChange], removals: list[str],
               report: IngestReport) -> None:
        """Commit, timing the tree update apart from the rest of the store."""
        started, tree_before = time.perf_counter(), self.stores.tree_seconds
        self.stores.apply(changes, removals)
        tree = self.stores.tree_seconds - tree_before
        report.timed("tree", tree)
        report.timed("store", time.perf_counter() - started - tree)

    def is_indexed(self, path: Path | str) -> bool:
        """Whether a file, or anything below a folder, is known to the knowledge base."""
        return bool(self.store.files(os.path.abspath(path)))

    def rename(self, old: Path | str, new: Path | str) -> bool:
        """A file moved: its record and leaves stay, its path changes; chunks whose header
        was the old file name are embedded again with the new one."""
        new = os.path.abspath(new)
        moved, reread = self.renames.rename(os.path.abspath(old), new)
        if reread:
            self.ingest([new], keep_vanished=True)  # read again: the headers name it
        return moved

    def vanish(self, folders: Iterable[Path | str]) -> int:
        """Mark the indexed files of watched folders that vanished unavailable (their chunks
        stay searchable); returns how many were marked."""
        return self.vanished.vanish(folders)

    def forget_unwatched(self, folders: Iterable[Path | str]) -> int:
        """Record the watched folders; remove the unavailable files of folders watched the
        last time and not now (they could only come back through the watcher)."""
        return self.vanished.forget_unwatched(folders)

    def ingest_jsonl(self, path: Path | str, progress: Progress | None = None) -> IngestReport:
        """Index a benchmark corpus: one leaf per {"id","title","text"} record."""
        return self.corpora.ingest_jsonl(path, progress)

    def ingest_corpora(
        self, corpora: Iterable[Path], batches: int = 1, seed: int = 0
    ) -> dict[str, float]:
        """Index benchmark corpora: at once, or shuffled in sequential incremental batches."""
        return self.corpora.ingest_corpora(corpora, batches, seed)

    def known(self, records: dict[str, FileRecord]) -> Known:
        """The stored chunks (id, hash) of known files, for `reuse` (one lookup per file)."""
        return {path: self.store.chunk_hashes(record.id) for path, record in records.items()
                if record.chunks}

    def reuse_and_embed(self, changes: list[FileChange], report: IngestReport) -> None:
        """Keep chunks whose hash is unchanged; embed the others."""
        records = self.store.records(change.path for change in changes)
        self._embed(reuse(changes, self.known(records), report), report)

    def _embed(self, rows: list[ChunkRow], report: IngestReport) -> None:
        """Embed chunks in slices of similar length (a stop is noticed between slices)."""
        inline = self.writer.on_writer_thread()
        self.embed_seconds += self.reader.embed(rows, report,
                                                None if inline else self.check_stop)

    def read_batch(
        self, paths: list[Path], records: dict[str, FileRecord], report: IngestReport,
        keep_vanished: bool = False, max_chunks: int | None = None,
    ) -> tuple[list[FileChange], int]:
        """Read and chunk files until they run out or (after at least one) their chunks reach
        `max_chunks`; returns the changes and how many paths were taken."""
        check = None if self.writer.on_writer_thread() else self.check_stop
        return self.reader.read_batch(paths, records, report, keep_vanished, max_chunks, check)

    def _ingest_batch(
        self, paths: list[Path], report: IngestReport, keep_vanished: bool = False
    ) -> None:
        """Prepare, embed and commit a batch of files (on the writer thread)."""
        started = time.perf_counter()
        records = self.store.records(str(p) for p in paths)
        changes, _ = self.read_batch(paths, records, report, keep_vanished)
        report.timed("read", time.perf_counter() - started)
        removals = [c.path for c in changes if c.state == "removed"]
        changes = [c for c in changes if c.state != "removed"]
        if changes or removals:
            self.reuse_and_embed(changes, report)
            self._apply(changes, removals, report)

    def forget(self, paths: Iterable[Path | str]) -> int:
        """Remove files and folders on purpose, available or not; an error when nothing is
        known under a path."""
        keys = [os.path.abspath(os.path.expanduser(raw)) for raw in paths]
        unknown = [key for key in keys if not self.store.files(key)]
        if unknown:
            raise KBError(f"nothing is indexed at or below {', '.join(unknown)}")
        return self.remove(keys)

    def remove(self, paths: Iterable[Path | str]) -> int:
        """Forget files (and everything below folders); returns how many were removed."""
        keys = tuple(os.path.abspath(os.path.expanduser(raw)) for raw in paths)

        def run() -> int:
            targets = [r.path for key in keys for r in self.store.files(key)]
            if targets:
                self.stores.apply([], targets)
            return len(targets)

        return self.writer.call(run, key=("remove", keys))


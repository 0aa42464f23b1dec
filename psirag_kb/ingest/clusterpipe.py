"""The ingest pipeline with a Ray cluster in place of the reader and embedder threads: batches
go out several at a time, their outcomes come back in any order and are committed in file order
by the same writer path as a local ingest; the rest runs locally if the cluster goes away."""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from psirag_kb.errors import KBError
from psirag_kb.ingest.cluster import Cluster, ClusterGone
from psirag_kb.ingest.pipeline import Prepared
from psirag_kb.ingest.raywork import Batch, Outcome
from psirag_kb.ingest.reading import Known
from psirag_kb.ingest.report import IngestReport
from psirag_kb.storage.records import FileChange, FileRecord

if TYPE_CHECKING:
    from psirag_kb.storage.store import Store

log = logging.getLogger(__name__)


class ClusterPipeline:
    """Runs batches on a cluster and `commit`s them in order, one commit in flight.

    `send(paths) -> (batch, context)` snapshots what a batch is read against; `receive(paths,
    context, outcome) -> (Prepared, paths left)` turns an outcome into a batch for the writer;
    `commit`, `committed` and `check_stop` are the local pipeline's; `local(paths)` runs the
    local pipeline over the files left when the cluster goes away.
    """

    def __init__(self, cluster: Cluster, send: Callable[[list[Path]], tuple[Any, Any]],
                 receive: Callable[[list[Path], Any, Any], tuple[Prepared, list[Path]]],
                 commit: Callable[[Prepared], Future],
                 committed: Callable[[Prepared, Future], None],
                 check_stop: Callable[[], None], local: Callable[[list[Path]], None],
                 batch_files: int) -> None:
        self.cluster, self.send, self.receive = cluster, send, receive
        self.commit, self.committed, self.check_stop = commit, committed, check_stop
        self.local, self.batch_files = local, batch_files

    def run(self, files: list[Path]) -> None:
        """Commit every file's batch in order; returns after the last commit."""
        # a burst of fewer than batch_files x workers files is shared among the workers
        size = max(1, min(self.batch_files, -(-len(files) // max(1, self.cluster.workers))))
        todo = deque(files[i:i + size] for i in range(0, len(files), size))
        out: deque[tuple[int, list[Path], Any]] = deque()  # (seq, paths, context), in order
        unsent: list[Path] = []  # files taken off `todo` or left by a batch, not yet sent
        inflight: tuple[Prepared, Future] | None = None
        try:
            try:
                while todo or out or unsent:
                    while (todo or unsent) and len(out) < self.cluster.slots:
                        if not unsent:
                            unsent = todo.popleft()
                        out.append(self._submit(unsent))
                        unsent = []
                    seq, paths, context = out[0]
                    outcome = self.cluster.outcome(seq, self.check_stop)
                    out.popleft()
                    prepared, left = self.receive(paths, context, outcome)
                    if inflight is not None:
                        self.committed(*inflight)
                        inflight = None
                    self.check_stop()
                    inflight = (prepared, self.commit(prepared))
                    if left:  # the chunk budget ended the batch early: the rest goes next
                        unsent = left
                        out.appendleft(self._submit(left))
                        unsent = []
            except ClusterGone as exc:
                rest = unsent + [p for _, paths, _ in out for p in paths]
                rest += [p for batch in todo for p in batch]
                log.warning("%s; the ingest goes on locally (%d file(s) left)", exc, len(rest))
                self.cluster.close(wait_s=0.0)  # gone: nothing to finish there
                if inflight is not None:
                    self.committed(*inflight)
                    inflight = None
                self.local(rest)
            if inflight is not None:
                self.committed(*inflight)
                inflight = None
        finally:
            self.cluster.drop([seq for seq, _, _ in out])
            if inflight is not None:
                inflight[1].cancel()  # not started yet: dropped whole; running: it commits

    def _submit(self, paths: list[Path]) -> tuple[int, list[Path], Any]:
        """Snapshot and send one batch."""
        batch, context = self.send(paths)
        return self.cluster.submit(batch), paths, context


class Reader(Protocol):
    """What a cluster stage needs of the local ingest: the store, a stop check, stored chunk
    hashes, and files read here."""

    @property
    def store(self) -> Store:
        """The DuckDB store."""

    def reading(self) -> AbstractContextManager[None]:
        """Count a batch being read, so closing can wait until no reader uses the store."""

    def check_stop(self) -> None:
        """Raise `Cancelled` when closing."""

    def known(self, records: dict[str, FileRecord]) -> Known:
        """The stored chunks (id, hash) of known files."""

    def read_batch(self, paths: list[Path], records: dict[str, FileRecord],
                   report: IngestReport, keep_vanished: bool = False,
                   max_chunks: int | None = None) -> tuple[list[FileChange], int]:
        """Read and chunk files; returns the changes and how many paths were taken."""


class ClusterStage:
    """What a cluster ingest does on this machine around a batch: the snapshot it is read
    against, and the outcome turned into a batch for the writer."""

    def __init__(self, reader: Reader, keep_vanished: bool, max_chunks: int) -> None:
        self.reader, self.keep_vanished, self.max_chunks = reader, keep_vanished, max_chunks

    def send(self, paths: list[Path]) -> tuple[Batch, dict[str, FileRecord]]:
        """The batch for a worker (with the records and stored chunk hashes, read here)."""
        reader = self.reader
        with reader.reading():
            reader.check_stop()
            records = reader.store.records(str(p) for p in paths)
            known = reader.known({path: record for path, record in records.items()
                                  if _maybe_changed(record)})
        batch = Batch([str(p) for p in paths], records, known, self.keep_vanished,
                      self.max_chunks)
        return batch, records

    def receive(self, paths: list[Path], records: dict[str, FileRecord],
                outcome: Outcome) -> tuple[Prepared, list[Path]]:
        """A worker's outcome as a batch for the writer, and the paths it left; files the
        worker did not see are read here when they are gone here too (removed, or nothing),
        and refused when they are not (the node lacks the shared mount)."""
        changes, report = list(outcome.changes), outcome.report
        if outcome.unseen:
            here = [p for p in outcome.unseen if os.path.lexists(p)]
            if here:
                raise KBError(
                    f"the Ray worker on {outcome.node} cannot see {here[0]}"
                    f"{f' (and {len(here) - 1} more files)' if len(here) > 1 else ''}: every "
                    "node of the cluster must see the files at the same paths (a shared "
                    "mount); mount it there, or ingest without [compute] ray_address")
            gone, _ = self.reader.read_batch([Path(p) for p in outcome.unseen], records,
                                             report, self.keep_vanished)
            changes.extend(gone)
        taken = set(outcome.taken) | set(outcome.unseen)
        done = [p for p in paths if str(p) in taken]
        left = [p for p in paths if str(p) not in taken]
        expected = {c.path: records.get(c.path) for c in changes}
        return Prepared(done, changes, expected, report, []), left


def _maybe_changed(record: FileRecord) -> bool:
    """Whether a worker may need a file's stored chunk hashes: not when its size and mtime
    are the indexed ones (then its content hash is too, almost surely; if not, its chunks are
    embedded again, not reused). Spares a rescan a lookup per unchanged file."""
    if record.state != "indexed":
        return True
    try:
        stat = os.stat(record.path)
    except OSError:
        return False  # gone: nothing to reuse
    return (stat.st_size, stat.st_mtime) != (record.size, record.mtime)

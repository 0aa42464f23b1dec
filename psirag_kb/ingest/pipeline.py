"""A bounded ingest pipeline: a reader thread prepares batches, the thread that runs it embeds
them, the writer thread only commits them.

Reading (stat, hash, parse, OCR, chunk, headers) runs on a reader thread that stays at most
`QUEUE_BATCHES` batches ahead; embedding runs on the thread calling `run`; each ready batch is
one short task for the writer. Other writes (an edit, a delete, a rename) interleave between the
commits.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psirag_kb.storage.records import ChunkRow, FileChange, FileRecord

log = logging.getLogger(__name__)

QUEUE_BATCHES = 2
"""Prepared batches waiting for the embedder: enough to keep it busy, bounded in memory."""
POLL_S = 0.2
"""How often a waiting stage looks whether the pipeline was asked to stop."""


@dataclass
class Prepared:
    """One batch read and chunked outside the writer, then embedded, waiting to be committed."""

    paths: list[Path]
    changes: list[FileChange]
    expected: dict[str, FileRecord | None]
    """The record each change was prepared against (None: the path was unknown); the commit
    is stale when any differs at apply time."""
    report: Any
    """The batch's own IngestReport, merged into the call's when the batch commits."""
    pending: list[ChunkRow] = field(default_factory=list)
    """Chunks to embed (the others keep their stored vectors)."""


_DONE = object()


class Pipeline:
    """Runs `prepare` on a reader thread and `embed` and `commit` here, one batch after another.

    `prepare(paths) -> (Prepared, paths not taken)` reads a batch (it may stop early at a chunk
    budget); `embed(prepared)` fills the vectors; `commit(prepared) -> Future` queues the batch
    on the writer; `committed(prepared, future)` waits for that commit and reports it.
    `check_stop()` raises to stop; it is asked between files, slices and batches.
    """

    def __init__(self, prepare: Callable[[list[Path]], tuple[Prepared, list[Path]]],
                 embed: Callable[[Prepared], None],
                 commit: Callable[[Prepared], Future],
                 committed: Callable[[Prepared, Future], None],
                 check_stop: Callable[[], None], batch_files: int) -> None:
        self.prepare, self.embed, self.commit = prepare, embed, commit
        self.committed, self.check_stop = committed, check_stop
        self.batch_files = batch_files
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_BATCHES)
        self._stop = threading.Event()

    def run(self, files: list[Path]) -> None:
        """Prepare, embed and commit every file, in order; returns after the last commit."""
        reader = threading.Thread(target=self._read, args=(files,), name="psirag-reader",
                                  daemon=True)
        reader.start()
        inflight: tuple[Prepared, Future] | None = None
        try:
            for prepared in self._ready():
                self.embed(prepared)
                if inflight is not None:
                    self.committed(*inflight)
                    inflight = None
                self.check_stop()
                inflight = (prepared, self.commit(prepared))
            if inflight is not None:
                self.committed(*inflight)
                inflight = None
        finally:
            self._stop.set()
            if inflight is not None:
                inflight[1].cancel()  # not started yet: dropped whole; running: it commits
            reader.join(POLL_S)  # a reader inside one large file ends on its own

    def _ready(self) -> Iterator[Prepared]:
        """Prepared batches as the reader hands them over."""
        while True:
            self.check_stop()
            try:
                item = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def _read(self, files: list[Path]) -> None:
        """The reader thread: prepare batches until the files run out or the pipeline stops."""
        rest = list(files)
        try:
            while rest and not self._stop.is_set():
                prepared, left = self.prepare(rest[:self.batch_files])
                rest = left + rest[self.batch_files:]
                self._put(prepared)
            self._put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
            if not self._stop.is_set():
                log.debug("ingest reader stopped by an error", exc_info=True)
            self._put(exc)

    def _put(self, item: Any) -> None:
        """Hand an item over, giving up when the pipeline stopped."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=POLL_S)
                return
            except queue.Full:
                continue

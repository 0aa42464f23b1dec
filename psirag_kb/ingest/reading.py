"""The read, chunk, reuse and embed stages of an ingest batch, with no store or writer in
reach: the local pipeline runs them on its threads, a Ray worker runs the same code."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psirag_kb.errors import FileReadError, SkippedFile
from psirag_kb.ingest.chunking import chunk_text, content_hash
from psirag_kb.ingest.documents import read_document, unread_reason
from psirag_kb.ingest.formats.bounds import UnpackLimits
from psirag_kb.ingest.memory import release_free_memory
from psirag_kb.ingest.pdf import awaits_ocr, tesseract_ready
from psirag_kb.storage.records import (
    UNAVAILABLE,
    ChunkRow,
    FileChange,
    FileRecord,
    indexed_text,
    restored_note,
)

if TYPE_CHECKING:
    from psirag_kb.config import Config
    from psirag_kb.ingest.embedding import Embedder

log = logging.getLogger(__name__)

SNIFFED_BINARY = "binary content"
"""How the skip reason of a file found binary by its content starts."""

EMBED_SLICE = 32
"""Chunks embedded per call, the model's batch size: a stop waits for one slice (4 s at load 12
on two cores), and another ingest's embedding (a one-line edit) gets the model between two
slices. Slices of 16 embedded at half the speed on the loaded machine."""

Known = dict[str, list[tuple[int, str]]]
"""path -> (chunk id, chunk hash) of the chunks a known file has stored."""


def path_hash(path: Path) -> str:
    """Content hash of a file on disk, read in blocks (the same value as `file_hash`)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class BatchReader:
    """Reads, chunks and embeds files for one configuration and one embedding model."""

    def __init__(self, config: Config, embedder: Embedder) -> None:
        self.config = config
        self.embedder = embedder

    def ocr_now(self, record: FileRecord) -> bool:
        """Whether an unchanged file is read again because OCR can now read pages it lacks."""
        return awaits_ocr(record.reason) and tesseract_ready(self.config.ingest.ocr)

    def prepare(self, path: Path, record: FileRecord | None, report: Any,
                keep_vanished: bool = False) -> FileChange | None:
        """Read and chunk one file (known as `record`); None when it is unchanged."""
        key = str(path)
        ingest = self.config.ingest
        try:
            before = path.stat()
            if (record and record.state == "skipped" and record.reason.startswith(SNIFFED_BINARY)
                    and (record.size, record.mtime) == (before.st_size, before.st_mtime)):
                report.unchanged += 1  # found binary by its content, and untouched since
                return None
            unread = unread_reason(path, ingest.extension_kinds)
            if unread:
                raise SkippedFile(unread)
            if before.st_size > ingest.max_file_bytes:
                raise SkippedFile(
                    f"file too large ({before.st_size} bytes > limit {ingest.max_file_bytes})")
            digest = path_hash(path)
            if record and record.hash == digest and record.state == UNAVAILABLE:
                report.restored += 1  # its folder is back: the chunks it kept are its own
                return FileChange(key, "file", digest, before.st_size, before.st_mtime,
                                  "indexed", restored_note(record.reason), keep_chunks=True)
            if (record and record.hash == digest and record.state != "failed"
                    and not self.ocr_now(record)):
                report.unchanged += 1
                return None
            document = read_document(path, max_bytes=ingest.max_file_bytes, ocr=ingest.ocr,
                                     limits=UnpackLimits(ingest.max_extracted_bytes,
                                                         ingest.max_compression_ratio),
                                     overrides=ingest.extension_kinds)
            after = path.stat()
            if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                raise FileReadError(f"{path} changed while being read; will retry")
        except SkippedFile as exc:
            if exc.damaged and record is not None and record.chunks:  # a reader raised on it
                reason = f"{exc.reason}; its previous version stays indexed"
                report.failed += 1
                report.problems.append((key, "failed", reason))
                return FileChange(key, "file", "", 0, 0.0, "failed", reason, keep_chunks=True)
            report.skipped += 1
            report.problems.append((key, "skipped", exc.reason))
            size = before.st_size if "before" in locals() else 0
            # a file found binary by its content keeps its mtime: the next scan need not look
            mtime = (before.st_mtime if size and exc.reason.startswith(SNIFFED_BINARY)
                     else 0.0)
            return FileChange(key, "file", "", size, mtime, "skipped", exc.reason)
        except FileNotFoundError:
            if keep_vanished:
                return None
            report.removed += record is not None
            return FileChange(key, "file", "", 0, 0.0, "removed") if record else None
        except (FileReadError, OSError) as exc:
            if keep_vanished and not os.path.lexists(path):
                return None  # deleted while being read: the watcher's delete event decides
            report.failed += 1
            reason = str(exc) if isinstance(exc, FileReadError) else f"cannot read: {exc}"
            report.problems.append((key, "failed", reason))
            return FileChange(key, "file", "", 0, 0.0, "failed", reason, keep_chunks=True)
        return self._chunked(key, digest, after, document, record, report)

    def _chunked(self, key: str, digest: str, after: Any, document: Any,
                 record: FileRecord | None, report: Any) -> FileChange:
        """A read document cut into chunk rows with their locations and headers."""
        ingest = self.config.ingest
        chunks = chunk_text(
            document.text, self.embedder.count_tokens, max_tokens=ingest.chunk_tokens,
            hard_max_tokens=ingest.max_chunk_tokens, breaks=document.breaks(),
        )
        locations = document.locations([(c.start, c.end) for c in chunks])
        headers = (document.headers([c.line_first for c in chunks])
                   if ingest.chunk_context else [""] * len(chunks))
        rows = [
            ChunkRow(c.ordinal, key, c.start, c.end, c.line_first, c.line_last, c.text,
                     content_hash(indexed_text(header, c.text)),
                     location=None if where is None else json.dumps(where, ensure_ascii=False),
                     context=header)
            for c, where, header in zip(chunks, locations, headers, strict=True)
        ]
        if record is None:
            report.added += 1
        else:
            report.updated += 1
        change = FileChange(key, "file", digest, after.st_size, after.st_mtime, "indexed",
                            document.note, rows, encoding=document.encoding)
        if not rows:
            change.state, change.reason = "skipped", "no text to index"
            report.skipped += 1
            report.problems.append((key, "skipped", change.reason))
        elif document.note:
            report.problems.append((key, "indexed", document.note))
        return change

    def read_batch(
        self, paths: list[Path], records: dict[str, FileRecord], report: Any,
        keep_vanished: bool = False, max_chunks: int | None = None,
        check_stop: Callable[[], None] | None = None,
    ) -> tuple[list[FileChange], int]:
        """Read and chunk files until they run out or (after at least one) their chunks reach
        `max_chunks`; returns the changes and how many paths were taken."""
        changes = []
        chunks = taken = 0
        for path in paths:
            if max_chunks is not None and taken and chunks >= max_chunks:
                break
            if check_stop is not None:
                check_stop()
            taken += 1
            try:
                change = self.prepare(path, records.get(str(path)), report, keep_vanished)
            except Exception as exc:  # noqa: BLE001 - one bad file never stops the run
                log.exception("unexpected error reading %s", path)
                reason = f"unexpected error: {type(exc).__name__}: {exc}; will retry"
                report.failed += 1
                report.problems.append((str(path), "failed", reason))
                # a reader's bug must not cost the file's index: its previous chunks are kept
                change = FileChange(str(path), "file", "", 0, 0.0, "failed", reason,
                                    keep_chunks=True)
            if change is not None:
                changes.append(change)
                chunks += len(change.chunks)
        return changes, taken

    def embed(self, rows: list[ChunkRow], report: Any,
              check_stop: Callable[[], None] | None = None) -> float:
        """Embed chunks in slices of similar length (a stop is noticed between slices);
        returns the seconds it took."""
        if not rows:
            return 0.0
        started = time.perf_counter()
        order = sorted(rows, key=lambda row: len(row.indexed))
        for start in range(0, len(order), EMBED_SLICE):
            if check_stop is not None:
                check_stop()
            part = order[start:start + EMBED_SLICE]
            vectors = self.embedder.embed([row.indexed for row in part])
            for row, vector in zip(part, vectors, strict=True):
                row.vector = vector
            # a forward pass's activations are freed into the allocator's heaps, which keep
            # them: each longer slice would take fresh pages (benchmarks/ingest_memory.py)
            release_free_memory()
        elapsed = time.perf_counter() - started
        report.timed("embed", elapsed)
        report.chunks_embedded += len(rows)
        return elapsed


def reuse(changes: list[FileChange], known: Known, report: Any) -> list[ChunkRow]:
    """Give chunks whose hash their file's stored chunks have (`known`) the stored id; return
    the chunks left to embed."""
    pending: list[ChunkRow] = []
    for change in changes:
        old: dict[str, list[int]] = defaultdict(list)
        if change.state == "indexed":
            for chunk_id, chunk_hash in known.get(change.path, ()):
                old[chunk_hash].append(chunk_id)
        for row in change.chunks:
            if row.id is not None:
                continue
            if old.get(row.hash):
                row.id = old[row.hash].pop(0)
                report.chunks_kept += 1
            else:
                pending.append(row)
    return pending

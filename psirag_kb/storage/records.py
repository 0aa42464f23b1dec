"""Records the stores take and hand back: files, chunks, changes, hits and rankings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

UNAVAILABLE = "unavailable"
"""The state of an indexed file whose folder vanished: its chunks stay searchable."""
NOTE_SEP = "\nnote: "
"""Between an unavailable file's reason and the note it had while indexed (kept for its return)."""


def indexed_text(context: str | None, text: str) -> str:
    """What the dense and BM25 indexes see of a chunk: its context header, a newline, its text
    (the text alone without a header)."""
    return f"{context}\n{text}" if context else text


def restored_note(reason: str) -> str:
    """The note an unavailable file had while indexed ('' for none)."""
    return reason.partition(NOTE_SEP)[2]


def unavailable_reason(reason: str) -> str:
    """Why a file is unavailable, without the note kept for its return."""
    return reason.partition(NOTE_SEP)[0]


@dataclass(frozen=True)
class FileRecord:
    """One file (or benchmark corpus) known to the knowledge base."""

    id: int
    path: str
    origin: str
    hash: str
    size: int
    mtime: float
    state: str
    reason: str
    chunks: int


@dataclass
class ChunkRow:
    """A chunk as it should be after a change: kept (id set) or new (vector set)."""

    ordinal: int
    source: str
    start: int | None
    end: int | None
    line_first: int | None
    line_last: int | None
    text: str
    hash: str
    id: int | None = None
    vector: np.ndarray | None = None
    location: str | None = None
    """Where the chunk is in its document, as JSON ({"page": 4}); None for text files."""
    context: str = ""
    """The header embedded and indexed with the text, never shown: "Title > Heading"."""

    @property
    def indexed(self) -> str:
        """The text the embedder and BM25 see (`indexed_text`)."""
        return indexed_text(self.context, self.text)


@dataclass
class FileChange:
    """The new state of one file: its record and the full list of its chunks."""

    path: str
    origin: str
    hash: str
    size: int
    mtime: float
    state: str
    reason: str = ""
    chunks: list[ChunkRow] = field(default_factory=list)
    keep_chunks: bool = False
    """Only record the state; leave the file's previous chunks as they are (a failed re-read)."""
    encoding: str = ""
    """The character encoding a text file was decoded from ("" for other documents)."""


@dataclass
class Delta:
    """What a committed write changed, for the derived indexes."""

    generation: int
    added_ids: np.ndarray
    added_vectors: np.ndarray
    added_texts: list[str]
    removed_ids: np.ndarray
    added_paths: list[str | None] = field(default_factory=list)
    """The file of each added chunk (None for a corpus record), for the BM25 index's scopes."""
    moved: list[tuple[int, str, str]] = field(default_factory=list)
    """(chunk id, text, new path) of chunks whose file was renamed: only their path changed."""


@dataclass(frozen=True)
class Hit:
    """A chunk with everything a result needs."""

    id: int
    path: str
    origin: str
    source: str
    ordinal: int
    line_first: int | None
    line_last: int | None
    text: str
    location: dict[str, Any] | None = None
    """Where the chunk is in its document ({"slide": 3}), None for text files and old chunks."""
    unavailable: dict[str, Any] | None = None
    """{"since": time, "reason": why} when the chunk's file is unavailable (its folder
    vanished), else None."""
    contents: float = 0.0
    """The share of the chunk's lines that are contents or index entries (`contents_score`)."""


@dataclass(frozen=True)
class Ranking:
    """Chunk ids best first, with the retriever's scores."""

    ids: np.ndarray
    scores: np.ndarray

    @classmethod
    def empty(cls) -> Ranking:
        """A ranking with nothing in it."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.float32))

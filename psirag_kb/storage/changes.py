"""The rows one `Store.apply` writes: planned first (ids, reused chunks, rows), then written in
bulk inside its transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from psirag_kb.storage.contents import contents_score
from psirag_kb.storage.records import FileChange


@dataclass
class ChangePlan:
    """What a change writes, built before any of it is written."""

    statements: list[tuple[str, list[Any]]] = field(default_factory=list)
    """Updates of known files and deletions of the chunks they no longer have, in order."""
    file_rows: list[tuple] = field(default_factory=list)
    """Rows of the new files."""
    new_rows: list[tuple] = field(default_factory=list)
    """Rows of the new chunks (their vectors are `added_vectors`)."""
    kept_rows: list[tuple] = field(default_factory=list)
    """Rows of the kept chunks, at their new places."""
    stale: list[int] = field(default_factory=list)
    """Ids of the chunks the changed files no longer have."""
    added_ids: list[int] = field(default_factory=list)
    added_vectors: list[np.ndarray] = field(default_factory=list)
    added_texts: list[str] = field(default_factory=list)
    added_paths: list[str | None] = field(default_factory=list)

    def add_chunks(self, change: FileChange, file_id: int) -> None:
        """The rows of a file's chunks (each has its id by now): a chunk with a vector is new,
        one without keeps its row and moves. A new chunk's contents score is taken here."""
        for chunk in change.chunks:
            row = (chunk.id, file_id, chunk.ordinal, chunk.source, chunk.start,
                   chunk.end, chunk.line_first, chunk.line_last, chunk.text, chunk.hash,
                   chunk.location, chunk.context,
                   0.0 if chunk.vector is None else contents_score(chunk.text))
            if chunk.vector is None:
                self.kept_rows.append(row)
            else:
                assert chunk.id is not None
                self.new_rows.append(row)
                self.added_ids.append(chunk.id)
                self.added_vectors.append(chunk.vector)
                self.added_texts.append(chunk.indexed)
                self.added_paths.append(change.path if change.origin == "file" else None)


def write_plan(db: duckdb.DuckDBPyConnection, plan: ChangePlan, dim: int) -> None:
    """Write a planned change (inside its transaction)."""
    for sql, params in plan.statements:
        db.execute(sql, params)
    if plan.file_rows:
        insert_files(db, plan.file_rows)
    if plan.new_rows:
        insert_chunks(db, plan.new_rows, plan.added_vectors, dim)
    if plan.kept_rows:
        update_positions(db, plan.kept_rows)


def _columns(rows: list[tuple]) -> dict[str, np.ndarray]:
    """Column arrays for a registered relation of chunk rows."""
    names = ["id", "file_id", "ordinal", "source", "start_char", "end_char",
             "line_first", "line_last", "text", "hash", "location", "context", "contents"]
    columns = {}
    for index, name in enumerate(names):
        values = [row[index] for row in rows]
        if name in ("source", "text", "hash", "location", "context"):
            columns[name] = np.array(values, dtype=object)
        elif name in ("start_char", "end_char", "line_first", "line_last"):
            columns[name] = np.array(
                [np.nan if v is None else v for v in values], dtype=np.float64
            )
        elif name == "contents":
            columns[name] = np.array(values, dtype=np.float32)
        else:
            columns[name] = np.array(values, dtype=np.int64)
    return columns


def insert_files(db: duckdb.DuckDBPyConnection, rows: list[tuple]) -> None:
    """Bulk insert new file records."""
    names = ["id", "path", "origin", "hash", "size", "mtime", "state", "reason", "chunks",
             "updated", "encoding"]
    kinds = [np.int64, object, object, object, np.int64, np.float64, object, object,
             np.int64, np.float64, object]
    columns = {name: np.array([row[i] for row in rows], dtype=kind)
               for i, (name, kind) in enumerate(zip(names, kinds, strict=True))}
    db.register("new_files", columns)
    try:
        db.execute(
            "INSERT INTO files SELECT id, path, origin, hash, size, mtime, state, reason, "
            "CAST(chunks AS INTEGER), updated, encoding FROM new_files"
        )
    finally:
        db.unregister("new_files")


def insert_chunks(db: duckdb.DuckDBPyConnection, rows: list[tuple], vectors: list[np.ndarray],
              dim: int) -> None:
    """Bulk insert new chunks with their vectors."""
    columns = _columns(rows)
    vector_column = np.empty(len(vectors), dtype=object)
    for i, vector in enumerate(vectors):
        vector_column[i] = np.asarray(vector, dtype=np.float32)
    columns["vector"] = vector_column
    db.register("new_chunks", columns)
    try:
        db.execute(
            f"""INSERT INTO chunks (id, file_id, ordinal, source, start_char, end_char,
                    line_first, line_last, text, hash, vector, location, context, contents)
                SELECT id, file_id, ordinal, source,
                CAST(start_char AS INTEGER), CAST(end_char AS INTEGER),
                CAST(line_first AS INTEGER), CAST(line_last AS INTEGER), text, hash,
                CAST(vector AS FLOAT[{dim}]), CAST(location AS VARCHAR),
                CAST(context AS VARCHAR), CAST(contents AS FLOAT) FROM new_chunks"""
        )
    finally:
        db.unregister("new_chunks")


def update_positions(db: duckdb.DuckDBPyConnection, rows: list[tuple]) -> None:
    """Move kept chunks to their new ordinal, offsets, lines and location (their hash,
    which covers the context, is the same)."""
    db.register("kept_chunks", _columns(rows))
    try:
        db.execute(
            """UPDATE chunks SET ordinal = k.ordinal,
                start_char = CAST(k.start_char AS INTEGER),
                end_char = CAST(k.end_char AS INTEGER),
                line_first = CAST(k.line_first AS INTEGER),
                line_last = CAST(k.line_last AS INTEGER),
                location = CAST(k.location AS VARCHAR)
               FROM kept_chunks k WHERE chunks.id = k.id"""
        )
    finally:
        db.unregister("kept_chunks")

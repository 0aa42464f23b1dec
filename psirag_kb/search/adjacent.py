"""Results that touch in one file become one result, so k results are k places."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psirag_kb.ingest.formats import join_locations, same_place
from psirag_kb.storage.records import Hit

MARGIN = 2
"""A merging query ranks this many times k chunks, so k places remain after merging."""
MAX_DEPTH = 8
"""When merging leaves fewer than k places, the query ranks twice as deep, up to this many
times k chunks."""


def merge_adjacent(rows: list[dict[str, Any]], hits: Mapping[int, Hit],
                   k: int) -> list[dict[str, Any]]:
    """Join result rows (best first) that are consecutive chunks of one file into one row.

    A joined row has the text of its chunks in file order, lines and location spanning them,
    and the score and `chunk_id` of its best chunk; `chunk_ids` lists its chunks in file order
    (one for a row that joined nothing). The first k rows are returned, ranked again.
    """
    runs = sorted(_runs(rows, hits), key=min)[:k]
    merged = [_joined(rows, hits, run) for run in runs]
    for rank, row in enumerate(merged, start=1):
        row["rank"] = rank
    return merged


def _runs(rows: list[dict[str, Any]], hits: Mapping[int, Hit]) -> list[list[int]]:
    """Row indexes grouped into runs of consecutive chunks of one file and one sheet, section or
    mail part, each in file order (a corpus record, whose neighbours are other passages, stays
    alone)."""
    placed = sorted((hits[row["chunk_id"]].path, hits[row["chunk_id"]].ordinal, index)
                    for index, row in enumerate(rows)
                    if hits[row["chunk_id"]].origin == "file")
    runs = [[index] for index, row in enumerate(rows) if hits[row["chunk_id"]].origin != "file"]
    last: Hit | None = None
    for _, _, index in placed:
        hit = hits[rows[index]["chunk_id"]]
        if last is not None and _touch(last, hit):
            runs[-1].append(index)
        else:
            runs.append([index])
        last = hit
    return runs


def _touch(before: Hit, after: Hit) -> bool:
    """Tell whether a chunk follows another in its file, in the same sheet, section or part."""
    return (before.path == after.path and after.ordinal == before.ordinal + 1
            and same_place(before.location, after.location))


def _joined(rows: list[dict[str, Any]], hits: Mapping[int, Hit], run: list[int]) -> dict[str, Any]:
    """One result row for a run of rows: the best row's score and id, everyone's text."""
    best = dict(rows[min(run)])
    best["chunk_ids"] = [rows[i]["chunk_id"] for i in run]
    if len(run) == 1:
        return best
    chunks = [hits[rows[i]["chunk_id"]] for i in run]
    parts = [chunks[0].text]
    for before, after in zip(chunks, chunks[1:], strict=False):
        parts += [_gap(before, after), after.text]
    best["text"] = "".join(parts)
    if all(c.line_first is not None for c in chunks):
        best["lines"] = [chunks[0].line_first, chunks[-1].line_last]
    locations = [c.location for c in chunks]
    if all(locations):
        best["location"] = join_locations(locations)  # type: ignore[arg-type]
    return best


def _gap(before: Hit, after: Hit) -> str:
    """What separates two touching chunks' texts: a space on one line, else one or two line
    breaks (a blank line between them)."""
    if before.line_last is None or after.line_first is None:
        return "\n"
    lines = after.line_first - before.line_last
    return " " if lines <= 0 else "\n" * min(lines, 2)

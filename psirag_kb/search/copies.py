"""A passage found in several copies of one document is shown once, naming the other copies.

The same manual as HTML and as PDF, a README copied into two folders: their chunks differ in
line breaks, boundaries and page furniture but hold the same run of words. Among one query's
results only (never the collection), a result sharing at least `SAME` of its word `SHINGLE`-grams
with a better result from another file is a copy of it: it is dropped and its place is listed in
the better one's `also_in`.
"""

from __future__ import annotations

import re
from typing import Any

SHINGLE = 4
"""Words per compared run."""
SAME = 0.5
"""Share of the smaller text's runs the two must have in common to be copies."""
MIN_WORDS = 12
"""A shorter text is never taken for a copy (too little to tell)."""

_WORD = re.compile(r"[^\W_]+")


def shingles(text: str) -> frozenset[tuple[str, ...]]:
    """The text's runs of SHINGLE words (lower case, punctuation and spacing ignored); empty
    for a text shorter than MIN_WORDS."""
    words = _WORD.findall(text.lower())
    if len(words) < MIN_WORDS:
        return frozenset()
    return frozenset(tuple(words[i:i + SHINGLE]) for i in range(len(words) - SHINGLE + 1))


def copies(one: frozenset[tuple[str, ...]], other: frozenset[tuple[str, ...]]) -> bool:
    """Whether two texts' runs say they are copies of one passage."""
    if not one or not other:
        return False
    return len(one & other) >= SAME * min(len(one), len(other))


def copy_place(row: dict[str, Any]) -> dict[str, Any]:
    """Where a dropped copy is: its source, path, chunk, lines and location."""
    return {key: row.get(key) for key in ("source", "path", "chunk_id", "lines", "location")}


def fold_copies(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Result rows (best first) with each copy of a better row from another file dropped and
    named in that row's `also_in` (rows are ranked again from 1)."""
    kept: list[tuple[dict[str, Any], frozenset[tuple[str, ...]]]] = []
    for row in rows:
        runs = shingles(row["text"])
        original = next((first for first, first_runs in kept
                         if first.get("path") != row.get("path") and copies(runs, first_runs)),
                        None)
        if original is None:
            kept.append((row, runs))
        else:
            original.setdefault("also_in", []).append(copy_place(row))
    for rank, (row, _) in enumerate(kept, start=1):
        row["rank"] = rank
    return [row for row, _ in kept]

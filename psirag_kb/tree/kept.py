"""Abstracts kept across a reembed: the old tree's written abstracts by the leaves they cover,
given back to the nodes of the new tree that cover exactly the same leaves.

A reembed's switch drops the tree (its grouping is a function of the old embedding space) and a
new one is built from the new vectors in the background. Where the new grouping put exactly the
same chunks under one node, what was written for them (an LLM's abstract, which costs minutes
per node; its grounding check was against those chunks' texts, or above layer 1 the abstracts
written for them) still describes them: the switch stores every
clean abstract with its node's leaf signature (`tree/coverage.py`) in `kept_abstracts`, and the
adoption of the new tree gives each matching node its text and label (embedded again with the new
model when abstracts guide the search), clean, then drops the table in the transaction that
stores the tree. The table exists only between a switch and that adoption (a crash in between
keeps it for the rebuild after the restart).
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from psirag_kb.storage.sql import scalar
from psirag_kb.tree.coverage import signatures
from psirag_kb.tree.live import LiveTree

TABLE = "kept_abstracts"
"""(leaves, size, abstract, label): leaf signature, leaf count, the text, the display label."""

Kept = dict[tuple[int, int], tuple[str, str | None]]
"""(leaf signature, leaf count) -> (abstract, label)."""


def save(db: duckdb.DuckDBPyConnection, live: LiveTree) -> int:
    """Store the clean abstracts of `live` by leaf signature (inside the caller's transaction;
    the rows of an earlier switch whose tree was never rebuilt stay when `live` is empty);
    how many rows the table holds."""
    if not live.children:
        return held(db)
    rows = [(sig, size, live.abstracts[node], live.labels.get(node))
            for node, (sig, size) in signatures(live).items()
            if live.abstracts.get(node) and node not in live.dirty]
    db.execute(f"CREATE OR REPLACE TABLE {TABLE} (leaves BIGINT, size BIGINT, "
               "abstract VARCHAR, label VARCHAR)")
    if rows:
        db.register("kept_rows", {
            "leaves": np.asarray([r[0] for r in rows], np.int64),
            "size": np.asarray([r[1] for r in rows], np.int64),
            "abstract": np.asarray([r[2] for r in rows], dtype=object),
            "label": np.asarray([r[3] for r in rows], dtype=object)})
        try:
            db.execute(f"INSERT INTO {TABLE} SELECT leaves, size, abstract, label FROM kept_rows")
        finally:
            db.unregister("kept_rows")
    return len(rows)


def _exists(db: duckdb.DuckDBPyConnection) -> bool:
    return bool(scalar(db, "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [TABLE]))


def held(db: duckdb.DuckDBPyConnection) -> int:
    """Rows kept (0 when there is no table)."""
    return int(scalar(db, f"SELECT count(*) FROM {TABLE}")) if _exists(db) else 0


def load(db: duckdb.DuckDBPyConnection) -> Kept:
    """The kept abstracts ({} when there are none)."""
    if not _exists(db):
        return {}
    rows = db.execute(f"SELECT leaves, size, abstract, label FROM {TABLE}").fetchall()
    return {(int(r[0]), int(r[1])): (r[2], r[3]) for r in rows}


def matching(live: LiveTree, kept: Kept) -> dict[int, tuple[str, str | None]]:
    """The nodes of `live` that cover exactly the leaves of a kept abstract, with it."""
    if not kept:
        return {}
    return {node: kept[key] for node, key in signatures(live).items() if key in kept}


def give(live: LiveTree, found: dict[int, tuple[str, str | None]],
         vectors: dict[str, Any] | None = None) -> int:
    """Give each node its kept abstract and label, clean (with its new embedding from
    `vectors` by text when given); how many nodes took one."""
    given = 0
    for node, (text, label) in found.items():
        if node not in live.children:
            continue
        live.set_abstract(node, text, (vectors or {}).get(text))
        if label:
            live.set_label(node, label)
        given += 1
    return given


def drop(db: duckdb.DuckDBPyConnection) -> None:
    """Drop the table (inside the transaction that stores the new tree)."""
    db.execute(f"DROP TABLE IF EXISTS {TABLE}")

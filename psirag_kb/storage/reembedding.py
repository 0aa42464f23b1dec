"""A reembed's rows in DuckDB: the new model's vector column, its cursor in meta, and the switch
that renames the column into place (`ingest/reembed.py` runs it)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import duckdb
import numpy as np

from psirag_kb.storage.schema import drop_indexes
from psirag_kb.storage.sql import scalar
from psirag_kb.storage.store import INDEXED_TEXT, Store

COLUMN = "reembed_vector"
"""chunks' column of the new model's vectors while a reembed runs (renamed to `vector` by the
switch: nothing is copied then)."""
KEYS = ("reembed_model", "reembed_dim", "reembed_cursor", "reembed_started")
"""meta keys of a running reembed (absent when none runs)."""
READ_BATCH = 10_000
"""New vectors read per query when the new index is brought up to the column."""


def has_column(store: Store) -> bool:
    """Whether chunks has the new model's vector column (a reembed began)."""
    return bool(scalar(store.reader(),
                       "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'chunks' AND "
                       "column_name = ?", [COLUMN]))


def new_column(store: Store, db: duckdb.DuckDBPyConnection, dim: int) -> None:
    """chunks.reembed_vector for the new model's vectors, empty (inside a transaction;
    DuckDB alters no table an index depends on: they are dropped and made again)."""
    drop_indexes(db, ("chunks",))
    db.execute(f"ALTER TABLE chunks DROP COLUMN IF EXISTS {COLUMN}")
    db.execute(f"ALTER TABLE chunks ADD COLUMN {COLUMN} FLOAT[{int(dim)}]")
    store.create_indexes()


def begin(store: Store, model: str, dim: int) -> None:
    """Record a new reembed to `model`: an empty column, its cursor at 0 (writer)."""
    with store.transaction() as db:
        new_column(store, db, dim)
        db.execute("DELETE FROM reembed_vectors")
        db.execute("DELETE FROM meta WHERE key IN (SELECT unnest(?))", [list(KEYS)])
        db.executemany("INSERT INTO meta VALUES (?, ?)", [
            ("reembed_model", model), ("reembed_dim", str(dim)), ("reembed_cursor", "0"),
            ("reembed_started", str(time.time()))])


def from_side_table(store: Store, dim: int) -> None:
    """A reembed begun by the release that kept new vectors in `reembed_vectors`: they move
    to the column (writer)."""
    with store.transaction() as db:
        new_column(store, db, dim)
        db.execute(f"UPDATE chunks SET {COLUMN} = CAST(r.vector AS "
                   f"FLOAT[{int(dim)}]) FROM reembed_vectors r "
                   "WHERE chunks.id = r.id")
        db.execute("DELETE FROM reembed_vectors")


def drop(store: Store) -> None:
    """Drop the new vectors and the reembed's meta keys: the old model stays (writer)."""
    with store.transaction() as db:
        if has_column(store):
            drop_indexes(db, ("chunks",))
            db.execute(f"ALTER TABLE chunks DROP COLUMN {COLUMN}")
            store.create_indexes()
        db.execute("DELETE FROM reembed_vectors")
        db.execute("DELETE FROM meta WHERE key IN (SELECT unnest(?))", [list(KEYS)])


def done(store: Store) -> int:
    """Chunks that have their new vector (0 once the switch or a cancel dropped the column,
    which the writer may do between a reader's look for it and its count)."""
    if not has_column(store):
        return 0
    try:
        return int(scalar(store.db.cursor(), f"SELECT count({COLUMN}) FROM chunks"))
    except duckdb.BinderException:
        return 0


def texts_after(store: Store, cursor: int, limit: int | None) -> tuple[np.ndarray, list[str]]:
    """(ids, indexed texts) of the chunks after the cursor, in id order."""
    sql = f"SELECT c.id, {INDEXED_TEXT} FROM chunks c WHERE c.id > ? ORDER BY c.id"
    rows = store.reader().execute(sql + (f" LIMIT {int(limit)}" if limit else ""),
                                  [cursor]).fetchall()
    return np.asarray([r[0] for r in rows], np.int64), [r[1] for r in rows]


def store_batch(store: Store, ids: np.ndarray, vectors: np.ndarray, dim: int) -> None:
    """Store new vectors and move the cursor past them, in one transaction (writer)."""
    with store.transaction() as db:
        insert(db, ids, vectors, dim)
        db.execute("UPDATE meta SET value = ? WHERE key = 'reembed_cursor'",
                   [str(int(ids[-1]))])


def insert(db: duckdb.DuckDBPyConnection, ids: np.ndarray, vectors: np.ndarray,
           dim: int) -> None:
    """Write new vectors into the column (inside the caller's transaction)."""
    column = np.empty(len(ids), dtype=object)
    for row, vector in enumerate(np.asarray(vectors, np.float32)):
        column[row] = vector
    db.register("new_vectors", {"id": ids, "vector": column})
    try:
        db.execute(f"UPDATE chunks SET {COLUMN} = CAST(n.vector AS "
                   f"FLOAT[{int(dim)}]) FROM new_vectors n "
                   "WHERE chunks.id = n.id AND chunks.id BETWEEN ? AND ?",  # row groups
                   [int(ids.min()), int(ids.max())])  # of other ids are skipped unread
    finally:
        db.unregister("new_vectors")


def stored_after(store: Store, covered: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ids, vectors) of the new vectors stored for chunks after `covered`, in id order and in
    batches."""
    db = store.reader()
    while True:
        data = db.execute(f"SELECT id, {COLUMN} AS vector FROM chunks WHERE id > ? AND "
                          f"{COLUMN} IS NOT NULL ORDER BY id LIMIT {READ_BATCH}",
                          [covered]).fetchnumpy()
        ids = np.asarray(data["id"], np.int64)
        if not len(ids):
            return
        yield ids, np.stack(list(data["vector"])).astype(np.float32)
        covered = int(ids[-1])


def missing(db: duckdb.DuckDBPyConnection) -> int:
    """Chunks without their new vector (inside the switch's transaction)."""
    return int(scalar(db, f"SELECT count(*) FROM chunks WHERE {COLUMN} IS NULL"))


def swap_columns(db: duckdb.DuckDBPyConnection, dim: int) -> None:
    """Rename the new vector column into place and give the (emptied) tree tables vector
    columns of the new dimension (inside the switch's transaction; the indexes are made again
    by `Store.create_indexes`)."""
    drop_indexes(db, ("chunks", "nodes"))
    db.execute("ALTER TABLE chunks DROP COLUMN vector")
    db.execute(f"ALTER TABLE chunks RENAME COLUMN {COLUMN} TO vector")
    db.execute("DELETE FROM leaves")
    db.execute("DELETE FROM nodes")
    db.execute("ALTER TABLE nodes DROP COLUMN vector")
    db.execute("ALTER TABLE nodes DROP COLUMN abstract_vector")
    db.execute(f"ALTER TABLE nodes ADD COLUMN vector FLOAT[{dim}]")
    db.execute(f"ALTER TABLE nodes ADD COLUMN abstract_vector FLOAT[{dim}]")


def name_model(db: duckdb.DuckDBPyConnection, model: str, dim: int, generation: int) -> None:
    """Name the new model and dimension (chosen by a reembed), drop the reembed's keys and set
    the generation (inside the switch's transaction)."""
    db.execute("DELETE FROM meta WHERE key IN (SELECT unnest(?))",
               [[*KEYS, "model", "dim", "model_by"]])
    db.executemany("INSERT INTO meta VALUES (?, ?)",
                   [("model", model), ("dim", str(dim)), ("model_by", "reembed")])
    db.execute("UPDATE meta SET value = ? WHERE key = 'generation'", [str(generation)])

"""The current schema of kb.duckdb: its tables, meta rows and indexes, and the upgrade to it.

`TABLES` is the one statement of the tables as this release writes them: a new database is
created from it, and every migration ends by creating the tables it lacks from it (a step that
adds a column still alters its table; see `migrations.py`).
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import duckdb

from psirag_kb import __version__
from psirag_kb.storage import migrations
from psirag_kb.storage.conversations import create_conversation_tables
from psirag_kb.storage.migrations import SCHEMA_VERSION, Step

log = logging.getLogger(__name__)

TABLES: dict[str, str] = {
    "files": """id BIGINT, path VARCHAR, origin VARCHAR, hash VARCHAR, size BIGINT,
        mtime DOUBLE, state VARCHAR, reason VARCHAR, chunks INTEGER, updated DOUBLE,
        encoding VARCHAR DEFAULT ''""",
    "chunks": """id BIGINT, file_id BIGINT, ordinal INTEGER, source VARCHAR,
        start_char INTEGER, end_char INTEGER, line_first INTEGER, line_last INTEGER,
        text VARCHAR, hash VARCHAR, vector FLOAT[{dim}], location VARCHAR,
        context VARCHAR DEFAULT '', contents FLOAT DEFAULT 0""",
    "nodes": """id BIGINT, parent BIGINT, layer INTEGER, ord INTEGER,
        vector FLOAT[{dim}], abstract VARCHAR, dirty BOOLEAN,
        abstract_vector FLOAT[{dim}], label VARCHAR""",
    "leaves": "chunk_id BIGINT, parent BIGINT, ord INTEGER",
    "reembed_vectors": "id BIGINT, vector FLOAT[]",
}
"""Each table's columns ({dim}: the database's vector dimension). reembed_vectors held the new
model's vectors of a reembed begun by an older release (a list: its dimension may differ); the
conversation tables are `conversations.py`'s."""

INDEXES = (("chunks_id", "chunks", "id"), ("chunks_file", "chunks", "file_id"),
           ("files_id", "files", "id"), ("leaves_chunk", "leaves", "chunk_id"),
           ("nodes_id", "nodes", "id"))
"""(name, table, column) of each index: id lookups went from 10 to 1.5 ms at 1M chunks."""
PATH_INDEX = "files_path_unique"
"""The unique index on files.path (schema 4; version 3 had a plain one named files_path)."""


def open_meta(db: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The meta table's rows (empty for a new database, for which the table is created)."""
    db.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR, value VARCHAR)")
    return dict(db.execute("SELECT key, value FROM meta").fetchall())


def create_tables(db: duckdb.DuckDBPyConnection, dim: int, if_missing: bool = False) -> None:
    """Create every table of the current schema (only those missing when `if_missing`)."""
    exists = " IF NOT EXISTS" if if_missing else ""
    for table, columns in TABLES.items():
        db.execute(f"CREATE TABLE{exists} {table} ({columns.format(dim=int(dim))})")
    create_conversation_tables(db)


def create(db: duckdb.DuckDBPyConnection, model: str, dim: int) -> None:
    """A new database at the current schema: tables, meta rows and indexes (inside the
    caller's transaction)."""
    create_tables(db, dim)
    rows = [
        ("schema_version", str(SCHEMA_VERSION)),
        ("model", model),
        ("dim", str(dim)),
        ("generation", "0"),
        ("next_file_id", "1"),
        ("next_chunk_id", "1"),
        ("next_node_id", "1"),
        ("identity", uuid.uuid4().hex),
        ("release", __version__),
    ]
    db.executemany("INSERT INTO meta VALUES (?, ?)", rows)
    create_indexes(db, merge_pending=False)


def create_indexes(db: duckdb.DuckDBPyConnection, merge_pending: bool) -> None:
    """The indexes lookups by id, file and path need (a scan costs O(n) at a million);
    the one on files.path is unique, once duplicate rows are merged."""
    for name, table, column in INDEXES:
        db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({column})")
    if not merge_pending:
        db.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {PATH_INDEX} ON files (path)")
        db.execute("DROP INDEX IF EXISTS files_path")


def drop_indexes(db: duckdb.DuckDBPyConnection, tables: tuple[str, ...]) -> None:
    """Drop the indexes of `INDEXES` on these tables, so that they can be altered (made again
    by `create_indexes`)."""
    for name, table, _ in INDEXES:
        if table in tables:
            db.execute(f"DROP INDEX IF EXISTS {name}")


def missing_columns(db: duckdb.DuckDBPyConnection) -> list[str]:
    """The columns of `TABLES` the database lacks, as "table.column" (empty when none)."""
    found = set(db.execute("SELECT table_name, column_name FROM duckdb_columns()").fetchall())
    return [f"{table}.{column}" for table, columns in TABLES.items()
            for column in (part.split()[0] for part in columns.split(","))
            if (table, column) not in found]


def _complete(step: Step) -> None:
    """The end of every migration: the tables of the current schema it lacks are created;
    a column no step added is logged."""
    create_tables(step.db, step.dim, if_missing=True)
    missing = missing_columns(step.db)
    if missing:
        log.warning("%s: the upgraded schema lacks %s", step.path, ", ".join(missing))


def upgrade(db: duckdb.DuckDBPyConnection, path: Path, dim: int, version: int,
            meta: dict[str, str]) -> tuple[set[str], bool]:
    """Migrate an older schema in place (`migrations.migrate`: one transaction, a copy of the
    file kept until it commits), then create the indexes a migration dropped and record this
    release as the last to open the database; returns (the derived indexes to rebuild,
    whether duplicate file rows wait for their merge)."""
    step = migrations.migrate(db, path, dim, version, _complete)
    rebuild = migrations.pending_rebuilds(db) | step.rebuild
    merge_pending = step.merge_pending or meta.get("merge_pending") == "1"
    create_indexes(db, merge_pending)
    if version >= SCHEMA_VERSION and meta.get("release") != __version__:
        db.execute("DELETE FROM meta WHERE key = 'release'")
        db.execute("INSERT INTO meta VALUES ('release', ?)", [__version__])
    return rebuild, merge_pending

"""Schema migrations of kb.duckdb: small named steps, run in one transaction at opening.

How to add a schema change (one function):

    @migration(8, "file encodings")
    def _encodings(step: Step) -> None:
        step.drop_indexes("files")
        step.db.execute("ALTER TABLE files ADD COLUMN IF NOT EXISTS encoding VARCHAR")

The decorator's version is the schema the step produces: one more than the last step's (a gap or
a repeated number is an error at import, so two branches adding the same number are caught by
the first test that imports the store). `SCHEMA_VERSION` follows by itself. A step gets the open
connection inside the migration's transaction (`step.db`; never BEGIN or COMMIT there), the
database's vector dimension (`step.dim`) and its path; it may say which derived indexes must be
rebuilt from DuckDB after it (`rebuild=("bm25",)`: "bm25", "dense" or "tree") when it changes
what they hold: BM25 and hnswlib are rebuilt as the stores open (recorded in
meta.rebuild_pending until they are, so a crash repeats it), and the tree's rows are deleted in
the migration's transaction, so the daemon builds a new one while queries use the flat
retrievers. DuckDB alters no table an index depends on: drop the table's indexes first with
`step.drop_indexes("chunks")`; every index is created again after the migration commits.

The current schema is stated once, in `schema.TABLES`: a new database is created from it, and
every migration ends (`schema.upgrade` hands `migrate` its completion) by creating the tables of
it that the database lacks, so a new table needs no step of its own. A new column needs both: its
place in `schema.TABLES` and a step that adds it to older databases (a step keeps the DDL of its
own version: what upgrades an old database must not change when the schema moves on); a column
no step added is logged at the end of the migration, and tests/integration/test_upgrades.py
compares an upgraded database with a new one.

`migrate` copies kb.duckdb aside (after a checkpoint) before the first step and removes the copy
once the transaction committed: a failure rolls every step back (the database is as it was) and a
crash leaves the original file and its copy, and the next opening migrates again.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np

from psirag_kb import __version__
from psirag_kb.errors import NewerDataError, StoreError

log = logging.getLogger(__name__)

FIRST_VERSION = 1
"""The schema of the first release, which needs no step."""


@dataclass
class Step:
    """What a migration step works with: the connection in the open transaction."""

    db: duckdb.DuckDBPyConnection
    path: Path
    dim: int
    rebuild: set[str] = field(default_factory=set)
    """Derived indexes the steps run so far ask to be rebuilt from DuckDB."""
    merge_pending: bool = False
    """Whether duplicate file rows wait for `Store.merge_duplicates` (schema 4's step)."""

    def drop_indexes(self, table: str) -> None:
        """Drop the DuckDB indexes on a table, so that it can be altered (they are created
        again once the migration committed)."""
        rows = self.db.execute("SELECT index_name FROM duckdb_indexes() WHERE table_name = ?",
                               [table]).fetchall()
        for (name,) in rows:
            self.db.execute(f'DROP INDEX IF EXISTS "{name}"')

    def has_column(self, table: str, column: str) -> bool:
        """Whether a table has this column."""
        return self.db.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_name = ? AND column_name = ?",
            [table, column]).fetchone() is not None


@dataclass(frozen=True)
class Migration:
    """One step: the schema version it produces, a name for the log, what it does."""

    version: int
    name: str
    run: Callable[[Step], None]
    rebuild: tuple[str, ...] = ()


MIGRATIONS: list[Migration] = []
"""Every step, in order of the version it produces."""


def migration(version: int, name: str, rebuild: tuple[str, ...] = ()
              ) -> Callable[[Callable[[Step], None]], Callable[[Step], None]]:
    """Register a function as the step that produces schema `version` (see the module)."""
    def register(run: Callable[[Step], None]) -> Callable[[Step], None]:
        expected = (MIGRATIONS[-1].version if MIGRATIONS else FIRST_VERSION) + 1
        if version != expected:
            raise RuntimeError(f"migration {name!r} produces schema {version}; the next step "
                               f"must produce {expected} (renumber it after a merge)")
        MIGRATIONS.append(Migration(version, name, run, rebuild))
        return run
    return register


def release_of(meta: dict[str, str]) -> str:
    """The release named in a meta table ('0.1.0 or earlier' before releases were recorded)."""
    return meta.get("release") or "0.1.0 or earlier"


def refuse_newer(path: Path, meta: dict[str, str]) -> None:
    """Raise `NewerDataError` when the database's schema is above this release's."""
    version = int(meta.get("schema_version", "0"))
    if version <= schema_version():
        return
    raise NewerDataError(
        f"{path} was written by psirag-kb {release_of(meta)} (schema {version}); this is "
        f"psirag-kb {__version__} (schema {schema_version()}), which cannot read it: install "
        f"psirag-kb {release_of(meta)} or later (pip install --upgrade psirag-kb), or use "
        "another --data-dir; nothing was changed"
    )


_observers = threading.local()
"""This thread's `observed` callback, if any."""


@contextmanager
def observed(report: Callable[[str], None]) -> Iterator[None]:
    """Tell `report(what)` what a migration of the stores opened in this thread meanwhile
    does (the daemon answers it on /api/ready while it opens)."""
    before = getattr(_observers, "report", None)
    _observers.report = report
    try:
        yield
    finally:
        _observers.report = before


def report(what: str) -> None:
    """Tell this thread's observer what the migration does now (see `observed`)."""
    told = getattr(_observers, "report", None)
    if told is not None:
        told(what)


REBUILD_KEY = "rebuild_pending"
"""meta key: the derived indexes ("bm25,dense") a committed migration asks to rebuild, cleared
once they are (so a crash before the rebuild repeats it at the next opening)."""


def pending_rebuilds(db: duckdb.DuckDBPyConnection) -> set[str]:
    """The derived indexes a committed migration still asks to rebuild."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", [REBUILD_KEY]).fetchone()
    return {name for name in (row[0] if row else "").split(",") if name}


def schema_version() -> int:
    """The schema this release writes: the last step's."""
    return MIGRATIONS[-1].version if MIGRATIONS else FIRST_VERSION


def pre_migration_copy(path: Path, version: int) -> Path:
    """Where the copy of the database is kept while it migrates from `version`."""
    return path.with_name(f"{path.name}.pre-upgrade-v{version}")


def migrate(db: duckdb.DuckDBPyConnection, path: Path, dim: int, version: int,
            complete: Callable[[Step], None] | None = None) -> Step:
    """Run every step above `version`, then `complete` (the current schema's tables), in one
    transaction, with a copy of the file kept until it commits; returns what the steps ask of
    the caller (rebuilds, a pending merge)."""
    step = Step(db, path, dim)
    steps = [m for m in MIGRATIONS if m.version > version]
    if not steps:
        return step
    copy = pre_migration_copy(path, version)
    db.execute("CHECKPOINT")  # the file alone then holds every committed change
    partial = copy.with_name(copy.name + ".part")
    shutil.copyfile(path, partial)
    os.replace(partial, copy)  # a crash mid-copy never leaves a torn copy under its name
    target = schema_version()
    db.execute("BEGIN")
    try:
        for each in steps:
            report(f"upgrading the database schema from version {version} to {target} "
                   f"(psirag-kb {__version__}): step {each.version}, {each.name}")
            each.run(step)
            step.rebuild.update(each.rebuild)
            log.info("%s: schema %d -> %d (%s)", path, each.version - 1, each.version,
                     each.name)
        if complete is not None:
            complete(step)
        if "tree" in step.rebuild:  # a tree missing at loading is rebuilt from the chunks
            db.execute("DELETE FROM leaves")
            db.execute("DELETE FROM nodes")
        pending = sorted(step.rebuild - {"tree"} | pending_rebuilds(db))
        db.execute("DELETE FROM meta WHERE key IN ('schema_version', 'release', "
                   f"'{REBUILD_KEY}')")
        db.executemany("INSERT INTO meta VALUES (?, ?)",
                       [("schema_version", str(schema_version())), ("release", __version__),
                        (REBUILD_KEY, ",".join(pending))])
        db.execute("COMMIT")
    except BaseException as exc:
        db.execute("ROLLBACK")
        if isinstance(exc, duckdb.Error | OSError | ValueError):
            raise StoreError(
                f"{path}: upgrading the schema from version {version} to {schema_version()} "
                f"failed ({type(exc).__name__}: {exc}); nothing was changed (the database is "
                f"as it was, and a copy is at {copy}); report this and keep using the "
                "previous release meanwhile") from exc
        raise
    copy.unlink(missing_ok=True)
    log.info("%s: upgraded from schema %d to %d (psirag-kb %s)", path, version,
             schema_version(), __version__)
    return step


# -- the steps ------------------------------------------------------------------------------


DUPLICATE_FILES = """SELECT id FROM (
    SELECT id, row_number() OVER (
        PARTITION BY path ORDER BY (state = 'indexed') DESC, updated DESC NULLS LAST, id DESC
    ) AS rank FROM files) WHERE rank > 1"""
"""Ids of the file rows that repeat a path, all but the best one per path (indexed first, then
the most recently written)."""


@migration(2, "chunk locations")
def _locations(step: Step) -> None:
    """chunks.location (JSON text: page, slide, sheet and rows); indexed PDFs get an empty file
    hash, so the next ingest or rescan reads them again and gives their chunks page locations."""
    step.drop_indexes("chunks")
    step.db.execute("ALTER TABLE chunks ADD COLUMN IF NOT EXISTS location VARCHAR")
    step.db.execute("UPDATE files SET hash = '' WHERE origin = 'file' AND state = 'indexed' "
                    "AND lower(path) LIKE '%.pdf'")


@migration(3, "chunk context headers")
def _context(step: Step) -> None:
    """chunks.context (the header embedded and indexed with the text), '' for every chunk there
    is: nothing is read or embedded again; a file's chunks get headers when it next changes."""
    step.drop_indexes("chunks")
    step.db.execute("ALTER TABLE chunks ADD COLUMN IF NOT EXISTS context VARCHAR DEFAULT ''")


@migration(4, "one row per path")
def _one_row_per_path(step: Step) -> None:
    """files.path becomes unique. Older versions could store one file twice (folders named or
    watched inside each other); those rows are merged by `Store.merge_duplicates` once the tree
    is loaded (the removed chunks leave it as any removal does), recorded by meta.merge_pending
    until then; the unique index follows the merge. It also gives the database its identity."""
    if step.db.execute(DUPLICATE_FILES + " LIMIT 1").fetchone():
        step.db.execute("DELETE FROM meta WHERE key = 'merge_pending'")
        step.db.execute("INSERT INTO meta VALUES ('merge_pending', '1')")
        step.merge_pending = True
    if not step.db.execute("SELECT 1 FROM meta WHERE key = 'identity'").fetchone():
        import uuid

        step.db.execute("INSERT INTO meta VALUES ('identity', ?)", [uuid.uuid4().hex])


@migration(5, "conversations")
def _conversations(step: Step) -> None:
    """The conversations and turns tables (`storage/conversations.py`), empty."""
    from psirag_kb.storage.conversations import create_conversation_tables

    create_conversation_tables(step.db)


@migration(6, "the release that wrote the database")
def _release(step: Step) -> None:
    """meta.release names the psirag-kb release that last upgraded or created the database
    (written by `migrate` after the last step); the tables written by releases before
    versioned schemas gained columns without a version (nodes.abstract_vector and
    nodes.label, the leaves table, meta.next_node_id) are completed here."""
    db = step.db
    if not step.has_column("nodes", "abstract_vector") or not step.has_column("nodes", "label"):
        step.drop_indexes("nodes")
        db.execute(f"ALTER TABLE nodes ADD COLUMN IF NOT EXISTS abstract_vector "
                   f"FLOAT[{step.dim}]")
        db.execute("ALTER TABLE nodes ADD COLUMN IF NOT EXISTS label VARCHAR")
    db.execute("CREATE TABLE IF NOT EXISTS leaves (chunk_id BIGINT, parent BIGINT, ord INTEGER)")
    if not db.execute("SELECT 1 FROM meta WHERE key = 'next_node_id'").fetchone():
        db.execute("INSERT INTO meta VALUES ('next_node_id', '1')")


@migration(7, "vectors of a new embedding model")
def _reembed_vectors(step: Step) -> None:
    """reembed_vectors holds each chunk's vector from the model a running `reembed` moves to
    (empty when none runs; see ingest/reembed.py)."""
    step.db.execute("CREATE TABLE IF NOT EXISTS reembed_vectors (id BIGINT, vector FLOAT[])")


@migration(8, "file encodings")
def _encodings(step: Step) -> None:
    """files.encoding: the character encoding a text file was decoded from ('' for every file
    there is; a text file's is recorded when it is next read)."""
    if not step.has_column("files", "encoding"):
        step.drop_indexes("files")
        step.db.execute("ALTER TABLE files ADD COLUMN encoding VARCHAR DEFAULT ''")


CONTENTS_BATCH = 20_000
"""Chunks scored per read while schema 9's step scores the chunks there are."""


@migration(9, "contents scores")
def _contents(step: Step) -> None:
    """chunks.contents: the share of a chunk's lines that are contents or index entries
    (`storage/contents.py`), scored here for every chunk there is (its text is read, nothing
    is embedded again), then as each new chunk is stored."""
    from psirag_kb.storage.contents import contents_score

    db = step.db
    if not step.has_column("chunks", "contents"):
        step.drop_indexes("chunks")
        db.execute("ALTER TABLE chunks ADD COLUMN contents FLOAT DEFAULT 0")
    last = -1
    while True:
        rows = db.execute("SELECT id, text FROM chunks WHERE id > ? ORDER BY id LIMIT ?",
                          [last, CONTENTS_BATCH]).fetchall()
        if not rows:
            return
        last = rows[-1][0]
        scored = [(i, score) for i, text in rows if (score := contents_score(text or ""))]
        if scored:
            db.register("scored_chunks", {
                "id": np.array([i for i, _ in scored], np.int64),
                "contents": np.array([s for _, s in scored], np.float32)})
            try:
                db.execute("UPDATE chunks SET contents = CAST(s.contents AS FLOAT) "
                           "FROM scored_chunks s WHERE chunks.id = s.id")
            finally:
                db.unregister("scored_chunks")


SCHEMA_VERSION = schema_version()
"""2: chunks.location. 3: chunks.context. 4: one row per files.path, meta.identity.
5: conversations and turns. 6: meta.release. 7: reembed_vectors. 8: files.encoding.
9: chunks.contents (see each step's docstring)."""

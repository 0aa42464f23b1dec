"""The knowledge base's DuckDB database, the source of truth: typed reads and writes of its rows."""

from __future__ import annotations

import json
import logging
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from psirag_kb.errors import ModelMismatchError, StoreError
from psirag_kb.storage import migrations, schema
from psirag_kb.storage.changes import ChangePlan, write_plan
from psirag_kb.storage.migrations import DUPLICATE_FILES
from psirag_kb.storage.records import (
    NOTE_SEP,
    UNAVAILABLE,
    Delta,
    FileChange,
    FileRecord,
    Hit,
    unavailable_reason,
)
from psirag_kb.storage.reports import Reports
from psirag_kb.storage.sql import scalar

log = logging.getLogger(__name__)

INDEXED_TEXT = ("CASE WHEN coalesce(c.context, '') = '' THEN c.text "
                "ELSE c.context || chr(10) || c.text END")
"""`indexed_text` in SQL, over the chunks table as `c`."""

VECTOR_BATCH = 50_000
"""Chunk vectors read per query when all of them are needed (a tree build)."""

MEMORY_LIMIT = "1GB"
"""DuckDB's buffer pool: it spills beyond this instead of growing with the database."""
LEAN_MEMORY_LIMIT = "256MB"
"""The buffer pool while a large tree build needs the memory."""
CLOSE_WAIT_S = 30.0
"""How long `close` waits out other threads' calls on the connection (DuckDB refuses to close
a connection while a reader makes a cursor of it)."""

TreeUpdate = Callable[[np.ndarray, np.ndarray, np.ndarray], object]
"""tree_update(added chunk ids, their vectors, removed chunk ids): run inside the transaction of
a change, after its chunk rows; it updates the tree and writes the tree's rows (what it returns
is ignored)."""


def reembedded_model(path: Path) -> str | None:
    """The model a `reembed` switched this database to (meta.model_by = 'reembed'), which
    then wins over [embedding] model; None for none (or no database yet)."""
    if not Path(path).is_file():
        return None
    try:
        db = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return None  # in use or unreadable: opening it says why
    try:
        meta = dict(db.execute("SELECT key, value FROM meta WHERE key IN "
                               "('model', 'model_by')").fetchall())
    except duckdb.Error:
        return None
    finally:
        db.close()
    return meta.get("model") if meta.get("model_by") == "reembed" else None


def _stack(vectors: list[np.ndarray], dim: int) -> np.ndarray:
    """Rows as one float32 array (an empty (0, dim) array for none)."""
    if not vectors:
        return np.zeros((0, dim), np.float32)
    return np.stack(vectors).astype(np.float32)


def _unavailable(state: str, reason: str | None, since: float | None) -> dict[str, Any] | None:
    """A hit's `unavailable` value from its file's row."""
    if state != UNAVAILABLE:
        return None
    return {"since": since, "reason": unavailable_reason(reason or "")}


def _location(value: str | None) -> dict[str, Any] | None:
    """A stored location back as a dict (None when there is none or it is unreadable)."""
    if not value:
        return None
    try:
        found = json.loads(value)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


class Store(Reports):
    """The knowledge base's DuckDB database (one writer process, one writer thread).

    The owner thread writes through `db`; every other thread reads through a cursor of its own,
    which sees the last committed state and never waits for a write transaction.
    """

    def __init__(self, path: Path, model: str, dim: Callable[[], int]) -> None:
        """Open or create the database; `dim` is asked only when the database is new."""
        self.path = Path(path)
        self.owner: threading.Thread = threading.current_thread()
        self.commits = 0
        """Transactions committed by this process (an int readers compare without a query)."""
        self.created = False
        """Whether this process created the database (a new identity)."""
        self.merge_pending = False
        """Whether duplicate file rows of a version-3 database wait for `merge_duplicates`."""
        self.rebuild: set[str] = set()
        """Derived indexes ("bm25", "dense", "tree") a migration asks to rebuild from DuckDB."""
        try:
            self.db = duckdb.connect(str(self.path))
        except duckdb.IOException as exc:
            text = str(exc)
            if "Could not set lock" in text:  # not "lock": a path or "block" may hold it
                raise StoreError(
                    f"{self.path} is in use by another process ({text.splitlines()[0]}); "
                    "stop that process or query it through the daemon's API"
                ) from exc
            raise StoreError(self._corrupt_message(exc)) from exc
        except duckdb.Error as exc:
            raise StoreError(self._corrupt_message(exc)) from exc
        try:
            self.db.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
            self._migrate(model, dim)
        except duckdb.Error as exc:
            self.db.close()
            raise StoreError(self._corrupt_message(exc)) from exc
        except BaseException:  # a refused or failed migration: the file stays as it was
            self.db.close()
            raise

    def _corrupt_message(self, exc: Exception) -> str:
        """The message for a database that cannot be opened, with the commands that recover."""
        wal = self.path.with_name(self.path.name + ".wal")
        aside = " && ".join(f"mv {shlex.quote(str(p))} {shlex.quote(str(p) + '.corrupt')}"
                            for p in (self.path, wal) if p.exists())
        copies = sorted(self.path.parent.glob(self.path.name + ".pre-upgrade-v*[0-9]"))
        kept = (f"; {copies[-1]} is the copy kept before an interrupted upgrade: moving it to "
                f"{self.path.name} gives the database as it was before" if copies else "")
        return (
            f"the database {self.path} cannot be opened ({exc}){kept}; if it is corrupted, move it "
            f"aside with `{aside}` and rebuild with "
            f"`psirag-kb --data-dir {shlex.quote(str(self.path.parent))} ingest <folders>`"
        )

    def _migrate(self, model: str, dim_of_model: Callable[[], int]) -> None:
        """Create the schema, or check an existing one against the model name."""
        db = self.db
        meta = schema.open_meta(db)
        if meta:
            migrations.refuse_newer(self.path, meta)
            if meta.get("model") != model:
                raise ModelMismatchError(
                    f"{self.path} was built with embedding model {meta.get('model')!r} "
                    f"(dimension {meta.get('dim')}), not {model!r}; set "
                    f"[embedding] model = {meta.get('model')!r} or use another --data-dir"
                )
            self.dim = int(meta["dim"])
            self.rebuild, self.merge_pending = schema.upgrade(
                db, self.path, self.dim, int(meta.get("schema_version", "0")), meta)
            return
        self.dim = dim = int(dim_of_model())
        self.created = True
        db.execute("BEGIN")
        schema.create(db, model, dim)
        db.execute("COMMIT")

    def create_indexes(self) -> None:
        """Create the indexes a new table or an altered one lacks (`schema.create_indexes`)."""
        schema.create_indexes(self.db, self.merge_pending)

    @contextmanager
    def lean(self) -> Iterator[None]:
        """Shrink DuckDB's buffer pool for a block that needs the memory (it evicts pages)."""
        self.db.execute(f"SET memory_limit = '{LEAN_MEMORY_LIMIT}'")
        try:
            yield
        finally:
            self.db.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")

    def close(self) -> None:
        """Close the connection once no other thread is calling it (a background tree build
        or a reader may still be making a cursor when the knowledge base closes)."""
        deadline = time.monotonic() + CLOSE_WAIT_S
        while True:
            try:
                self.db.close()
                return
            except duckdb.ResourceInUseException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def reader(self) -> duckdb.DuckDBPyConnection:
        """The connection for reads: `db` on the owner thread, else a new cursor (about 10 us),
        closed when the caller drops it. A cursor kept per thread would outlive its request
        on a pooled thread (the API's, the MCP server's) and block CHECKPOINT."""
        if threading.current_thread() is self.owner:
            return self.db
        return self.db.cursor()

    # -- meta -------------------------------------------------------------------------------

    def _meta(self, key: str) -> str:
        row = self.reader().execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else ""

    def _set_meta(self, key: str, value: str) -> None:
        self.db.execute("UPDATE meta SET value = ? WHERE key = ?", [value, key])

    def chunk_files(self) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
        """(chunk ids, row of each chunk's file in the list, the file paths; None for records
        of a corpus): every chunk's file, read as arrays."""
        db = self.reader()
        files = db.execute("SELECT id, path, origin FROM files ORDER BY id").fetchall()
        chunks = db.execute("SELECT id, file_id FROM chunks ORDER BY id").fetchnumpy()
        file_ids = np.asarray([f[0] for f in files], np.int64)
        rows = np.searchsorted(file_ids, np.asarray(chunks["file_id"], np.int64))
        paths = [f[1] if f[2] == "file" else None for f in files]
        return np.asarray(chunks["id"], np.int64), rows, paths

    def chunk_paths(self, ids: np.ndarray) -> dict[int, str | None]:
        """The file path of each of these chunks (None for records of a corpus)."""
        rows = self.reader().execute(
            """SELECT c.id, f.path, f.origin FROM chunks c JOIN files f ON c.file_id = f.id
               WHERE c.id IN (SELECT unnest(?))""", [np.asarray(ids, np.int64).tolist()]
        ).fetchall()
        return {int(r[0]): (r[1] if r[2] == "file" else None) for r in rows}

    def _take_ids(self, key: str, count: int) -> int:
        """Reserve `count` ids from a counter, returning the first."""
        first = int(self._meta(key))
        self._set_meta(key, str(first + count))
        return first

    @property
    def generation(self) -> int:
        """Counter bumped by every committed write; derived indexes record it."""
        return int(self._meta("generation"))

    @property
    def identity(self) -> str:
        """A random name given to the database when it was created (or upgraded to schema
        4); derived indexes record it, so a recreated database is never mistaken for theirs."""
        return self._meta("identity")

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Run a block in one transaction, rolled back on any error (owner thread only)."""
        if threading.current_thread() is not self.owner:
            raise StoreError("a write outside the knowledge base's writer thread; hand it to "
                             "KnowledgeBase.writer")
        self.db.execute("BEGIN")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        self.commits += 1

    # -- files ------------------------------------------------------------------------------

    def file(self, path: str) -> FileRecord | None:
        """The record of one path, if known."""
        row = self.reader().execute(
            "SELECT id, path, origin, hash, size, mtime, state, reason, chunks FROM files "
            "WHERE path = ?",
            [path],
        ).fetchone()
        return FileRecord(*row) if row else None

    def records(self, paths: Iterable[str]) -> dict[str, FileRecord]:
        """The records of the known paths among `paths`, by path (one query)."""
        paths = list(paths)
        if not paths:
            return {}
        rows = self.reader().execute(
            "SELECT id, path, origin, hash, size, mtime, state, reason, chunks FROM files "
            "WHERE path IN (SELECT unnest(?::VARCHAR[]))",
            [paths],
        ).fetchall()
        return {row[1]: FileRecord(*row) for row in rows}

    def files(self, under: str | None = None) -> list[FileRecord]:
        """All file records, or those below a folder."""
        sql = "SELECT id, path, origin, hash, size, mtime, state, reason, chunks FROM files"
        params: list[str] = []
        if under is not None:
            sql += " WHERE path = ? OR starts_with(path, ?)"
            params = [under, under.rstrip("/") + "/"]
        rows = self.reader().execute(sql + " ORDER BY path", params).fetchall()
        return [FileRecord(*row) for row in rows]

    def chunk_hashes(self, file_id: int) -> list[tuple[int, str]]:
        """(chunk id, hash) of a file's chunks, in order."""
        return self.reader().execute(
            "SELECT id, hash FROM chunks WHERE file_id = ? ORDER BY ordinal", [file_id]
        ).fetchall()

    # -- writes -----------------------------------------------------------------------------

    def mark_unavailable(self, paths: Sequence[str], reason: str) -> int:
        """Mark these indexed files unavailable (their chunks stay), each with the reason, the
        time and the note it had, in one transaction; returns how many changed (owner thread
        only)."""
        paths = list(paths)
        if not paths:
            return 0
        sql = ("UPDATE files SET state = ?, updated = ?, reason = CASE WHEN coalesce(reason, '') "
               "= '' THEN ? ELSE ? || ? || reason END WHERE state = 'indexed' AND path IN "
               "(SELECT unnest(?::VARCHAR[]))")
        with self.transaction() as db:
            row = db.execute(sql, [UNAVAILABLE, time.time(), reason, reason, NOTE_SEP,
                                   paths]).fetchone()
        return int(row[0]) if row else 0

    def set_meta_value(self, key: str, value: str) -> None:
        """Write one meta row, adding it when missing (owner thread only)."""
        with self.transaction() as db:
            db.execute("DELETE FROM meta WHERE key = ?", [key])
            db.execute("INSERT INTO meta VALUES (?, ?)", [key, value])

    def apply(
        self, changes: list[FileChange], removals: Iterable[str] = (),
        tree_update: TreeUpdate | None = None,
    ) -> Delta:
        """Write new file states, remove files and update the tree, all in one transaction."""
        now = time.time()
        with self.transaction() as db:
            removed = self._remove(db, removals)
            plan = self._plan(changes, now)
            write_plan(db, plan, self.dim)
            removed.extend(plan.stale)
            if tree_update is not None:
                tree_update(
                    np.asarray(plan.added_ids, dtype=np.int64),
                    _stack(plan.added_vectors, self.dim), np.asarray(removed, dtype=np.int64),
                )
            generation = self.generation + 1
            self._set_meta("generation", str(generation))
        return Delta(
            generation=generation,
            added_ids=np.asarray(plan.added_ids, dtype=np.int64),
            added_vectors=_stack(plan.added_vectors, self.dim),
            added_texts=plan.added_texts,
            removed_ids=np.asarray(removed, dtype=np.int64),
            added_paths=plan.added_paths,
        )

    def _remove(self, db: duckdb.DuckDBPyConnection, paths: Iterable[str]) -> list[int]:
        """Delete these files and their chunks (inside a transaction); the chunks' ids."""
        removed: list[int] = []
        for record in self.records(paths).values():
            removed.extend(i for i, _ in self.chunk_hashes(record.id))
            db.execute("DELETE FROM chunks WHERE file_id = ?", [record.id])
            db.execute("DELETE FROM files WHERE id = ?", [record.id])
        return removed

    def _plan(self, changes: list[FileChange], now: float) -> ChangePlan:
        """Allocate the ids of new files and chunks, check the chunks to reuse and build every
        row of the changes (inside their transaction, after the removals)."""
        plan = ChangePlan()
        records = self.records(change.path for change in changes)
        unknown = sum(change.path not in records for change in changes)
        next_file = self._take_ids("next_file_id", unknown) if unknown else 0
        fresh_count = sum(c.id is None for change in changes for c in change.chunks
                          if not (change.keep_chunks and change.path in records))
        next_chunk = self._take_ids("next_chunk_id", fresh_count) if fresh_count else 0
        for change in changes:
            record = records.get(change.path)
            if record is None:
                file_id, next_file = next_file, next_file + 1
                plan.file_rows.append((file_id, change.path, change.origin, change.hash,
                                       change.size, change.mtime, change.state, change.reason,
                                       len(change.chunks), now, change.encoding))
            elif change.keep_chunks:
                plan.statements.append((
                    "UPDATE files SET state = ?, reason = ?, updated = ? WHERE id = ?",
                    [change.state, change.reason, now, record.id]))
                continue
            else:
                file_id = record.id
                plan.statements.append((
                    "UPDATE files SET origin = ?, hash = ?, size = ?, mtime = ?, state = ?, "
                    "reason = ?, chunks = ?, updated = ?, encoding = ? WHERE id = ?",
                    [change.origin, change.hash, change.size, change.mtime, change.state,
                     change.reason, len(change.chunks), now, change.encoding, file_id]))
            old_ids = {i for i, _ in self.chunk_hashes(file_id)} if record else set()
            self._plan_reuse(plan, change, old_ids)
            for chunk in change.chunks:
                if chunk.id is None:
                    chunk.id, next_chunk = next_chunk, next_chunk + 1
            plan.add_chunks(change, file_id)
        return plan

    @staticmethod
    def _plan_reuse(plan: ChangePlan, change: FileChange, old_ids: set[int]) -> None:
        """Check that the chunks a change keeps are still its file's, and plan the deletion of
        the others."""
        keep = {c.id for c in change.chunks if c.id is not None}
        if keep - old_ids:  # the chunk to reuse is gone: never point at a missing row
            raise StoreError(
                f"{change.path}: chunk(s) {sorted(keep - old_ids)[:5]} to keep are no "
                "longer the file's; the change was prepared against an older state"
            )
        stale = sorted(old_ids - keep)
        if stale:
            plan.statements.append(
                ("DELETE FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))", [stale]))
            plan.stale.extend(stale)

    # -- reads ------------------------------------------------------------------------------

    def chunk_count(self) -> int:
        """Number of chunks (leaves)."""
        return int(scalar(self.reader(), "SELECT count(*) FROM chunks"))

    def rename(self, old: str, new: str, name_header: str | None = None) -> Delta | None:
        """Give a file (and its chunks' source) a new path; its leaves stay where they are.

        `name_header` is the header the old name gave chunks with no title and no heading
        (when the new name gives another): if any chunk has it, the file's hash is cleared, so
        that it is read again and those chunks get the new name (until then, and after a crash,
        the file counts as changed). Returns the change for the derived indexes (its chunks
        move to a new BM25 scope), or None when `old` is unknown or `new` is taken.
        """
        record = self.file(old)
        if record is None or self.file(new) is not None:
            return None
        with self.transaction() as db:
            db.execute("UPDATE files SET path = ? WHERE id = ?", [new, record.id])
            moved: list[tuple[int, str, str]] = []
            if record.origin == "file":
                db.execute("UPDATE chunks SET source = ? WHERE file_id = ?", [new, record.id])
                if name_header:
                    db.execute(
                        "UPDATE files SET hash = '' WHERE id = ? AND EXISTS (SELECT 1 FROM "
                        "chunks WHERE file_id = ? AND context = ?)",
                        [record.id, record.id, name_header])
                moved = [(i, text, new) for i, text in db.execute(
                    f"SELECT c.id, {INDEXED_TEXT} FROM chunks c WHERE c.file_id = ? "
                    "ORDER BY c.ordinal", [record.id]
                ).fetchall()]
            generation = self.generation + 1
            self._set_meta("generation", str(generation))
        empty = np.zeros(0, dtype=np.int64)
        return Delta(generation, empty, np.zeros((0, self.dim), np.float32), [], empty,
                     moved=moved)

    def merge_duplicates(self, tree_update: TreeUpdate | None = None) -> Delta | None:
        """Keep one row per path of a database older than schema 4 (the indexed one written
        last), remove the other rows and their chunks and leaves, make files.path unique and
        clear meta.merge_pending (set by the schema-4 migration step); returns the change for
        the derived indexes (None if nothing was removed). Owner thread only."""
        if not self.merge_pending:
            return None
        empty = np.zeros(0, dtype=np.int64)
        with self.transaction() as db:
            drop = [row[0] for row in db.execute(DUPLICATE_FILES).fetchall()]
            removed = empty
            if drop:
                removed = np.asarray(db.execute(
                    "SELECT id FROM chunks WHERE file_id IN (SELECT unnest(?::BIGINT[])) "
                    "ORDER BY id", [drop]).fetchnumpy()["id"], dtype=np.int64)
                db.execute("DELETE FROM chunks WHERE file_id IN (SELECT unnest(?::BIGINT[]))",
                           [drop])
                db.execute("DELETE FROM files WHERE id IN (SELECT unnest(?::BIGINT[]))", [drop])
                if tree_update is not None and len(removed):
                    tree_update(empty, np.zeros((0, self.dim), np.float32), removed)
                generation = self.generation + 1
                self._set_meta("generation", str(generation))
            db.execute("DELETE FROM meta WHERE key = 'merge_pending'")
        self.merge_pending = False
        with self.transaction():  # a separate step: the index sees committed rows only
            self.create_indexes()
        log.info("%s: files.path is unique now; %d duplicate file rows (%d chunks) "
                 "merged", self.path, len(drop), len(removed))
        if not drop:
            return None
        return Delta(generation, empty, np.zeros((0, self.dim), np.float32), [], removed)

    def chunk_ids(self) -> np.ndarray:
        """Ids of every chunk, ascending."""
        data = self.reader().execute("SELECT id FROM chunks ORDER BY id").fetchnumpy()
        return np.asarray(data["id"], dtype=np.int64)

    def all_vectors(self, dtype: type = np.float32,
                    batch: int = VECTOR_BATCH) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of every chunk, ordered by id, filled in batches into one array
        (float16 halves the memory of a large tree build)."""
        ids = self.chunk_ids()
        out: np.ndarray = np.empty((len(ids), self.dim), dtype=dtype)
        db = self.reader()
        for start in range(0, len(ids), batch):
            part = ids[start:start + batch]
            data = db.execute(
                "SELECT vector FROM chunks WHERE id BETWEEN ? AND ? ORDER BY id",
                [int(part[0]), int(part[-1])],
            ).fetchnumpy()["vector"]
            if len(data) != len(part):
                raise StoreError("chunks changed while their vectors were read; try again")
            out[start:start + len(part)] = np.stack(list(data))
        return ids, out

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of the given chunk ids, in that order (a missing id is an error)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return np.zeros((0, self.dim), np.float32)
        data = self.reader().execute(
            "SELECT id, vector FROM chunks WHERE id = ANY(?::BIGINT[])",
            [ids.tolist()],
        ).fetchnumpy()
        found = dict(zip(np.asarray(data["id"]).tolist(), data["vector"], strict=True))
        missing = [i for i in ids.tolist() if i not in found]
        if missing:
            raise StoreError(f"no vector for chunk(s) {missing[:5]}")
        return np.stack([found[i] for i in ids.tolist()]).astype(np.float32, copy=False)

    def present_vectors(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of those of the given chunk ids that still exist, ascending (4 us a
        vector: six times hnswlib's `get_items`)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return ids, np.zeros((0, self.dim), np.float32)
        data = self.reader().execute(
            "SELECT id, vector FROM chunks WHERE id = ANY(?::BIGINT[]) ORDER BY id",
            [ids.tolist()],
        ).fetchnumpy()
        if len(data["id"]) == 0:
            return np.zeros(0, np.int64), np.zeros((0, self.dim), np.float32)
        return (np.asarray(data["id"], dtype=np.int64),
                np.stack(list(data["vector"])).astype(np.float32, copy=False))

    def all_texts(self, batch: int = 10_000) -> Iterator[list[tuple[int, str, str | None]]]:
        """(id, indexed text, path of its file or None for a corpus record) of every chunk, in
        batches: what the BM25 index holds (a chunk's header and text, see `indexed_text`)."""
        cursor = self.db.execute(
            f"""SELECT c.id, {INDEXED_TEXT}, CASE WHEN f.origin = 'file' THEN f.path END
               FROM chunks c JOIN files f ON c.file_id = f.id ORDER BY c.id""")
        while rows := cursor.fetchmany(batch):
            yield rows

    def scope_ids(self, paths: Sequence[str]) -> np.ndarray:
        """Ids of the chunks of files that are, or lie below, one of these absolute paths,
        ascending (corpus records have no place in a folder: never in scope).

        One join: 4 ms for a folder of 3,000 chunks among a million, 18 ms for all of them.
        """
        if not paths:
            return np.zeros(0, dtype=np.int64)
        tests = " OR ".join(["f.path = ? OR starts_with(f.path, ?)"] * len(paths))
        params = [v for p in paths for v in (p, p.rstrip("/") + "/")]
        data = self.reader().execute(
            f"""SELECT c.id FROM chunks c JOIN files f ON c.file_id = f.id
                WHERE f.origin = 'file' AND ({tests}) ORDER BY c.id""", params,
        ).fetchnumpy()
        return np.asarray(data["id"], dtype=np.int64)

    def files_of(self, ids: Iterable[int]) -> dict[int, tuple[str, float]]:
        """(path, modification time) of the file of each chunk id (one join; no text read;
        unknown ids are left out)."""
        ids = [int(i) for i in ids]
        if not ids:
            return {}
        rows = self.reader().execute(
            """SELECT c.id, f.path, coalesce(f.mtime, 0) FROM chunks c JOIN files f
               ON c.file_id = f.id WHERE c.id = ANY(?::BIGINT[])""", [ids]).fetchall()
        return {int(cid): (str(path), float(mtime)) for cid, path, mtime in rows}

    def hits(self, ids: Iterable[int]) -> dict[int, Hit]:
        """Result rows for chunk ids."""
        ids = [int(i) for i in ids]
        if not ids:
            return {}
        db = self.reader()
        # two index lookups (`= ANY`: 1.0 ms for 5 ids at 1M chunks, a semi-join 4.4 ms, a
        # join with files 3.6 ms more)
        rows = db.execute(
            """SELECT id, file_id, source, ordinal, line_first, line_last, text, location,
                      coalesce(contents, 0) FROM chunks WHERE id = ANY(?::BIGINT[])""",
            [ids],
        ).fetchall()
        if not rows:
            return {}
        files = {fid: (path, origin, _unavailable(state, reason, since))
                 for fid, path, origin, state, reason, since in db.execute(
                     "SELECT id, path, origin, state, reason, updated FROM files "
                     "WHERE id = ANY(?::BIGINT[])", [sorted({row[1] for row in rows})],
                 ).fetchall()}
        return {row[0]: Hit(row[0], files[row[1]][0], files[row[1]][1], row[2], row[3], row[4],
                            row[5], row[6], _location(row[7]), files[row[1]][2], row[8])
                for row in rows if row[1] in files}

    def texts(self, ids: Iterable[int]) -> dict[int, tuple[str, str]]:
        """(text, header) of chunk ids, by id (one index lookup; unknown ids are left out)."""
        ids = [int(i) for i in ids]
        if not ids:
            return {}
        rows = self.reader().execute(
            "SELECT id, text, coalesce(context, '') FROM chunks WHERE id = ANY(?::BIGINT[])",
            [ids]).fetchall()
        return {row[0]: (row[1], row[2]) for row in rows}

    def meta(self) -> dict[str, str]:
        """The meta table."""
        return dict(self.reader().execute("SELECT key, value FROM meta").fetchall())

    # -- one chunk in its file --------------------------------------------------------------

    def around(self, chunk_id: int, n: int = 0) -> list[Hit]:
        """A chunk and up to `n` chunks either side of it in its file, in file order (empty
        when the chunk is unknown)."""
        db = self.reader()
        row = db.execute("SELECT file_id, ordinal FROM chunks WHERE id = ?",
                         [int(chunk_id)]).fetchone()
        if row is None:
            return []
        file_id, ordinal = row
        found = db.execute("SELECT path, origin FROM files WHERE id = ?", [file_id]).fetchone()
        if found is None:
            return []
        rows = db.execute(  # a file's ordinals run 0, 1, 2, ... (the chunks_file index finds them)
            """SELECT id, source, ordinal, line_first, line_last, text, location FROM chunks
               WHERE file_id = ? AND ordinal BETWEEN ? AND ? ORDER BY ordinal""",
            [file_id, ordinal - max(0, n), ordinal + max(0, n)],
        ).fetchall()
        path, origin = found
        return [Hit(r[0], path, origin, r[1], r[2], r[3], r[4], r[5], _location(r[6]))
                for r in rows]

"""A new embedding model without downtime: every chunk embedded again in the background, then one
switch.

A background thread reads the chunks in id order (a reader cursor: writes never wait), embeds
each batch's indexed text (header and text, as ingest embeds it) with the new model, and hands the
vectors to the one writer, which stores them in `reembed_vectors` and advances the persisted
cursor in one transaction. Chunk ids only grow, so the chunks a file change adds meanwhile lie
beyond the cursor and get their new vector too (both models until the switch); removed ones are
left behind and dropped at the switch. A stopped process resumes at the cursor.

When the cursor reaches the last chunk, a new hnswlib index is built from the new vectors beside
the serving one; then one writer task embeds the few chunks added since, and one DuckDB
transaction replaces every chunk's vector, names the new model and dimension and clears the
tree's rows; after it commits the new dense index and the query embedder are swapped in together
and the tree is rebuilt from the new vectors in the background (queries use the flat retrievers
meanwhile). The tree is rebuilt rather than given new node vectors because its clustering is a
function of the embedding space: the old model's groups would stay and the new model's
neighbourhoods would be ignored. What was written for a group of chunks still describes them,
though: the switch keeps every clean abstract by the leaves its node covers
(`storage/kept.py`), and each node of the new tree that covers exactly the same chunks takes it
back, clean; the other nodes are written again (offline keywords at once, the LLM's by the
refresher).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from psirag_kb.errors import KBError
from psirag_kb.ingest.embedding import Embedder
from psirag_kb.storage import kept
from psirag_kb.storage.dense import DenseIndex
from psirag_kb.storage.store import INDEXED_TEXT, INDEXES
from psirag_kb.storage.stores import Stores

log = logging.getLogger(__name__)

BATCH = 256
"""Chunks embedded and committed per writer task."""
NEXT_DENSE = "dense-next"
"""The folder of the new model's hnswlib index while it is built."""
KEYS = ("reembed_model", "reembed_dim", "reembed_cursor", "reembed_started")
"""meta keys of a running reembed (absent when none runs)."""


class ReembedError(KBError):
    """A reembed cannot start or go on (another one runs, the model cannot be loaded)."""


class Reembed:
    """The background reembed of one knowledge base's chunks with one new model."""

    def __init__(self, stores: Stores, embedder: Embedder,
                 on_switch: Callable[[Embedder, DenseIndex], None]) -> None:
        self.stores = stores
        self.embedder = embedder
        self.on_switch = on_switch
        """Called on the writer right after the switch committed: swap the embedders in."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.state = "running"
        self.error = ""
        self.kept = 0
        """Abstracts the switch kept for the new tree's nodes over the same chunks."""
        self._rate: tuple[float, int] | None = None
        """(time, done) when this process started, for the rate."""

    # -- state ------------------------------------------------------------------------------

    @staticmethod
    def pending(stores: Stores) -> str | None:
        """The model a reembed persisted in this database is for (None when none runs)."""
        return stores.store.meta().get("reembed_model") or None

    def begin(self) -> None:
        """Record the reembed in the database (a resumed one keeps its cursor) and start."""
        meta = self.stores.store.meta()
        running = meta.get("reembed_model")
        if running and running != self.embedder.name:
            raise ReembedError(f"a reembed to {running!r} runs; wait for it or cancel it with "
                               "`psirag-kb reembed --cancel` first")
        if not running:
            if self.embedder.name == meta.get("model"):
                raise ReembedError(f"the knowledge base is embedded with {self.embedder.name!r} "
                                   "already")

            def record() -> None:
                with self.stores.store.transaction() as db:
                    db.execute("DELETE FROM reembed_vectors")
                    db.execute("DELETE FROM meta WHERE key IN (SELECT unnest(?))", [list(KEYS)])
                    db.executemany("INSERT INTO meta VALUES (?, ?)", [
                        ("reembed_model", self.embedder.name),
                        ("reembed_dim", str(self.embedder.dim)), ("reembed_cursor", "0"),
                        ("reembed_started", str(time.time()))])
            self.stores.writer.call(record)
        self._rate = (time.time(), self.done())
        self._thread = threading.Thread(target=self._run, name="psirag-reembed", daemon=True)
        self._thread.start()

    def done(self) -> int:
        """Chunks that have their new vector."""
        db = self.stores.store.db.cursor()
        return int(db.execute("SELECT count(*) FROM reembed_vectors").fetchone()[0])

    def status(self) -> dict[str, Any]:
        """{"model", "state", "done", "total", "rate", "eta_s"} for `status` ({"model",
        "state"} once it ended)."""
        if self.state in ("done", "cancelled"):
            return {"model": self.embedder.name, "state": self.state}
        done, total = self.done(), self.stores.store.chunk_count()
        rate = 0.0
        if self._rate is not None:
            since, first = self._rate
            elapsed = time.time() - since
            rate = (done - first) / elapsed if elapsed > 0 else 0.0
        left = max(0, total - done)
        return {"model": self.embedder.name, "dim": self.embedder.dim, "state": self.state,
                "done": done, "total": total, "rate": round(rate, 2),
                "eta_s": round(left / rate, 1) if rate > 0 else None,
                **({"error": self.error} if self.error else {})}

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the background thread; True when it ended."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self) -> None:
        """Stop after the running batch (the cursor keeps what was committed)."""
        self._stop.set()
        self.wait(60)

    def cancel(self) -> None:
        """Stop, and drop the new vectors and the partial new index: the old model stays."""
        self.stop()

        def drop() -> None:
            with self.stores.store.transaction() as db:
                db.execute("DELETE FROM reembed_vectors")
                db.execute("DELETE FROM meta WHERE key IN (SELECT unnest(?))", [list(KEYS)])
        self.stores.writer.call(drop)
        shutil.rmtree(self.stores.config.data_dir / NEXT_DENSE, ignore_errors=True)
        self.state = "cancelled"
        log.info("reembed to %s cancelled; the knowledge base keeps its model",
                 self.embedder.name)

    # -- the work ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._batch():
                    break
            if self._stop.is_set():
                return
            self.state = "indexing"
            dense = self._build_dense()
            if self._stop.is_set():
                return
            self.state = "switching"
            self.stores.writer.call(lambda: self._switch(dense))
            self.state = "done"
        except Exception as exc:  # noqa: BLE001 - recorded for status; the old model serves
            log.exception("reembed to %s failed", self.embedder.name)
            self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"

    def _cursor(self) -> int:
        return int(self.stores.store.meta().get("reembed_cursor", "0"))

    def _texts_after(self, cursor: int, limit: int | None) -> tuple[np.ndarray, list[str]]:
        """(ids, indexed texts) of the chunks after the cursor, in id order."""
        db = self.stores.store._read()
        sql = f"SELECT c.id, {INDEXED_TEXT} FROM chunks c WHERE c.id > ? ORDER BY c.id"
        rows = db.execute(sql + (f" LIMIT {int(limit)}" if limit else ""), [cursor]).fetchall()
        return np.asarray([r[0] for r in rows], np.int64), [r[1] for r in rows]

    def _batch(self) -> bool:
        """Embed and store the next batch; False when the cursor is past the last chunk."""
        ids, texts = self._texts_after(self._cursor(), BATCH)
        if not len(ids):
            return False
        vectors = self.embedder.embed(texts)
        self.stores.writer.call(lambda: self._store(ids, vectors))
        return True

    def _store(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Store new vectors and move the cursor past them, in one transaction (writer)."""
        with self.stores.store.transaction() as db:
            self._insert(db, ids, vectors)
            db.execute("UPDATE meta SET value = ? WHERE key = 'reembed_cursor'",
                       [str(int(ids[-1]))])

    def _insert(self, db: Any, ids: np.ndarray, vectors: np.ndarray) -> None:
        column = np.empty(len(ids), dtype=object)
        for row, vector in enumerate(np.asarray(vectors, np.float32)):
            column[row] = vector
        db.register("new_vectors", {"id": ids, "vector": column})
        try:
            db.execute("DELETE FROM reembed_vectors WHERE id IN (SELECT id FROM new_vectors)")
            db.execute("INSERT INTO reembed_vectors SELECT id, CAST(vector AS FLOAT[]) "
                       "FROM new_vectors")
        finally:
            db.unregister("new_vectors")

    def _new_vectors(self, ids: np.ndarray) -> np.ndarray:
        """The new vectors of these chunks, in that order."""
        data = self.stores.store._read().execute(
            "SELECT id, vector FROM reembed_vectors WHERE id IN (SELECT unnest(?::BIGINT[]))",
            [ids.tolist()]).fetchnumpy()
        found = dict(zip(np.asarray(data["id"]).tolist(), data["vector"], strict=True))
        return np.stack([np.asarray(found[i], np.float32) for i in ids.tolist()])

    def _build_dense(self) -> DenseIndex:
        """The new model's hnswlib index, built beside the serving one from the new vectors."""
        folder = self.stores.config.data_dir / NEXT_DENSE
        shutil.rmtree(folder, ignore_errors=True)
        dense = DenseIndex(folder, self.embedder.dim)
        db = self.stores.store._read()
        ids = np.asarray(db.execute("SELECT r.id FROM reembed_vectors r SEMI JOIN chunks c "
                                    "ON r.id = c.id ORDER BY r.id").fetchnumpy()["id"], np.int64)
        vectors = np.zeros((len(ids), self.embedder.dim), np.float32)
        for start in range(0, len(ids), 10_000):
            part = ids[start:start + 10_000]
            vectors[start:start + len(part)] = self._new_vectors(part)
        dense.rebuild(-1, ids, vectors, save=False)
        return dense

    def _switch(self, dense: DenseIndex) -> None:
        """On the writer: embed what came after the cursor, then replace every chunk's vector,
        name the new model and clear the tree in one transaction; then swap the indexes."""
        stores = self.stores
        ids, texts = self._texts_after(self._cursor(), None)
        late = self.embedder.embed(texts) if texts else None
        with stores.model_lock.exclusive():  # questions in flight end with the old model
            self._commit_switch(ids, late, dense)

    def _commit_switch(self, ids: np.ndarray, late: np.ndarray | None,
                       dense: DenseIndex) -> None:
        """The switch's transaction and the swap, with no question in flight."""
        stores, store = self.stores, self.stores.store
        dim = self.embedder.dim
        with store.transaction() as db:
            if late is not None:
                self._insert(db, ids, late)
            missing = db.execute("SELECT count(*) FROM chunks c ANTI JOIN reembed_vectors r "
                                 "ON r.id = c.id").fetchone()[0]
            if missing:
                raise ReembedError(f"{missing} chunks have no new vector; the reembed goes on")
            for name, table, _ in INDEXES:
                if table in ("chunks", "nodes"):
                    db.execute(f"DROP INDEX IF EXISTS {name}")
            db.execute("ALTER TABLE chunks DROP COLUMN vector")
            db.execute(f"ALTER TABLE chunks ADD COLUMN vector FLOAT[{dim}]")
            db.execute(f"UPDATE chunks SET vector = CAST(r.vector AS FLOAT[{dim}]) "
                       "FROM reembed_vectors r WHERE chunks.id = r.id")
            self.kept = kept.save(db, stores.tree_index.live)
            db.execute("DELETE FROM leaves")
            db.execute("DELETE FROM nodes")
            db.execute("ALTER TABLE nodes DROP COLUMN vector")
            db.execute("ALTER TABLE nodes DROP COLUMN abstract_vector")
            db.execute(f"ALTER TABLE nodes ADD COLUMN vector FLOAT[{dim}]")
            db.execute(f"ALTER TABLE nodes ADD COLUMN abstract_vector FLOAT[{dim}]")
            db.execute("DELETE FROM reembed_vectors")
            db.execute("DELETE FROM meta WHERE key IN (SELECT unnest(?))",
                       [[*KEYS, "model", "dim", "model_by"]])
            db.executemany("INSERT INTO meta VALUES (?, ?)",
                           [("model", self.embedder.name), ("dim", str(dim)),
                            ("model_by", "reembed")])
            generation = store.generation + 1
            db.execute("UPDATE meta SET value = ? WHERE key = 'generation'", [str(generation)])
        store._index()
        store.dim = stores.dim = dim
        # committed: the new model is the knowledge base's; swap everything in, then tidy up
        old = stores.dense
        dense.identity = store.identity
        dense.folder = old.folder
        dense._file = old.folder / "dense.hnsw"
        dense._generation_file = old.folder / "dense.generation"
        stores.dense = dense
        self.on_switch(self.embedder, dense)
        try:  # the chunks changed since the index was built: add and delete them
            held = np.asarray(dense.index.get_ids_list(), np.int64)
            now = store.chunk_ids()
            more = np.setdiff1d(now, held)
            dense.memory_generation = generation - 1
            dense.apply(generation, more, store.vectors(more), np.setdiff1d(held, now),
                        save=False)
            dense.save(generation)
        except Exception as exc:  # noqa: BLE001 - DuckDB has the new vectors: rebuilt from it
            stores.mark_stale("dense", exc)
        shutil.rmtree(stores.config.data_dir / NEXT_DENSE, ignore_errors=True)
        try:  # BM25 holds the same texts: only its generation follows
            stores.sparse.apply(generation, [], [])
        except Exception as exc:  # noqa: BLE001 - DuckDB has the texts: rebuilt from it
            stores.mark_stale("bm25", exc)
        stores.load_tree()  # none is stored: an empty one, "missing" until rebuilt
        stores.start_tree_rebuild()
        log.info("reembed done: %s serves queries now (dimension %d)", self.embedder.name, dim)


def model_name(name_or_path: str) -> str:
    """A model as `[embedding] model` names it: an existing folder as an absolute path."""
    path = Path(name_or_path).expanduser()
    return str(path.absolute()) if path.exists() else name_or_path

"""A new embedding model without downtime: every chunk embedded again in the background, then one
switch.

A background thread reads the chunks in id order (a reader cursor: writes never wait), embeds
each batch's indexed text (header and text, as ingest embeds it) with the new model, and hands the
vectors to the one writer, which stores them in the column `chunks.reembed_vector` (added when
the reembed begins) and advances the persisted cursor in one transaction; the thread then adds
them to the new model's hnswlib index beside the serving one (`dense-next/`), saved every
SAVE_EVERY_S seconds and at a stop with the last chunk id it holds. Chunk ids only grow, so the
chunks a file change adds meanwhile lie beyond the cursor and get their new vector too (both
models until the switch); removed ones leave with their row. A stopped process resumes at the
cursor, with the saved part of the new index (only what it lacks is added from the column).

When the cursor reaches the last chunk, one writer task embeds the few chunks added since, and
one DuckDB transaction drops the old vector column and renames the new one into place (nothing
is copied), names the new model and dimension, clears the tree's rows and brings the new index
to the chunks; questions are held out only for its commit and the swap of the dense index, the
tree and the query embedder that follows (a question is embedded and searched with one model),
not for the transaction itself, during which they read the state committed before it. The tree
is rebuilt from the new vectors in the background (queries use the flat retrievers meanwhile):
its clustering is a function of the embedding space, so the old model's groups would stay and
the new model's neighbourhoods would be ignored. What was written for a group of chunks still
describes them, though: the switch keeps every clean abstract by the leaves its node covers
(`tree/kept.py`), and each node of the new tree that covers exactly the same chunks takes it
back, clean; the other nodes are written again (offline keywords at once, the LLM's by the
refresher).
"""

from __future__ import annotations

import contextlib
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
from psirag_kb.storage import reembedding
from psirag_kb.storage.dense import DenseIndex
from psirag_kb.tree import kept
from psirag_kb.tree.stores import Stores

log = logging.getLogger(__name__)

BATCH = 256
"""Chunks embedded and committed per writer task."""
NEXT_DENSE = "dense-next"
"""The folder of the new model's hnswlib index while it is built."""
SAVE_EVERY_S = 60.0
"""Longest work on the new index between two saves of it (a stopped reembed resumes there)."""


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
        self.timings: dict[str, Any] = {}
        """Seconds of the phases: embedding, storing and indexing the batches (sums), the switch
        (the writer task), its transaction, the wait for questions in flight and the time
        questions waited for it (`exclusive_s`)."""
        self.added = 0
        """Vectors this process added to the new index (a resume adds only what the saved part
        lacks)."""
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
        """Record the reembed in the database (a resumed one keeps its cursor and the part of
        the new index it saved) and start."""
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
                reembedding.begin(self.stores.store, self.embedder.name, self.embedder.dim)
                shutil.rmtree(self.stores.config.data_dir / NEXT_DENSE, ignore_errors=True)
            self.stores.writer.call(record)
        elif not reembedding.has_column(self.stores.store):
            self.stores.writer.call(lambda: reembedding.from_side_table(
                self.stores.store, self.embedder.dim))
        self._rate = (time.time(), self.done())
        self._thread = threading.Thread(target=self._run, name="psirag-reembed", daemon=True)
        self._thread.start()

    def done(self) -> int:
        """Chunks that have their new vector."""
        return reembedding.done(self.stores.store)

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
        """Stop after the running batch (the cursor keeps what was committed, the saved new
        index what it holds)."""
        self._stop.set()
        self.wait(60)

    def cancel(self) -> None:
        """Stop, and drop the new vectors and the partial new index: the old model stays."""
        self.stop()

        self.stores.writer.call(lambda: reembedding.drop(self.stores.store))
        shutil.rmtree(self.stores.config.data_dir / NEXT_DENSE, ignore_errors=True)
        self.state = "cancelled"
        log.info("reembed to %s cancelled; the knowledge base keeps its model",
                 self.embedder.name)

    # -- the work ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            started = time.perf_counter()
            dense = self._open_next()
            self.timings["resume_index_s"] = round(time.perf_counter() - started, 2)
            saved = time.monotonic()
            while not self._stop.is_set():
                if not self._batch(dense):
                    break
                if time.monotonic() - saved >= SAVE_EVERY_S:
                    self._save_next(dense)
                    saved = time.monotonic()
            if self._stop.is_set():
                self._save_next(dense)  # a resume goes on from here
                return
            self.state = "switching"
            started = time.perf_counter()
            self.stores.writer.call(lambda: self._switch(dense))
            self.timings["switch_s"] = round(time.perf_counter() - started, 2)
            self.state = "done"
            log.info("reembed to %s: %s", self.embedder.name, self.timings)
        except Exception as exc:  # noqa: BLE001 - recorded for status; the old model serves
            log.exception("reembed to %s failed", self.embedder.name)
            self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"

    def _cursor(self) -> int:
        return int(self.stores.store.meta().get("reembed_cursor", "0"))

    def _batch(self, dense: DenseIndex) -> bool:
        """Embed and store the next batch and add it to the new index; False when the cursor
        is past the last chunk."""
        ids, texts = reembedding.texts_after(self.stores.store, self._cursor(), BATCH)
        if not len(ids):
            return False
        started = time.perf_counter()
        vectors = self.embedder.embed(texts)
        stored = time.perf_counter()
        self.stores.writer.call(lambda: reembedding.store_batch(
            self.stores.store, ids, vectors, self.embedder.dim))
        added = time.perf_counter()
        self._add(dense, ids, vectors)
        for key, seconds in (("embed_s", stored - started), ("store_s", added - stored),
                             ("add_s", time.perf_counter() - added)):
            self.timings[key] = round(self.timings.get(key, 0.0) + seconds, 2)
        return True

    # -- the new index, built as the vectors come and saved as it grows ----------------------

    def _open_next(self) -> DenseIndex:
        """The new model's hnswlib index beside the serving one: the part a stopped process
        saved (the chunks up to the cursor it records), brought up to the vectors stored since;
        a new one when none was saved for this database."""
        store = self.stores.store
        folder = self.stores.config.data_dir / NEXT_DENSE
        dense = DenseIndex(folder, self.embedder.dim)
        if dense.generation < 0 or dense.identity != store.identity:
            shutil.rmtree(folder, ignore_errors=True)
            dense = DenseIndex(folder, self.embedder.dim)
        dense.identity = store.identity
        for ids, vectors in reembedding.stored_after(store, max(dense.generation, 0)):
            self._add(dense, ids, vectors)
        return dense

    def _add(self, dense: DenseIndex, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors to the new index (not serving yet: nothing searches it)."""
        dense.add_before_serving(ids, vectors)
        dense.memory_generation = int(ids[-1])
        self.added += len(ids)

    def _save_next(self, dense: DenseIndex) -> None:
        """Save the new index with the last chunk id it holds as its generation."""
        if dense.memory_generation >= 0:
            dense.save(dense.memory_generation)

    # -- the switch --------------------------------------------------------------------------

    def _switch(self, dense: DenseIndex) -> None:
        """On the writer: embed what came after the cursor, then in one transaction rename the
        new vector column into place, keep the abstracts, clear the tree and name the new
        model; the new index follows the chunks inside it. Questions wait only for the commit
        and the swap of the index and the embedders."""
        stores, store = self.stores, self.stores.store
        ids, texts = reembedding.texts_after(store, self._cursor(), None)
        late = self.embedder.embed(texts) if texts else None
        dim = self.embedder.dim
        generation = store.generation + 1
        started = time.perf_counter()
        with contextlib.ExitStack() as questions_out:
            with store.transaction() as db:
                if late is not None:
                    reembedding.insert(db, ids, late, dim)
                missing = reembedding.missing(db)
                if missing:
                    raise ReembedError(f"{missing} chunks have no new vector; the reembed "
                                       "goes on")
                self.kept = kept.save(db, stores.tree_index.live)
                reembedding.swap_columns(db, dim)
                reembedding.name_model(db, self.embedder.name, dim, generation)
                store.create_indexes()
                self._follow(dense, generation)
                self.timings["transaction_s"] = round(time.perf_counter() - started, 3)
                waited = time.perf_counter()
                questions_out.enter_context(stores.model_lock.exclusive())  # then the commit
                held = time.perf_counter()
            # committed: the new model is the knowledge base's; swap the index and embedders
            store.dim = stores.dim = dim
            old = stores.dense
            dense.move(old.folder)
            stores.dense = dense
            stores.load_tree()  # none is stored: an empty one, "missing" until rebuilt
            self.on_switch(self.embedder, dense)
        self.timings |= {"late": len(ids), "lock_wait_s": round(held - waited, 3),
                         "exclusive_s": round(time.perf_counter() - held, 3)}
        self._after_switch(dense, generation)

    def _after_switch(self, dense: DenseIndex, generation: int) -> None:
        """Once the switch committed: save the new index, bring BM25 to the generation and
        rebuild the tree in the background (a derived index that fails is marked stale)."""
        stores = self.stores
        started = time.perf_counter()
        try:
            dense.save(generation)
        except Exception as exc:  # noqa: BLE001 - DuckDB has the new vectors: rebuilt from it
            stores.mark_stale("dense", exc)
        shutil.rmtree(stores.config.data_dir / NEXT_DENSE, ignore_errors=True)
        try:  # BM25 holds the same texts: only its generation follows
            stores.sparse.apply(generation, [], [])
        except Exception as exc:  # noqa: BLE001 - DuckDB has the texts: rebuilt from it
            stores.mark_stale("bm25", exc)
        stores.start_tree_rebuild()
        self.timings["after_s"] = round(time.perf_counter() - started, 3)
        log.info("reembed done: %s serves queries now (dimension %d)", self.embedder.name,
                 self.embedder.dim)

    def _follow(self, dense: DenseIndex, generation: int) -> None:
        """Bring the new index to the chunks as the switch's transaction has them: add those
        it lacks (the late ones), delete those removed since they were added."""
        store = self.stores.store
        held = np.asarray(dense.index.get_ids_list(), np.int64)
        now = store.chunk_ids()
        more = np.setdiff1d(now, held)
        dense.memory_generation = generation - 1
        dense.apply(generation, more, store.vectors(more), np.setdiff1d(held, now),
                    save=False)
        dense.recount(len(now))


def model_name(name_or_path: str) -> str:
    """A model as `[embedding] model` names it: an existing folder as an absolute path."""
    path = Path(name_or_path).expanduser()
    return str(path.absolute()) if path.exists() else name_or_path

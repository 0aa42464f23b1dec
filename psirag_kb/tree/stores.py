"""The stores of one data directory and the thread that alone writes them.

DuckDB is the source of truth; Tantivy, hnswlib and the live tree are derived from it. Every
change runs on the writer thread (`writer.py`): DuckDB commits first, then the derived indexes
follow the commit, and the tree's view for readers is swapped in. An index that cannot follow is
marked stale and rebuilt from DuckDB in the background.
"""

from __future__ import annotations

import logging
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from psirag_kb.backoff import Backoff
from psirag_kb.config import Config
from psirag_kb.errors import KBError, StoreError
from psirag_kb.people import People
from psirag_kb.storage import migrations
from psirag_kb.storage.backup import check_not_restoring
from psirag_kb.storage.dense import DenseIndex, SharedLock, exact_scope
from psirag_kb.storage.partitions import Partitions
from psirag_kb.storage.records import Delta, FileChange
from psirag_kb.storage.scope import Scope, exact_top
from psirag_kb.storage.sparse import SparseIndex
from psirag_kb.storage.store import Store
from psirag_kb.storage.writer import Writer, WriterClosed
from psirag_kb.tree import kept, rows
from psirag_kb.tree.bulk import FirstIngest
from psirag_kb.tree.index import TreeIndex
from psirag_kb.tree.live import LiveTree
from psirag_kb.tree.partition import MIXED
from psirag_kb.tree.view import TreeView

log = logging.getLogger(__name__)

REPAIR_BACKOFF_S = (2.0, 600.0)
"""First and longest wait between attempts to rebuild a stale derived index."""
TREE_REBUILD_BACKOFF_S = (2.0, 120.0)
"""First and longest wait between attempts of a background tree rebuild."""
TREE_REBUILD_ATTEMPTS = 8
"""Background attempts before the tree is left missing for `maintain` or the next start."""


class OverStores:
    """The stores of `self.stores` by name, for the facade and the query engine alike."""

    stores: Stores

    @property
    def store(self) -> Store:
        """The DuckDB store (reads from any thread; writes only on the writer)."""
        return self.stores.store

    @property
    def sparse(self) -> SparseIndex:
        """The BM25 index."""
        return self.stores.sparse

    @property
    def dense(self) -> DenseIndex:
        """The hnswlib index."""
        return self.stores.dense

    @property
    def tree_index(self) -> TreeIndex:
        """The tree: its live form (writer only), its published view and its searches."""
        return self.stores.tree_index

    @property
    def writer(self) -> Writer:
        """The one thread that writes the stores."""
        return self.stores.writer

    @property
    def stale(self) -> dict[str, dict[str, Any]]:
        """Derived indexes waiting for a rebuild."""
        return self.stores.stale


class Stores(FirstIngest):
    """DuckDB, BM25, hnswlib and the live tree of a data directory, written by one thread."""

    def __init__(self, config: Config, model: str, dim: Any) -> None:
        """Open (or create) the stores; `dim()` is asked only for a new database."""
        self.config = config
        check_not_restoring(config.data_dir)
        self.store = Store(config.data_dir / "kb.duckdb", model, dim)
        self.dim = self.store.dim
        self.sparse = SparseIndex(config.data_dir / "bm25")
        self.dense = DenseIndex(config.data_dir / "dense", self.dim)
        self.stale: dict[str, dict[str, Any]] = {}
        """Derived indexes ("bm25", "dense") that missed a change and wait for a rebuild."""
        self.tree_seconds = 0.0
        self.defer_tree = False
        self.tree_state: dict[str, Any] = {"state": "ok"}
        self.last_build: dict[str, Any] | None = None
        """Leaves, seconds and pair mode of the last whole-tree build in this process."""
        """"ok", or "missing"/"rebuilding" with the reason: queries use the flat retrievers."""
        self.tree_index: TreeIndex
        self._closing = threading.Event()
        """Set by `close`: a background tree rebuild stops retrying."""
        self.files_written = 0
        self.chunks_written = 0
        """Files whose change this process committed, and the chunks they added (/metrics)."""
        self.embed_texts: Callable[[list[str]], np.ndarray] | None = None
        """The current model's embedding of texts (set by the knowledge base): abstracts a
        reembed kept are embedded again with it when they guide the tree search."""
        self.kept_given = 0
        """Nodes of the last tree built that took an abstract a reembed kept."""
        self.splitting = False
        """Whether a tree partitioned at new boundaries is being built in the background (the
        current tree serves queries meanwhile)."""
        self.rebuild_migrated()
        self.model_lock = SharedLock()
        """Held shared by each question (embedded and searched with one model), alone by a
        reembed's switch of the model."""
        self._holding = threading.local()
        self.sync_derived()
        self.partitions = Partitions(self.store, config.watch.folders,
                                     People(config.data_dir).grant_paths())
        self.load_tree()
        self.merge_duplicates()
        self.writer = Writer()
        self.writer.before_task = self.repair_derived
        self.store.owner = self.writer.thread
        if self._unpartitioned():
            self.start_split("the stored tree mixes readers across the boundaries")

    def close(self) -> None:
        """Finish the running write, drop queued ones, save what is only in memory, close."""
        self._closing.set()
        self.writer.close()
        self.store.owner = threading.current_thread()
        try:
            self.checkpoint_now()
        except Exception:  # noqa: BLE001 - a failed save is redone from DuckDB at start-up
            log.exception("could not save the dense index; it will be rebuilt at start-up")
        self.sparse.close()
        self.store.close()

    # -- derived indexes --------------------------------------------------------------------

    def _foreign(self, identity: str | None, generation: int) -> bool:
        """Whether a derived index at `generation`, built from the database named `identity`,
        was built from another database than this one (one recreated or restored beside it):
        its chunk ids may name other chunks here. An index saved before identities existed is
        this database's unless the database was just created."""
        if generation > self.store.generation:  # DuckDB commits before the indexes follow
            return True
        if identity is None:
            return self.store.created and generation >= 0
        return identity != self.store.identity

    def sync_derived(self) -> None:
        """Rebuild Tantivy or hnswlib when they were built from another database, or when
        their generation or size differs from DuckDB's."""
        generation, count = self.store.generation, self.store.chunk_count()
        identity = self.store.identity
        if self._foreign(self.sparse.identity, self.sparse.generation):
            log.warning("BM25 index at generation %s, database at %s: rebuilding (it was built "
                        "from another database)", self.sparse.generation, generation)
            self.sparse.rebuild(generation, self.store.all_texts(), identity)
        elif self.sparse.generation != generation or self.sparse.count() != count:
            log.info("BM25 index at generation %s, database at %s: rebuilding (it holds %d "
                     "chunks, the database %d)", self.sparse.generation, generation,
                     self.sparse.count(), count)
            self.sparse.rebuild(generation, self.store.all_texts(), identity)
        elif self.sparse.identity is None:
            self.sparse.adopt(identity)
        foreign = self._foreign(self.dense.identity, self.dense.generation)
        self.dense.identity = identity  # recorded by its next save
        if foreign:
            log.warning("dense index at generation %s, database at %s: rebuilding (it was "
                        "built from another database)", self.dense.generation, generation)
            ids, vectors = self.store.all_vectors()
            self.dense.rebuild(generation, ids, vectors)
        elif self.dense.generation != generation or self.dense.count != count:
            log.info("dense index at generation %s, database at %s: catching up (it holds %d "
                     "chunks, the database %d)", self.dense.generation, generation,
                     self.dense.count, count)
            try:
                added, deleted = self.dense.catch_up(generation, self.store.chunk_ids(),
                                                     self.store.vectors)
                log.info("dense index caught up: %d added, %d deleted", added, deleted)
            except (ValueError, RuntimeError, StoreError) as exc:
                log.info("dense index rebuilt from the database (%s)", exc)
                ids, vectors = self.store.all_vectors()
                self.dense.rebuild(generation, ids, vectors)

    @contextmanager
    def same_model(self) -> Iterator[None]:
        """Keep the embedding model, its vectors and the dense index as they are for a block
        (reentrant on one thread; a reembed's switch waits for it)."""
        if getattr(self._holding, "depth", 0):
            self._holding.depth += 1
            try:
                yield
            finally:
                self._holding.depth -= 1
            return
        with self.model_lock.shared():
            self._holding.depth = 1
            try:
                yield
            finally:
                self._holding.depth = 0

    def rebuild_migrated(self) -> None:
        """Rebuild from DuckDB the derived indexes a schema migration of this opening asks for
        (`migrations.migration(rebuild=...)`); the others are kept as they are."""
        generation, identity = self.store.generation, self.store.identity
        if "bm25" in self.store.rebuild:
            log.info("rebuilding the BM25 index: the schema migration asks for it")
            migrations.report("rebuilding the BM25 index from the database after the schema "
                              "upgrade")
            self.sparse.rebuild(generation, self.store.all_texts(), identity)
        if "dense" in self.store.rebuild:
            log.info("rebuilding the dense index: the schema migration asks for it")
            migrations.report("rebuilding the dense index from the database after the schema "
                              "upgrade")
            self.dense.identity = identity
            self.dense.rebuild(generation, *self.store.all_vectors())
        if self.store.rebuild - {"tree"}:
            self.store.set_meta_value(migrations.REBUILD_KEY, "")
        self.store.rebuild = set()

    def merge_duplicates(self) -> None:
        """Merge the file rows an older database holds twice for one path (`Store.
        merge_duplicates`); their chunks leave the tree and the derived indexes as any removed
        chunks do."""
        with self.tree_edit():
            delta = self.store.merge_duplicates(rows.writing(self.store, self.update_tree))
        if delta is not None:
            self.update_derived(delta)

    def update_derived(self, delta: Delta) -> None:
        """Apply a committed change to Tantivy and hnswlib; one that fails is marked stale."""
        if "bm25" not in self.stale:
            try:
                added = zip(delta.added_ids.tolist(), delta.added_texts, delta.added_paths,
                            strict=True)
                self.sparse.apply(
                    delta.generation, [*added, *delta.moved],
                    [*delta.removed_ids.tolist(), *(i for i, _, _ in delta.moved)],
                )
            except Exception as exc:  # noqa: BLE001 - DuckDB has the change: rebuild from it
                self.mark_stale("bm25", exc)
        if "dense" not in self.stale:
            try:
                self.dense.apply(delta.generation, delta.added_ids, delta.added_vectors,
                                 delta.removed_ids, save=False)
                if self.dense.worn and self.store.generation == delta.generation:
                    log.info("dense index: %d deleted vectors beside %d live ones, rebuilding",
                             self.dense.deleted, self.dense.count)
                    ids, vectors = self.store.all_vectors()
                    self.dense.rebuild(delta.generation, ids, vectors, save=False)
            except Exception as exc:  # noqa: BLE001 - DuckDB has the change: rebuild from it
                self.mark_stale("dense", exc)

    def mark_stale(self, name: str, exc: BaseException) -> None:
        """A derived index missed a change: stop using it and rebuild it in the background."""
        log.error("the %s index could not apply a change (%s): it is stale and will be rebuilt "
                  "from the database", name, exc)
        if name == "bm25":
            self.sparse.mark_stale()
        else:
            self.dense.memory_generation = -1
        entry = self.stale.setdefault(name, {"since": time.time(), "attempts": 0,
                                             "retry_at": 0.0})
        entry["reason"] = f"{type(exc).__name__}: {exc}"
        self._schedule_repair(0.0)

    def _schedule_repair(self, delay: float) -> None:
        """Queue a rebuild of the stale indexes on the writer, now or after `delay` seconds."""
        def submit() -> None:
            try:
                self.writer.submit(self.repair_derived, key="repair-derived")
            except KBError:  # closing: start-up rebuilds it
                pass

        if delay <= 0:
            submit()
            return
        timer = threading.Timer(delay, submit)
        timer.daemon = True
        timer.start()

    def repair_derived(self) -> None:
        """Rebuild stale derived indexes from DuckDB (on the writer thread, with backoff)."""
        for name in list(self.stale):
            entry = self.stale[name]
            if time.time() < entry["retry_at"]:
                continue
            generation = self.store.generation
            try:
                if name == "bm25":
                    self.sparse.rebuild(generation, self.store.all_texts())
                else:
                    ids, vectors = self.store.all_vectors()
                    self.dense.rebuild(generation, ids, vectors)
            except Exception as exc:  # noqa: BLE001 - retried later; queries go on without it
                entry["attempts"] += 1
                wait = Backoff(*REPAIR_BACKOFF_S).delay(entry["attempts"])
                entry["retry_at"] = time.time() + wait
                entry["reason"] = f"rebuild failed: {type(exc).__name__}: {exc}"
                log.warning("rebuilding the %s index failed (%s); next try in %.0f s",
                            name, exc, wait)
                if name == "bm25":
                    self.sparse.mark_stale()
                self._schedule_repair(wait)
                continue
            log.info("the %s index was rebuilt from the database", name)
            del self.stale[name]

    def index_status(self) -> dict[str, Any]:
        """Each derived index: "ok", or "stale" with the reason and since when."""
        out: dict[str, Any] = {}
        for name in ("bm25", "dense"):
            entry = self.stale.get(name)
            out[name] = {"state": "ok"} if entry is None else {
                "state": "stale", "reason": entry.get("reason", ""), "since": entry["since"]}
        return out

    # -- the tree ---------------------------------------------------------------------------

    def leaf_vectors(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of chunks, from the dense index (or DuckDB when it lacks them)."""
        if "dense" not in self.stale:
            try:
                return self.dense.get(ids)
            except RuntimeError:  # not (yet) there: DuckDB has every committed chunk
                pass
        return self.store.vectors(ids)

    def neighbours(self, query: np.ndarray, k: int,
                   scope: Scope | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Leaves most similar to a query from the dense index (none while it is stale); with a
        scope, only among its chunks."""
        if scope is not None:
            return self.neighbours_within(query, k, scope)
        if "dense" in self.stale:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        return self.dense.search(query, k)

    def neighbours_within(self, query: np.ndarray, k: int,
                          scope: Scope) -> tuple[np.ndarray, np.ndarray]:
        """Leaves most similar to a query among a scope's chunks: exact over the vectors of a
        small scope (read once from DuckDB), hnswlib's filtered search over a large one."""
        if len(scope) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if exact_scope(len(scope), self.dense.count):
            if scope.vectors is None:
                scope.vectors = self.store.present_vectors(scope.ids)
            return exact_top(*scope.vectors, query, k)
        if "dense" in self.stale:  # as unscoped: no neighbours until it is rebuilt
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        return self.dense.search(query, k, scope.members)

    def tree_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) for a whole-tree build: float16 above the exact pair mode's limit,
        where a million vectors would otherwise take 1.5 GB beside the dense index."""
        small = self.store.chunk_count() <= self.config.tree.exact_max_leaves
        return self.store.all_vectors(np.float32 if small else np.float16)

    def _index(self, live: LiveTree) -> TreeIndex:
        """A tree index over a live tree, wired to the dense index and partitioned at the
        boundaries (a loaded tree keeps its join layer; one without keeps its depth)."""
        live.label_of = self.partitions.label_of
        if live.root is not None:
            join = self.store.meta().get("partition_join")
            live.partition(int(join) if join else max(1, live.depth), live.label_of)
        return TreeIndex(live, self.config.tree, self.neighbours)

    # -- partitions -------------------------------------------------------------------------

    def _unpartitioned(self) -> bool:
        """Whether the tree has a node on or below its join layer whose leaves different
        people may read (labels changed since it was built); never an interim tree, which the
        build at the first ingest's end replaces, partitioned at the boundaries of then."""
        live = self.tree_index.live
        if self.tree_missing or self.defer_tree or live.root is None or live.join is None:
            return False
        return any(label == MIXED for label in live.parts.values())

    def set_boundaries(self, grants: Iterable[str] | None = None,
                       roots: Iterable[Path | str] | None = None) -> bool:
        """Partition the tree at these grant paths and watched roots (None keeps the current
        ones; on the writer); True when the tree must be split, which then happens in the
        background."""
        self.partitions.set(grants, roots)
        live = self.tree_index.live
        if live.root is not None and live.join is not None:
            live.partition(live.join, self.partitions.label_of)
        if not self._unpartitioned():
            return False
        self.start_split("new boundaries")
        return True

    def start_split(self, reason: str) -> None:
        """Rebuild the tree partitioned at the current boundaries in a background thread; the
        current tree serves queries and takes writes until the new one is swapped in."""
        if self.splitting or self.tree_state["state"] != "ok":
            return
        log.info("splitting the tree at the boundaries in the background (%s)", reason)
        self.splitting = True
        thread = threading.Thread(target=self._rebuild_tree, name="psirag-tree-split",
                                  daemon=True)
        thread.start()


    def load_tree(self) -> None:
        """Load the stored tree; one that is missing or does not fit the chunks is left to a
        rebuild (`start_tree_rebuild`, or the next bulk ingest) while queries use the flat
        retrievers."""
        started = time.perf_counter()
        live, problems = rows.load_tree(self.store, self.config.tree.max_children,
                                         self.leaf_vectors)
        if live is not None:
            self.tree_index = self._index(live)
            self.tree_state = {"state": "ok"}
            log.info("loaded the tree in %.2f s", time.perf_counter() - started)
            return
        next_id = int(self.store.meta().get("next_node_id", "1"))
        empty = LiveTree(self.config.tree.max_children, self.dim, next_id, self.leaf_vectors)
        self.tree_index = self._index(empty)
        if self.store.chunk_count() == 0:
            self.tree_state = {"state": "ok"}
            return
        reason = "; ".join(problems) if problems else "no tree is stored for the chunks"
        log.warning("the stored tree cannot be used (%s): queries use the flat retrievers "
                    "until it is rebuilt", reason)
        self.tree_state = {"state": "missing", "reason": reason, "since": time.time()}

    @property
    def tree_missing(self) -> bool:
        """Whether chunks exist that the tree does not hold until a rebuild."""
        return self.tree_state["state"] != "ok"

    def start_tree_rebuild(self) -> None:
        """Rebuild a missing tree in a background thread; writes go on meanwhile and are
        caught up with when the new tree is swapped in."""
        if self.tree_state["state"] != "missing":
            return
        thread = threading.Thread(target=self._rebuild_tree, name="psirag-tree-rebuild",
                                  daemon=True)
        self.tree_state = self.tree_state | {"state": "rebuilding"}
        thread.start()

    def _rebuild_tree(self) -> None:
        """Build from a snapshot of the chunks, then adopt the tree on the writer; a failed
        attempt (a chunk deleted while the vectors were read, ...) is logged and retried with
        backoff until it succeeds, the attempts run out or the stores close."""
        backoff = Backoff(*TREE_REBUILD_BACKOFF_S)
        for attempt in range(1, TREE_REBUILD_ATTEMPTS + 1):
            if self._closing.is_set():
                return
            try:
                self._build_and_adopt()
                return
            except WriterClosed:  # closing: the next start tries again
                return
            except Exception as exc:  # noqa: BLE001 - logged, retried; queries use flat retrievers
                if self._closing.is_set():
                    return
                reason = f"rebuild failed: {type(exc).__name__}: {exc}"
                if self.splitting:  # the current tree goes on serving: retry, else give up
                    log.warning("splitting the tree failed (attempt %d: %s)", attempt, exc)
                    if attempt == TREE_REBUILD_ATTEMPTS or self._closing.wait(
                            backoff.delay(attempt)):
                        self.splitting = False
                        return
                    continue
                if attempt == TREE_REBUILD_ATTEMPTS:
                    log.error("rebuilding the tree failed %d times (%s); queries use BM25 and "
                              "the dense index until `maintain` or the next start rebuilds it",
                              attempt, exc)
                    self.tree_state = {"state": "missing", "since": time.time(),
                                       "reason": f"{reason} ({attempt} attempts)"}
                    return
                wait = backoff.delay(attempt)
                log.warning("rebuilding the tree failed (attempt %d of %d: %s); next try in "
                            "%.0f s", attempt, TREE_REBUILD_ATTEMPTS, exc, wait, exc_info=True)
                self.tree_state = self.tree_state | {
                    "state": "rebuilding", "reason": f"{reason}; retrying in {wait:.0f} s"}
                if self._closing.wait(wait):
                    return

    def _build_and_adopt(self) -> None:
        """One attempt of a background rebuild: snapshot, build, find the abstracts a reembed
        kept for its nodes (embedded here when they guide the search), adopt on the writer."""
        ids, vectors = self.tree_vectors()
        next_id = int(self.store.meta().get("next_node_id", "1"))
        index = TreeIndex.build(ids, vectors, self.config.tree, next_id, self.leaf_vectors,
                                self.neighbours, self.partitions.label_of)
        del vectors
        found = kept.matching(index.live, kept.load(self.store.reader()))
        embedded = self._embed_kept(found)
        self.writer.call(lambda: self._adopt_tree(index, ids, found, embedded),
                         key="tree-rebuild")

    def _embed_kept(self, found: dict[int, tuple[str, str | None]]) -> dict[str, Any]:
        """The current model's vector of each kept abstract's text when abstracts guide the
        tree search ({} otherwise: the nodes' centroids guide it)."""
        if not found or self.config.tree.node_vectors != "abstract" or self.embed_texts is None:
            return {}
        texts = sorted({text for text, _ in found.values()})
        return dict(zip(texts, self.embed_texts(texts), strict=True))

    def _adopt_tree(self, index: TreeIndex, ids: np.ndarray,
                    found: dict[int, tuple[str, str | None]] | None = None,
                    embedded: dict[str, Any] | None = None) -> None:
        """Swap in a tree built in the background after catching it up with the chunks; the
        nodes covering the leaves of an abstract a reembed kept take it first (the chunks
        changed since mark theirs dirty again)."""
        if not (self.tree_missing or self.splitting):
            return
        current = self.store.chunk_ids()
        removed = np.setdiff1d(ids, current)
        added = np.setdiff1d(current, ids)
        self.tree_index = index
        given = kept.give(index.live, found or {}, embedded)
        index.update(added, self.store.vectors(added), removed, self.nearest)
        rows.save_tree(self.store, index.live)
        if given:
            log.info("%d nodes of the new tree kept the abstract written for the same chunks "
                     "before the reembed", given)
        self.kept_given = given
        index.view = TreeView.full(index.live)
        self.tree_seconds += index.build_s
        self.tree_state = {"state": "ok"}
        self.splitting = False
        assert index.live.join is not None  # built partitioned (label_of given): join is set
        index.live.partition(index.live.join, self.partitions.label_of)  # boundaries may have
        if self._unpartitioned():  # changed again while it was built
            self.start_split("boundaries changed during the split")
        log.info("rebuilt the tree over %d leaves in %.1f s (%s pairs); %d added and %d "
                 "removed meanwhile", len(current), index.build_s, index.build_mode,
                 len(added), len(removed))

    def build_tree(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Build the whole tree over the given chunks at once and store it."""
        next_id = int(self.store.meta().get("next_node_id", "1"))
        if len(ids) == 0:
            self.tree_index = self._index(
                LiveTree(self.config.tree.max_children, self.dim, next_id, self.leaf_vectors))
        else:
            with self.store.lean():  # the build needs the memory more than DuckDB's cache
                self.tree_index = TreeIndex.build(ids, vectors, self.config.tree, next_id,
                                                  self.leaf_vectors, self.neighbours,
                                                  self.partitions.label_of)
            self.tree_seconds += self.tree_index.build_s
            log.info("built tree over %d leaves in %.2f s (%s pairs)", len(ids),
                     self.tree_index.build_s, self.tree_index.build_mode)
        found = kept.matching(self.tree_index.live, kept.load(self.store.db))
        self.kept_given = kept.give(self.tree_index.live, found, self._embed_kept(found))
        rows.save_tree(self.store, self.tree_index.live)
        self.tree_state = {"state": "ok"}
        self.splitting = False
        self.last_build = {"leaves": int(len(ids)), "seconds": round(self.tree_index.build_s, 2),
                           "mode": self.tree_index.build_mode or None}

    @contextmanager
    def tree_edit(self) -> Iterator[None]:
        """Tree edits that are committed with the enclosed transaction or dropped with it."""
        try:
            yield
        except BaseException:
            self.load_tree()  # the transaction rolled back: back to the tree DuckDB holds
            raise
        live = self.tree_index.live
        touched, dropped = live.changes()
        if touched or dropped:
            live.clear_changes()
            self.tree_index.publish(touched, dropped)

    def nearest(self, vectors: np.ndarray,
                parts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Most similar existing leaf (chunk id, cosine) per vector, from the dense index; with
        partition labels per vector, only leaves of the same partition count."""
        live = self.tree_index.live
        labels, scores = self.dense.search_many(vectors, 8)
        found: Any = None if parts is None else self.partitions.label_of(labels.ravel()).reshape(
            labels.shape).tolist()
        best = np.full(len(vectors), -1, dtype=np.int64)
        similarity = np.full(len(vectors), -1.0, dtype=np.float32)
        for row in range(len(vectors)):
            for at, (label, score) in enumerate(zip(labels[row].tolist(), scores[row].tolist(),
                                                    strict=True)):
                # found is None exactly when parts is
                if live.has_leaf(label) and (parts is None or found[row][at] == parts[row]):
                    best[row], similarity[row] = label, score
                    break
        return best, similarity

    def update_tree(self, added: np.ndarray, vectors: np.ndarray, removed: np.ndarray):
        """Incremental tree update run inside the DuckDB transaction of a change."""
        if self.defer_tree or self.tree_missing:
            return None
        started = time.perf_counter()
        self.tree_index.update(added, vectors, removed, self.nearest)
        self.tree_seconds += time.perf_counter() - started
        return self.tree_index.live

    # -- writes -----------------------------------------------------------------------------

    def apply(self, changes: list[FileChange], removals: Iterable[str] = ()) -> Delta:
        """Commit chunks and tree to DuckDB, then bring the derived indexes to the generation."""
        with self.tree_edit():
            delta = self.store.apply(changes, removals, rows.writing(self.store, self.update_tree))
        self.files_written += len(changes)
        self.chunks_written += len(delta.added_ids)
        self.update_derived(delta)
        return delta

    def rename(self, old: str, new: str, name_header: str | None = None) -> bool:
        """A file moved: DuckDB gives it the new path and BM25 moves its chunks to their new
        scope (False when `old` is unknown or `new` is taken); see `Store.rename` for
        `name_header`."""
        delta = self.store.rename(old, new, name_header)
        if delta is None:
            return False
        self.update_derived(delta)
        ids = np.asarray([i for i, _, _ in delta.moved], np.int64)
        if self.partitions.moved(ids, new) and self.tree_index.live.join is not None:
            self.tree_index.live.partition(self.tree_index.live.join, self.partitions.label_of)
            if self._unpartitioned():
                self.start_split(f"{old} moved to another partition")
        return True

    def checkpoint_now(self) -> None:
        """Persist the hnswlib index and checkpoint DuckDB (on the writer thread)."""
        generation = self.store.generation
        if self.dense.generation != generation and self.dense.memory_generation == generation:
            self.dense.save(generation)
        try:
            self.store.db.execute("CHECKPOINT")
        except duckdb.TransactionException as exc:  # a reader's transaction is open: next time
            log.info("DuckDB checkpoint put off: %s", exc)

    def sizes(self) -> dict[str, int]:
        """Bytes on disk of each store."""
        return {
            "duckdb_bytes": _size(self.store.path)
            + _size(self.store.path.with_name(self.store.path.name + ".wal")),
            "bm25_bytes": _size(self.sparse.folder),
            "dense_bytes": _size(self.dense.folder),
        }


def _size(path: Path) -> int:
    """Bytes used by a file or folder (a file the indexes drop while it is counted counts 0)."""
    if not path.is_dir():
        return _file_size(path)
    return sum(_file_size(p) for p in path.rglob("*"))


def _file_size(path: Path) -> int:
    """Bytes of a file; 0 for a folder or a file gone (Tantivy replaces its own as it merges)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0

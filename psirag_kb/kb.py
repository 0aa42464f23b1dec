"""The KnowledgeBase facade: stores, tree, query and status (ingest comes from ingestion.py).

Writes run on one writer thread (`writer.py`), in order; queries run on any thread against what
the last commit published (DuckDB cursors, Tantivy's searcher, hnswlib, the tree's view) and take
no lock a write holds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .abstraction import AbstractJob
from .config import Config
from .dense import DenseIndex
from .embedding import Embedder, QueryEmbedder, for_queries, make_embedder
from .errors import KBError
from .ingestion import Ingestion
from .rerank import Reranker
from .retrieval import EVAL_MODES, MODES, Ranking, rrf
from .sparse import SparseIndex
from .store import Delta, FileChange, Store
from .tree.drift import repair
from .tree.live import LiveTree
from .treeindex import TreeIndex
from .treeview import node_view, path_view
from .writer import Writer

log = logging.getLogger(__name__)


DRIFT_TOLERANCE = 0.02
"""A subtree is rebuilt when its cost exceeds a local rebuild's by more than this fraction."""
DRIFT_MAX_LEAVES = 4000
"""Largest subtree rebuilt in one piece."""
SUMMARY_LEAVES = 18
REPAIR_BACKOFF_S = (2.0, 600.0)
"""First and longest wait between attempts to rebuild a stale derived index."""


class KnowledgeBase(Ingestion):
    """One knowledge base in a data directory; the only object the CLI, API and TUI use."""

    def __init__(self, config: Config, embedder: Embedder | None = None) -> None:
        self.config = config
        self.data_dir = config.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder or make_embedder(config.embedding)
        # questions get a model instance of their own, so they never wait for a file's batch
        self.query_embedder = QueryEmbedder(for_queries(self.embedder))
        self.store = Store(
            self.data_dir / "kb.duckdb", self.embedder.name, lambda: self.embedder.dim
        )
        self.dim = self.store.dim
        self.sparse = SparseIndex(self.data_dir / "bm25")
        self.dense = DenseIndex(self.data_dir / "dense", self.dim)
        self.stale: dict[str, dict[str, Any]] = {}
        """Derived indexes ("bm25", "dense") that missed a change and wait for a rebuild."""
        self.embed_seconds = 0.0
        self.tree_seconds = 0.0
        self._defer_tree = False
        self.tree_index: TreeIndex
        self.abstract_job = AbstractJob(self)
        reranker = config.retrieval.reranker
        self.reranker = Reranker(reranker, config.embedding.device) if reranker else None
        self._sync_derived()
        self._load_tree()
        self.writer = Writer()
        self.writer.before_task = self._repair_derived
        self.store.owner = self.writer.thread

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Finish the running write, drop queued ones, save what is only in memory, close."""
        self.writer.close()
        self.store.owner = threading.current_thread()
        try:
            self._checkpoint()
        except Exception:  # noqa: BLE001 - a failed save is redone from DuckDB at start-up
            log.exception("could not save the dense index; it will be rebuilt at start-up")
        self.sparse.close()
        self.store.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sync_derived(self) -> None:
        """Rebuild Tantivy or hnswlib when their generation or size differs from DuckDB's."""
        generation, count = self.store.generation, self.store.chunk_count()
        if self.sparse.generation != generation or self.sparse.count() != count:
            log.info("BM25 index at generation %s, database at %s: rebuilding (it holds %d "
                     "chunks, the database %d)", self.sparse.generation, generation,
                     self.sparse.count(), count)
            self.sparse.rebuild(generation, self.store.all_texts())
        if self.dense.generation != generation or self.dense.count != count:
            log.info("dense index at generation %s, database at %s: rebuilding (it holds %d "
                     "chunks, the database %d)", self.dense.generation, generation,
                     self.dense.count, count)
            ids, vectors = self.store.all_vectors()
            self.dense.rebuild(generation, ids, vectors)

    def _mark_stale(self, name: str, exc: BaseException) -> None:
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
                self.writer.submit(self._repair_derived, key="repair-derived")
            except KBError:  # closing: start-up rebuilds it
                pass

        if delay <= 0:
            submit()
            return
        timer = threading.Timer(delay, submit)
        timer.daemon = True
        timer.start()

    def _repair_derived(self) -> None:
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
                first, longest = REPAIR_BACKOFF_S
                wait = min(longest, first * 2 ** entry["attempts"])
                entry["attempts"] += 1
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

    def _load_tree(self) -> None:
        """Load the stored tree, or rebuild it when it does not match the chunks."""
        ids, vectors = self.store.all_vectors()
        by_id = dict(zip(ids.tolist(), vectors, strict=True))
        live = self.store.load_tree(self.config.tree.max_children, by_id)
        if live is not None:
            index = TreeIndex(live, self.config.tree)
            if np.array_equal(index.chunk_ids(), ids) and not index.problems():
                self.tree_index = index
                return
        if len(ids):
            log.warning("stored tree does not match the chunks: rebuilding it")
        self._build_tree(ids, vectors)

    def _build_tree(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Build the whole tree over the given chunks at once and store it."""
        next_id = int(self.store.meta().get("next_node_id", "1"))
        if len(ids) == 0:
            self.tree_index = TreeIndex(
                LiveTree(self.config.tree.max_children, self.dim, next_id), self.config.tree
            )
        else:
            self.tree_index = TreeIndex.build(ids, vectors, self.config.tree, next_id)
            self.tree_seconds += self.tree_index.build_s
            log.info("built tree over %d leaves in %.2f s", len(ids), self.tree_index.build_s)
        self.store.save_tree(self.tree_index.live)

    def rebuild_tree(self) -> None:
        """Rebuild the whole tree from the stored chunks."""
        self.writer.call(lambda: self._build_tree(*self.store.all_vectors()), key="rebuild-tree")

    @contextmanager
    def _tree_edit(self) -> Iterator[None]:
        """Tree edits that are committed with the enclosed transaction or dropped with it."""
        try:
            yield
        except BaseException:
            self._load_tree()  # the transaction rolled back: back to the tree DuckDB holds
            raise
        live = self.tree_index.live
        if live.touched or live.dropped:
            live.clear_changes()
            self.tree_index.publish()

    def _nearest(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Most similar existing leaf (chunk id, cosine) per vector, from the dense index."""
        live = self.tree_index.live.vectors
        labels, scores = self.dense.search_many(vectors, 8)
        best = np.full(len(vectors), -1, dtype=np.int64)
        similarity = np.full(len(vectors), -1.0, dtype=np.float32)
        for row in range(len(vectors)):
            for label, score in zip(labels[row].tolist(), scores[row].tolist(), strict=True):
                if -label in live:
                    best[row], similarity[row] = label, score
                    break
        return best, similarity

    def _update_tree(self, added: np.ndarray, vectors: np.ndarray, removed: np.ndarray):
        """Incremental tree update run inside the DuckDB transaction of a change."""
        if self._defer_tree:
            return None
        started = time.perf_counter()
        self.tree_index.update(added, vectors, removed, self._nearest)
        self.tree_seconds += time.perf_counter() - started
        return self.tree_index.live

    def _apply(self, changes: list[FileChange], removals: Iterable[str] = ()) -> Delta:
        """Commit chunks and tree to DuckDB, then bring the derived indexes to the generation."""
        with self._tree_edit():
            delta = self.store.apply(changes, removals, self._update_tree)
        self._update_derived(delta)
        return delta

    def _update_derived(self, delta: Delta) -> None:
        """Apply a committed change to Tantivy and hnswlib; one that fails is marked stale."""
        if "bm25" not in self.stale:
            try:
                self.sparse.apply(
                    delta.generation,
                    zip(delta.added_ids.tolist(), delta.added_texts, strict=True),
                    delta.removed_ids.tolist(),
                )
            except Exception as exc:  # noqa: BLE001 - DuckDB has the change: rebuild from it
                self._mark_stale("bm25", exc)
        if "dense" not in self.stale:
            try:
                self.dense.apply(delta.generation, delta.added_ids, delta.added_vectors,
                                 delta.removed_ids, save=False)
            except Exception as exc:  # noqa: BLE001 - DuckDB has the change: rebuild from it
                self._mark_stale("dense", exc)

    def checkpoint(self) -> None:
        """Persist the hnswlib index and checkpoint DuckDB (cheap to redo; done on close)."""
        self.writer.call(self._checkpoint, key="checkpoint")

    def _checkpoint(self) -> None:
        generation = self.store.generation
        if self.dense.generation != generation and self.dense.memory_generation == generation:
            self.dense.save(generation)
        self.store.db.execute("CHECKPOINT")

    @contextmanager
    def _bulk(self) -> Iterator[None]:
        """Defer tree updates when the tree is empty, then build it once at the end."""
        if not self.tree_index.empty or self._defer_tree:
            yield
            return
        self._defer_tree = True
        try:
            yield
        finally:
            self._defer_tree = False
            self._build_tree(*self.store.all_vectors())

    # -- query ------------------------------------------------------------------------------

    def embed_query(self, text: str) -> np.ndarray:
        """The query's unit vector (float32)."""
        return self.query_embedder.embed_one(text)

    def rank(self, text: str, mode: str, k: int) -> Ranking:
        """Chunk ids for a query in one mode, best first (a stale index is left out)."""
        if mode not in EVAL_MODES:
            raise KBError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        retrieval = self.config.retrieval
        per = max(k, retrieval.k_per_retriever)
        sparse_ok, dense_ok = "bm25" not in self.stale, "dense" not in self.stale
        if mode == "sparse" and sparse_ok:
            return Ranking(*self.sparse.search(text, k))
        if mode == "agent":  # retrieval of agent mode without an LLM
            from .multiround import multi_round

            return multi_round(self, text, k).ranking
        query = self.embed_query(text)
        if mode in ("dense", "sparse"):  # sparse lands here only while BM25 is rebuilt
            if dense_ok:
                return Ranking(*self.dense.search(query, k))
            return self._tree_search(query, k)
        if mode == "tree":
            return self._tree_search(query, k)
        rankings = []
        if sparse_ok:
            rankings.append(Ranking(*self.sparse.search(text, per)))
        if dense_ok and (mode != "hybrid" or retrieval.fuse_dense):
            rankings.append(Ranking(*self.dense.search(query, per)))
        if mode == "hybrid" or not rankings:
            rankings.insert(0, self._tree_search(query, per))
        if retrieval.fusion == "rerank" and self.reranker is not None:
            candidates = rrf(rankings, retrieval.rrf_k).ids
            hits = self.store.hits(candidates.tolist())
            candidates = np.array([i for i in candidates.tolist() if i in hits], dtype=np.int64)
            return self.reranker.rerank(text, candidates, [hits[i].text for i in candidates], k)
        return rrf(rankings, retrieval.rrf_k, limit=k)

    def _tree_search(self, query: np.ndarray, k: int) -> Ranking:
        """Top-down tree retrieval (empty before anything is indexed)."""
        retrieval = self.config.retrieval
        if retrieval.tree_search == "collapsed":
            return self.tree_index.search_collapsed(
                query, retrieval.parent_weight, k, self.config.tree.node_vectors == "abstract"
            )
        return self.tree_index.search(query, retrieval.tree_k, k)

    def sources(self, ids: np.ndarray) -> list[str]:
        """The source (path or corpus id) of each chunk id, in order."""
        hits = self.store.hits(ids.tolist())
        return [hits[i].source for i in ids.tolist() if i in hits]

    def query(
        self, text: str, mode: str | None = None, k: int | None = None, summarize: bool = False
    ) -> dict[str, Any]:
        """Ranked results as the JSON shape the CLI and API return.

        With `summarize`, 18 leaves (or k) come from the tree alone, in corpus order.
        """
        text = text.strip()
        if not text:
            raise KBError("the query is empty")
        mode = "summarize" if summarize else (mode or self.config.retrieval.default_mode)
        if mode == "agent":
            return self.answer(text, k)
        if summarize:
            ranking = self._tree_search(self.embed_query(text), k or SUMMARY_LEAVES)
        else:
            k = k or self.config.retrieval.k
            ranking = self.rank(text, mode, k)
        hits = self.store.hits(ranking.ids.tolist())
        if summarize:
            position = {i: (hits[i].path, hits[i].ordinal) for i in hits}
            order = sorted(range(len(ranking.ids)),
                           key=lambda j: position.get(int(ranking.ids[j]), ("", 0)))
            ranking = Ranking(ranking.ids[order], ranking.scores[order])
        results = []
        for chunk_id, score in zip(ranking.ids.tolist(), ranking.scores.tolist(), strict=True):
            hit = hits.get(chunk_id)
            if hit is None:
                continue
            lines = [hit.line_first, hit.line_last] if hit.line_first is not None else None
            results.append({
                "rank": len(results) + 1,
                "score": float(score),
                "source": hit.source,
                "lines": lines,
                "text": hit.text,
                "chunk_id": chunk_id,
                "path": hit.path,
            })
        result: dict[str, Any] = {"query": text, "mode": mode, "results": results}
        if self.stale:
            result["degraded"] = sorted(self.stale)
        if summarize:
            from .summary import add_summary

            return add_summary(self, result)
        return result

    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Agent mode: an LLM answer with citations and steps, or multi-round retrieval."""
        from .agent import answer_question

        return answer_question(self, text, k, on_step).as_dict()

    # -- status -----------------------------------------------------------------------------

    def repair_drift(self, tolerance: float = DRIFT_TOLERANCE,
                     max_leaves: int = DRIFT_MAX_LEAVES) -> dict[str, Any]:
        """Rebuild subtrees whose neighbour cost exceeds a local rebuild's by `tolerance`."""
        started = time.perf_counter()

        def run() -> dict[str, Any]:
            live = self.tree_index.live
            with self._tree_edit():
                report = repair(live, self.config.tree.max_children,
                                self.config.tree.pair_mode, tolerance, max_leaves)
                if report["rebuilt"]:
                    with self.store.transaction():
                        self.store.write_tree(live)
            return report

        report = self.writer.call(run, key="repair-drift")
        return report | {"seconds": round(time.perf_counter() - started, 3)}

    def regenerate_abstracts(self, max_nodes: int | None = None) -> dict[str, Any]:
        """Write fresh abstracts for dirty nodes, bottom-up (offline keywords or Ollama)."""
        return self.abstract_job.run(max_nodes)

    def maintain(self) -> dict[str, Any]:
        """Periodic upkeep: repair drifted subtrees, then regenerate dirty abstracts."""
        drift = self.repair_drift()
        abstracts = self.regenerate_abstracts()
        self.checkpoint()
        return {"drift": drift, "abstracts": abstracts}

    def node(self, node_id: int | None = None) -> dict[str, Any]:
        """One abstract node (the root by default): its abstract and its children."""
        return node_view(self.tree_index.view, node_id, self.store.hits)

    def path_of(self, chunk_id: int) -> list[dict[str, Any]]:
        """The abstract nodes above a chunk's leaf, root first: id, layer, abstract, dirty."""
        return path_view(self.tree_index.view, chunk_id)

    def tree_status(self) -> dict[str, Any]:
        """Shape of the tree."""
        return self.tree_index.status()

    def index_status(self) -> dict[str, Any]:
        """Each derived index: "ok", or "stale" with the reason and since when."""
        out: dict[str, Any] = {}
        for name in ("bm25", "dense"):
            entry = self.stale.get(name)
            out[name] = {"state": "ok"} if entry is None else {
                "state": "stale", "reason": entry.get("reason", ""), "since": entry["since"]}
        return out

    def status(self) -> dict[str, Any]:
        """Counts, model and store sizes."""
        counts = self.store.state_counts()
        problems = [
            {"path": r.path, "state": r.state, "reason": r.reason}
            for r in self.store.problems()
        ]
        return {
            "data_dir": str(self.data_dir),
            "tree": self.tree_status(),
            "abstracts": self.abstract_job.status(),
            "files": counts,
            "chunks": self.store.chunk_count(),
            "model": self.embedder.name,
            "dim": self.dim,
            "generation": self.store.generation,
            "indexes": self.index_status(),
            "writer": {"queued": self.writer.queued, "running": _label(self.writer.running)},
            "stores": {
                "duckdb_bytes": _size(self.store.path)
                + _size(self.store.path.with_name(self.store.path.name + ".wal")),
                "bm25_bytes": _size(self.sparse.folder),
                "dense_bytes": _size(self.dense.folder),
            },
            "problems": problems,
        }


def _label(key: Any) -> str | None:
    """A writer task's key as text for status."""
    if key is None or isinstance(key, str):
        return key
    return str(key[0]) if isinstance(key, tuple) and key else str(key)


def _size(path: Path) -> int:
    """Bytes used by a file or folder."""
    if path.is_file():
        return path.stat().st_size
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())

"""The KnowledgeBase facade: ingest, query, tree and status over one data directory.

Writes run on the stores' one writer thread (`stores.py`), in order; queries run on any thread
against what the last commit published (DuckDB cursors, Tantivy's searcher, hnswlib, the tree's
view) and take no lock a write holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from psirag_kb.abstracts.job import AbstractJob
from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.ingest.embedding import (
    Embedder,
    QueryEmbedder,
    for_queries,
    make_embedder,
    yield_cores,
)
from psirag_kb.ingest.ingestion import CLOSE_WAIT_S, Ingestion, IngestReport, Progress
from psirag_kb.search.adjacent import MARGIN, MAX_DEPTH, merge_adjacent
from psirag_kb.search.rerank import Reranker
from psirag_kb.search.retrieval import EVAL_MODES, MODES, Ranking, rrf
from psirag_kb.search.scope import Scope, normalise
from psirag_kb.search.treeindex import CANDIDATES, TreeIndex
from psirag_kb.search.treeview import node_view, path_view
from psirag_kb.storage.dense import DenseIndex
from psirag_kb.storage.sparse import SparseIndex
from psirag_kb.storage.store import Store
from psirag_kb.storage.stores import Stores
from psirag_kb.storage.writer import Writer
from psirag_kb.tree.drift import repair

DRIFT_TOLERANCE = 0.02
"""A subtree is rebuilt when its cost exceeds a local rebuild's by more than this fraction."""
DRIFT_MAX_LEAVES = 4000
"""Largest subtree rebuilt in one piece."""
SUMMARY_LEAVES = 18

Within = Sequence[str | Path] | Scope
"""The folders and files a query is limited to (or the scope they were resolved to)."""


class KnowledgeBase:
    """One knowledge base in a data directory; the only object the CLI, API and TUI use."""

    def __init__(self, config: Config, embedder: Embedder | None = None) -> None:
        self.config = config
        self.data_dir = config.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder or make_embedder(config.embedding, config.storage.cache_dir)
        # questions get a model instance of their own, so they never wait for a file's batch
        self.query_embedder = QueryEmbedder(for_queries(self.embedder))
        # while questions come in, files are embedded on one core and questions get the other
        yield_cores(self.embedder, self.query_embedder.busy)
        self.stores = Stores(config, self.embedder.name, lambda: self.embedder.dim)
        self.dim = self.stores.dim
        self.ingestion = Ingestion(config, self.embedder, self.stores)
        self.abstract_job = AbstractJob(config, self.embedder, self.stores)
        reranker = config.retrieval.reranker
        self.reranker = Reranker(reranker, config.embedding.device) if reranker else None

    # -- the stores, for readers (and tests) ------------------------------------------------

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
        """The tree: its live form (writer only) and its published view."""
        return self.stores.tree_index

    @property
    def writer(self) -> Writer:
        """The one thread that writes the stores."""
        return self.stores.writer

    @property
    def stale(self) -> dict[str, dict[str, Any]]:
        """Derived indexes waiting for a rebuild."""
        return self.stores.stale

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop ingests after their committed batch, finish the running write, drop queued
        ones, save what is only in memory, close."""
        self.ingestion.stop(CLOSE_WAIT_S)
        self.stores.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes (each one a task for the writer thread) -------------------------------------

    def ingest(self, paths: Iterable[Path | str], progress: Progress | None = None,
               keep_vanished: bool = False) -> IngestReport:
        """Index files and folders; unchanged files are skipped, missing ones removed."""
        return self.ingestion.ingest(paths, progress, keep_vanished)

    def ingest_jsonl(self, path: Path | str, progress: Progress | None = None) -> IngestReport:
        """Index a benchmark corpus: one leaf per {"id","title","text"} record."""
        return self.ingestion.ingest_jsonl(path, progress)

    def ingest_corpora(self, corpora: Iterable[Path], batches: int = 1,
                       seed: int = 0) -> dict[str, float]:
        """Index benchmark corpora: at once, or shuffled in sequential incremental batches."""
        return self.ingestion.ingest_corpora(corpora, batches, seed)

    def remove(self, paths: Iterable[Path | str]) -> int:
        """Forget files (and everything below folders); returns how many were removed."""
        return self.ingestion.remove(paths)

    def rename(self, old: Path | str, new: Path | str) -> bool:
        """A file moved: its record and leaves stay, its path changes."""
        return self.ingestion.rename(old, new)

    def is_indexed(self, path: Path | str) -> bool:
        """Whether a file, or anything below a folder, is known to the knowledge base."""
        return self.ingestion.is_indexed(path)

    def ignored(self, path: Path) -> bool:
        """Whether a path (relative to a watched or ingested folder) is never indexed."""
        return self.ingestion.ignored(path)

    def rebuild_tree(self) -> None:
        """Rebuild the whole tree from the stored chunks."""
        stores = self.stores
        self.writer.call(lambda: stores.build_tree(*stores.tree_vectors()),
                         key="rebuild-tree")

    def checkpoint(self) -> None:
        """Persist the hnswlib index and checkpoint DuckDB (cheap to redo; done on close)."""
        self.writer.call(self.stores.checkpoint_now, key="checkpoint")

    # -- query ------------------------------------------------------------------------------

    def embed_query(self, text: str) -> np.ndarray:
        """The query's unit vector (float32)."""
        return self.query_embedder.embed_one(text)

    def scope_of(self, within: Within) -> Scope:
        """The scope of a query limited to these folders and files: their normalised paths and
        the ids of the chunks below them (one DuckDB lookup, made when a retriever first needs
        them; a Scope is returned as it is)."""
        if isinstance(within, Scope):
            return within
        if isinstance(within, (str, Path)):  # one path, not a sequence of characters
            within = [within]
        paths = normalise(within)
        return Scope(paths, lambda: self.store.scope_ids(paths))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of several queries in one batched call."""
        return self.query_embedder.embed_many(texts)

    def rank(self, text: str, mode: str, k: int, within: Within | None = None,
             vector: np.ndarray | None = None) -> Ranking:
        """Chunk ids for a query in one mode, best first (a stale index is left out); with
        `within`, each retriever searches only the chunks of files under those paths."""
        if mode not in EVAL_MODES:
            raise KBError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        scope = None if within is None else self.scope_of(within)
        paths = None if scope is None else scope.paths
        retrieval = self.config.retrieval
        per = max(k, retrieval.k_per_retriever)
        sparse_ok, dense_ok = "bm25" not in self.stale, "dense" not in self.stale
        if mode == "sparse" and sparse_ok:  # BM25 filters by the paths: no id lookup
            return Ranking(*self.sparse.search(text, k, paths))
        if scope is not None and len(scope) == 0:
            return Ranking.empty()
        if mode == "agent":  # retrieval of agent mode without an LLM
            from psirag_kb.search.multiround import multi_round

            return multi_round(self, text, k, within=scope, vector=vector).ranking
        if mode == "auto":
            from psirag_kb.search.multiround import auto_rank

            return auto_rank(self, text, k, scope, vector)
        query = self.embed_query(text) if vector is None else vector
        if mode in ("dense", "sparse"):  # sparse lands here only while BM25 is rebuilt
            if dense_ok:
                return Ranking(*self._near(query, k, scope))
            return self._tree_search(query, k, scope=scope)
        if mode == "tree":
            return self._tree_search(query, k, scope=scope)
        rankings = []
        if sparse_ok:
            rankings.append(Ranking(*self.sparse.search(text, per, paths)))
        near = None  # one ANN search serves the dense ranking and the tree's candidates
        if dense_ok and (mode != "hybrid" or retrieval.fuse_dense):
            near = self._near(query, max(per, CANDIDATES), scope)
            rankings.append(Ranking(near[0][:per], near[1][:per]))
        if mode == "hybrid" or not rankings:
            rankings.insert(0, self._tree_search(query, per, near, scope))
        if retrieval.fusion == "rerank" and self.reranker is not None:
            candidates = rrf(rankings, retrieval.rrf_k).ids
            hits = self.store.hits(candidates.tolist())
            candidates = np.array([i for i in candidates.tolist() if i in hits], dtype=np.int64)
            return self.reranker.rerank(text, candidates, [hits[i].text for i in candidates], k)
        return rrf(rankings, retrieval.rrf_k, limit=k)

    def _near(self, query: np.ndarray, k: int,
              scope: Scope | None) -> tuple[np.ndarray, np.ndarray]:
        """The dense index's top-k (ids, cosines), within the scope when there is one."""
        if scope is None:
            return self.dense.search(query, k)
        return self.stores.neighbours_within(query, k, scope)

    def _tree_search(self, query: np.ndarray, k: int,
                     near: tuple[np.ndarray, np.ndarray] | None = None,
                     scope: Scope | None = None) -> Ranking:
        """Tree retrieval (empty before anything is indexed); `near` are the ANN index's
        candidates when the caller already has them, and the leaves come from the scope."""
        retrieval = self.config.retrieval
        if retrieval.tree_search == "collapsed":
            return self.tree_index.search_collapsed(
                query, retrieval.parent_weight, k, self.config.tree.node_vectors == "abstract",
                near, scope,
            )
        return self.tree_index.search(query, retrieval.tree_k, k, scope)

    def sources(self, ids: np.ndarray) -> list[str]:
        """The source (path or corpus id) of each chunk id, in order."""
        hits = self.store.hits(ids.tolist())
        return [hits[i].source for i in ids.tolist() if i in hits]

    def query(
        self, text: str, mode: str | None = None, k: int | None = None, summarize: bool = False,
        within: Within | None = None,
    ) -> dict[str, Any]:
        """Ranked results as the JSON shape the CLI and API return.

        With `summarize`, 18 leaves (or k) come from the tree alone, in corpus order. With
        `within` (folders or files), only chunks of files under them, and "in" lists them.
        Otherwise, with [retrieval] merge_adjacent, chunks that touch in one file are one result
        (see `merge_adjacent`), and every result lists its chunks in `chunk_ids`.
        """
        text = text.strip()
        if not text:
            raise KBError("the query is empty")
        mode = "summarize" if summarize else (mode or self.config.retrieval.default_mode)
        scope = None if within is None else self.scope_of(within)
        if mode == "agent":
            return self.answer(text, k, within=scope)
        merge = self.config.retrieval.merge_adjacent and not summarize
        if summarize:
            ranking = self._tree_search(self.embed_query(text), k or SUMMARY_LEAVES,
                                        scope=scope)
            hits = self.store.hits(ranking.ids.tolist())
            position = {i: (hits[i].path, hits[i].ordinal) for i in hits}
            order = sorted(range(len(ranking.ids)),
                           key=lambda j: position.get(int(ranking.ids[j]), ("", 0)))
            results = self._rows(Ranking(ranking.ids[order], ranking.scores[order]), hits)
        elif merge:
            results = self._merged(text, mode, k or self.config.retrieval.k, scope)
        else:
            ranking = self.rank(text, mode, k or self.config.retrieval.k, scope)
            results = [row | {"chunk_ids": [row["chunk_id"]]}
                       for row in self._rows(ranking, self.store.hits(ranking.ids.tolist()))]
        result: dict[str, Any] = {"query": text, "mode": mode, "results": results}
        if scope is not None:
            result["in"] = list(scope.paths)
        if self.stale:
            result["degraded"] = sorted(self.stale)
        if summarize:
            from psirag_kb.search.summary import add_summary

            return add_summary(self, result)
        return result

    @staticmethod
    def _rows(ranking: Ranking, hits: dict[int, Any]) -> list[dict[str, Any]]:
        """Result rows of a ranking, best first, for the chunks that still exist."""
        rows: list[dict[str, Any]] = []
        for chunk_id, score in zip(ranking.ids.tolist(), ranking.scores.tolist(), strict=True):
            if chunk_id in hits:
                rows.append(result_row(hits[chunk_id], chunk_id, score, len(rows) + 1))
        return rows

    def _merged(self, text: str, mode: str, k: int, scope: Scope | None) -> list[dict[str, Any]]:
        """k results of touching hits merged (see `merge_adjacent`): ranks MARGIN x k chunks,
        and twice as many again (up to MAX_DEPTH x k) while merging leaves fewer than k places."""
        vector = None if mode == "sparse" else self.embed_query(text)
        depth = k * MARGIN
        while True:
            ranking = self.rank(text, mode, depth, scope, vector=vector)
            hits = self.store.hits(ranking.ids.tolist())
            results = merge_adjacent(self._rows(ranking, hits), hits, k)
            if len(results) >= k or len(ranking.ids) < depth or depth >= k * MAX_DEPTH:
                return results
            depth *= 2

    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None,
               within: Within | None = None) -> dict[str, Any]:
        """Agent mode: an LLM answer with citations and steps, or multi-round retrieval; with
        `within`, every retrieval round searches only those folders and files."""
        from psirag_kb.answer.agent import answer_question

        scope = None if within is None else self.scope_of(within)
        result = answer_question(self, text, k, on_step, scope).as_dict()
        if scope is not None:
            result["in"] = list(scope.paths)
        return result

    # -- status -----------------------------------------------------------------------------

    def repair_drift(self, tolerance: float = DRIFT_TOLERANCE,
                     max_leaves: int = DRIFT_MAX_LEAVES) -> dict[str, Any]:
        """Rebuild subtrees whose neighbour cost exceeds a local rebuild's by `tolerance`."""
        started = time.perf_counter()

        def run() -> dict[str, Any]:
            live = self.tree_index.live
            with self.stores.tree_edit():
                report = repair(live, self.config.tree.max_children,
                                self.config.tree.pair_mode, tolerance, max_leaves)
                if report["rebuilt"]:
                    with self.store.transaction():
                        self.store.write_tree(live)
            return report

        report = self.writer.call(run, key="repair-drift")
        return report | {"seconds": round(time.perf_counter() - started, 3)}

    def regenerate_abstracts(self, max_nodes: int | None = None, offline: bool = False,
                             yield_to: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Write fresh abstracts for dirty nodes, bottom-up (offline keywords or Ollama);
        `offline` never asks the LLM (see `AbstractJob.run`)."""
        return self.abstract_job.run(max_nodes, offline, yield_to)

    def maintain(self) -> dict[str, Any]:
        """Periodic upkeep: repair drifted subtrees, then regenerate dirty abstracts."""
        if self.stores.tree_state["state"] == "missing":  # not being rebuilt
            self.rebuild_tree()
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

    def chunk(self, chunk_id: int, neighbours: int = 0) -> dict[str, Any]:
        """One chunk's source, lines, location and full text, with up to `neighbours` chunks
        either side of it in its file (`offset` -1 is the one just before)."""
        from psirag_kb.errors import ChunkNotFound

        if neighbours < 0:
            raise KBError(f"neighbours must be 0 or more, not {neighbours}")
        rows = self.store.around(chunk_id, neighbours) if 0 < chunk_id < 2**63 else []
        hit = next((row for row in rows if row.id == chunk_id), None)
        if hit is None:
            raise ChunkNotFound(f"no chunk {chunk_id}: it was never indexed or its file has "
                                "changed since; search again for current ids")
        lines = {row.id: [row.line_first, row.line_last] if row.line_first is not None else None
                 for row in rows}
        return {
            "chunk_id": hit.id, "source": hit.source, "path": hit.path,
            "lines": lines[hit.id], "location": hit.location, "text": hit.text,
            "neighbours": [{"chunk_id": row.id, "lines": lines[row.id], "location": row.location,
                            "text": row.text, "offset": row.ordinal - hit.ordinal}
                           for row in rows if row.id != hit.id],
        }

    def tree_status(self) -> dict[str, Any]:
        """Shape of the tree, and whether it waits for a rebuild."""
        state = self.stores.tree_state
        shown = {"state": state["state"]} | (
            {"reason": state.get("reason", ""), "since": state.get("since")}
            if state["state"] != "ok" else {})
        return self.tree_index.status() | shown

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
            "indexes": self.stores.index_status(),
            "writer": {"queued": self.writer.queued, "running": _label(self.writer.running)},
            "stores": self.stores.sizes(),
            "problems": problems,
        }


def result_row(hit: Any, chunk_id: int, score: float, rank: int) -> dict[str, Any]:
    """One result as the CLI, API and MCP server show it."""
    lines = [hit.line_first, hit.line_last] if hit.line_first is not None else None
    return {"rank": rank, "score": float(score), "source": hit.source, "lines": lines,
            "location": hit.location, "text": hit.text, "chunk_id": int(chunk_id),
            "path": hit.path}


def _label(key: Any) -> str | None:
    """A writer task's key as text for status."""
    if key is None or isinstance(key, str):
        return key
    return str(key[0]) if isinstance(key, tuple) and key else str(key)

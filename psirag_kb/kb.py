"""The KnowledgeBase facade: ingest, query, tree and status over one data directory.

Writes run on the stores' one writer thread (`stores.py`), in order; queries run on any thread
against what the last commit published (DuckDB cursors, Tantivy's searcher, hnswlib, the tree's
view) and take no lock a write holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from psirag_kb.abstracts.job import AbstractJob
from psirag_kb.access import OWNER, Access
from psirag_kb.answer.agent import answer_question
from psirag_kb.config import Config
from psirag_kb.errors import AccessDenied, KBError
from psirag_kb.ingest.device import device_of
from psirag_kb.ingest.embedding import (
    Embedder,
    QueryEmbedder,
    for_queries,
    make_embedder,
    yield_cores,
)
from psirag_kb.ingest.ingestion import CLOSE_WAIT_S, Ingestion, IngestReport, Progress
from psirag_kb.paths import resolved
from psirag_kb.search.engine import QueryEngine, Within, asked
from psirag_kb.search.overview import is_global
from psirag_kb.search.rerank import Reranker
from psirag_kb.search.retrieval import Ranking
from psirag_kb.search.rows import result_row
from psirag_kb.search.scope import Scope
from psirag_kb.search.summary import add_summary
from psirag_kb.storage.stores import OverStores, Stores
from psirag_kb.tree.drift import repair

DRIFT_TOLERANCE = 0.02
"""A subtree is rebuilt when its cost exceeds a local rebuild's by more than this fraction."""
DRIFT_MAX_LEAVES = 4000
"""Largest subtree rebuilt in one piece."""

__all__ = ["OWNER", "Access", "KnowledgeBase", "Within", "result_row"]


class KnowledgeBase(OverStores):
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
        self.engine = QueryEngine(config, self.stores, self.query_embedder, self.reranker)
        """Every read of the knowledge base: the facade composes it, never the other way."""

    @property
    def config(self) -> Config:
        """The configuration (replacing it here replaces the query engine's too)."""
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        self._config = config
        if "engine" in self.__dict__:
            self.engine.config = config

    # the stores by name (store, sparse, dense, tree_index, writer, stale): see OverStores

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
               keep_vanished: bool = False, *, access: Access = OWNER) -> IngestReport:
        """Index files and folders; unchanged files are skipped, missing ones removed (only
        inside what `access` may write: an editor's grants, anywhere for an admin)."""
        return self.ingestion.ingest(_writable(paths, access), progress, keep_vanished)

    def ingest_jsonl(self, path: Path | str, progress: Progress | None = None) -> IngestReport:
        """Index a benchmark corpus: one leaf per {"id","title","text"} record."""
        return self.ingestion.ingest_jsonl(path, progress)

    def ingest_corpora(self, corpora: Iterable[Path], batches: int = 1,
                       seed: int = 0) -> dict[str, float]:
        """Index benchmark corpora: at once, or shuffled in sequential incremental batches."""
        return self.ingestion.ingest_corpora(corpora, batches, seed)

    def remove(self, paths: Iterable[Path | str], *, access: Access = OWNER) -> int:
        """Forget files (and everything below folders); returns how many were removed (only
        inside what `access` may write)."""
        return self.ingestion.remove(_writable(paths, access))

    def forget(self, paths: Iterable[Path | str], *, access: Access = OWNER) -> int:
        """Remove files and folders on purpose, unavailable ones included; an error when nothing
        is indexed at or below a path. Returns how many files were removed."""
        return self.ingestion.forget(_writable(paths, access))

    def vanish(self, folders: Iterable[Path | str]) -> int:
        """Mark the indexed files of folders that vanished unavailable: they stay searchable
        until the folder returns or is forgotten. Returns how many were marked."""
        return self.ingestion.vanish(folders)

    def forget_unwatched(self, folders: Iterable[Path | str]) -> int:
        """Record the watched folders; remove the unavailable files of folders watched the
        last time and no longer. Returns how many files were removed."""
        return self.ingestion.forget_unwatched(folders)

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

    def set_boundaries(self, grants: Iterable[str] | None = None,
                       roots: Iterable[Path | str] | None = None) -> bool:
        """Partition the tree at these granted folders and files and watched folders (None
        keeps the current ones), so no abstract mixes text of different readers; True when the
        tree is being split in the background (queries go on with the current tree)."""
        paths = None if grants is None else [str(g) for g in grants]
        folders = None if roots is None else [Path(r) for r in roots]
        return self.writer.call(lambda: self.stores.set_boundaries(paths, folders),
                                key="boundaries")

    def checkpoint(self) -> None:
        """Persist the hnswlib index and checkpoint DuckDB (cheap to redo; done on close)."""
        self.writer.call(self.stores.checkpoint_now, key="checkpoint")

    # -- query (composed from the query engine; `access` is the person asking) -------------

    def embed_query(self, text: str) -> np.ndarray:
        """The query's unit vector (float32)."""
        return self.engine.embed_query(text)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of several queries in one batched call."""
        return self.engine.embed_queries(texts)

    def scope_of(self, within: Within, access: Access = OWNER) -> Scope:
        """The scope of a query limited to these folders and files (and the person's grants):
        their normalised paths and the ids of the chunks below them (see `QueryEngine`)."""
        scope = self.engine.scope_of(within, access)
        assert scope is not None  # paths were given
        return scope

    def rank(self, text: str, mode: str, k: int, within: Within | None = None,
             vector: np.ndarray | None = None, *, access: Access = OWNER) -> Ranking:
        """Chunk ids for a query in one mode, best first (see `QueryEngine.rank`)."""
        return self.engine.rank(text, mode, k, within, vector, access)

    def sources(self, ids: np.ndarray) -> list[str]:
        """The source (path or corpus id) of each chunk id, in order."""
        return self.engine.sources(ids)

    def query(
        self, text: str, mode: str | None = None, k: int | None = None, summarize: bool = False,
        within: Within | None = None, *, access: Access = OWNER,
    ) -> dict[str, Any]:
        """Ranked results as the JSON shape the CLI and API return, from what `access` may
        read: agent mode answers (`answer`), a summary adds abstracts and the LLM's text, and
        every other mode is the engine's (see `QueryEngine.query`)."""
        if mode == "agent" and not summarize:
            if not text.strip():
                raise KBError("the query is empty")
            return self.answer(text.strip(), k, within=within, access=access)
        result = self.engine.query(text, mode, k, summarize, within, access)
        if summarize:
            return add_summary(self.engine, result, access=access)
        return result

    def tree_note(self) -> str | None:
        """What a tree-mode or summarize query says while the tree is missing or rebuilding."""
        return self.engine.tree_note()

    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None,
               within: Within | None = None, *, access: Access = OWNER) -> dict[str, Any]:
        """Agent mode: an LLM answer with citations and steps, or multi-round retrieval; every
        retrieval round searches only what `access` may read (and `within`, when given)."""
        if is_global(text) and self.engine.tree_note() is None:
            return self._global_answer(text, k, within, access)
        scope = self.engine.scope_of(within, access)
        result = answer_question(self.engine, text, k, on_step, scope).as_dict()
        if within is not None:
            result["in"] = list(asked(within))
        return result

    def _global_answer(self, text: str, k: int | None, within: Within | None,
                       access: Access) -> dict[str, Any]:
        """A question about the whole collection or a folder, answered from the tree's top
        branches (their summary, citing the nodes) in agent mode's shape."""
        found = self.query(text, k=k, summarize=True, within=within, access=access)
        return {"mode": "agent", "query": text, "answer": found["summary"],
                "status": "answered", "citations": found["citations"],
                "nodes": found["nodes"], "steps": [],
                "hops": 0, "message": found["message"], "results": found["results"],
                "overview": found["overview"],
                **({"in": found["in"]} if "in" in found else {})}

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

    def node(self, node_id: int | None = None, *, access: Access = OWNER) -> dict[str, Any]:
        """One abstract node (the root by default): its abstract and its children (only nodes
        whose every leaf `access` may read)."""
        return self.engine.node(node_id, access)

    def path_of(self, chunk_id: int, *, access: Access = OWNER) -> list[dict[str, Any]]:
        """The abstract nodes above a chunk's leaf, root first: id, layer, abstract, dirty."""
        return self.engine.path_of(chunk_id, access)

    def chunk(self, chunk_id: int, neighbours: int = 0, *,
              access: Access = OWNER) -> dict[str, Any]:
        """One chunk with up to `neighbours` chunks either side of it in its file; one that
        `access` may not read is not found, as one that does not exist."""
        return self.engine.chunk(chunk_id, neighbours, access)

    def original(self, chunk_id: int, *, access: Access = OWNER) -> dict[str, Any]:
        """The indexed file of a chunk ({"path", "source"}) when `access` may read it (see
        `QueryEngine.original`)."""
        return self.engine.original(chunk_id, access)

    def tree_status(self) -> dict[str, Any]:
        """Shape of the tree, and whether it waits for a rebuild."""
        state = self.stores.tree_state
        shown = {"state": state["state"]} | (
            {"reason": state.get("reason", ""), "since": state.get("since")}
            if state["state"] != "ok" else {})
        if self.stores.splitting:
            shown["splitting"] = True
        return self.tree_index.status() | shown

    def status(self, *, access: Access = OWNER) -> dict[str, Any]:
        """Counts, model and store sizes; for a person with grants, only what they may read
        (their files, chunks, problems and visible tree nodes; no paths or sizes of the rest)."""
        if not access.everything:
            return self.engine.status_within(access) | {"model": self.embedder.name,
                                                        "dim": self.dim}
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
            **dict(zip(("device", "device_reason"), device_of(self.embedder), strict=True)),
            "generation": self.store.generation,
            "indexes": self.stores.index_status(),
            "writer": {"queued": self.writer.queued, "running": _label(self.writer.running)},
            "compute": self.ingestion.compute_status(),
            "stores": self.stores.sizes(),
            "problems": problems,
            "unavailable": self.store.unavailable(),
            "encodings": self.store.encodings(),
        }



def _writable(paths: Iterable[Path | str], access: Access) -> Iterable[Path | str]:
    """The paths, once each is known to lie where `access` may write (AccessDenied if not)."""
    if access.role == "admin" and access.everything:
        return paths
    paths = list(paths)
    for path in paths:
        if not access.may_write(str(resolved(path))):
            raise AccessDenied(f"{access.name} may not reindex {path}: ask an admin for a grant "
                               "as an editor of its folder")
    return paths


def _label(key: Any) -> str | None:
    """A writer task's key as text for status."""
    if key is None or isinstance(key, str):
        return key
    return str(key[0]) if isinstance(key, tuple) and key else str(key)

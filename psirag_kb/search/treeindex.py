"""The knowledge base's Ψ-RAG tree: a live tree the writer edits, searched through its view."""

from __future__ import annotations

import time

import numpy as np

from psirag_kb.config import TreeConfig
from psirag_kb.search.retrieval import Ranking
from psirag_kb.search.treeview import TreeView
from psirag_kb.tree import build_tree, tree_search
from psirag_kb.tree.live import LiveTree, Nearest


class TreeIndex:
    """A live tree over the chunks (writer only) and the view of its last commit (anyone)."""

    def __init__(self, live: LiveTree, config: TreeConfig) -> None:
        self.live = live
        self.config = config
        self.build_s = 0.0
        self.view = TreeView.empty(live.dim)
        self.publish()

    @classmethod
    def build(
        cls, chunk_ids: np.ndarray, leaf_vectors: np.ndarray, config: TreeConfig, next_id: int = 1
    ) -> TreeIndex:
        """Build a tree over all leaves at once (Algorithm 1 and rebalancing)."""
        started = time.perf_counter()
        tree = build_tree(
            leaf_vectors, mode=config.pair_mode, max_children=config.max_children, knn=config.knn
        )
        live = LiveTree.from_tree(tree, chunk_ids, leaf_vectors, config.max_children, next_id)
        index = cls(live, config)
        index.build_s = time.perf_counter() - started
        return index

    def publish(self) -> None:
        """Swap in a view of the live tree as it is now (after a commit)."""
        self.view = TreeView.of(self.live, self.config.node_vectors == "abstract")

    def update(self, added: np.ndarray, vectors: np.ndarray, removed: np.ndarray,
               nearest: Nearest) -> None:
        """Remove and insert leaves incrementally."""
        if len(removed):
            self.live.remove(removed.tolist())
        if len(added):
            self.live.insert(added, vectors, nearest, self.config.insert_threshold,
                             self.config.pair_mode)

    @property
    def empty(self) -> bool:
        """Whether the live tree has no leaves."""
        return self.live.root is None

    def search(self, query: np.ndarray, beam: int, k: int) -> Ranking:
        """Top-down search (Algorithm 2): chunk ids of the best k leaves."""
        view = self.view
        if view.tree is None:
            return Ranking.empty()
        vectors = view.guided if view.guided is not None else view.vectors
        leaves, scores = tree_search(view.tree, vectors, query, k=beam, k_leaves=k)
        return Ranking(view.chunk_ids[leaves], scores.astype(np.float32))

    def search_collapsed(
        self, query: np.ndarray, parent_weight: float, k: int, abstracts: bool = False
    ) -> Ranking:
        """Leaves and their parents searched together: cos(q, leaf) + w * cos(q, parent)."""
        view = self.view
        tree = view.tree
        if tree is None:
            return Ranking.empty()
        vectors = view.guided if abstracts and view.guided is not None else view.vectors
        n = tree.n_leaves
        query = np.asarray(query, dtype=np.float32)
        scores = vectors[:n] @ query
        if tree.depth > 0:
            node_scores = vectors[n:] @ query
            scores = scores + parent_weight * node_scores[tree.parent[:n] - n]
        k = min(k, n)
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return Ranking(view.chunk_ids[top], scores[top].astype(np.float32))

    def chunk_ids(self) -> np.ndarray:
        """Chunk ids of all leaves of the live tree, ascending."""
        return np.sort(-np.fromiter((k for k in self.live.vectors if k < 0), np.int64))

    def problems(self) -> list[str]:
        """Broken invariants of the live tree (empty when it is valid)."""
        if self.empty:
            return []
        return self.live.snapshot()[0].problems(self.config.max_children)

    def status(self) -> dict:
        """The `tree` object of `status --json`, from the last published view."""
        view = self.view
        tree = view.tree
        if tree is None:
            return empty_status(self.config.max_children)
        return {
            "depth": tree.depth,
            "leaves": tree.n_leaves,
            "abstract_nodes": tree.n_nodes - tree.n_leaves,
            "nodes_per_layer": tree.nodes_per_layer(),
            "max_children": self.config.max_children,
            "equi_depth": tree.is_equi_depth(),
            "dirty": len(view.dirty),
        }


def empty_status(max_children: int) -> dict:
    """The `tree` object when there are no leaves yet."""
    return {"depth": 0, "leaves": 0, "abstract_nodes": 0, "nodes_per_layer": [],
            "max_children": max_children, "equi_depth": True, "dirty": 0}

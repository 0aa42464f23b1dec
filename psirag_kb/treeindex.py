"""The knowledge base's Ψ-RAG tree in memory: the pure tree plus chunk ids and node vectors."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .config import TreeConfig
from .retrieval import Ranking
from .tree import Tree, build_tree, node_vectors, tree_search


@dataclass
class TreeIndex:
    """A tree whose leaf i is chunk `chunk_ids[i]`, with a vector for every node."""

    tree: Tree
    chunk_ids: np.ndarray
    vectors: np.ndarray
    build_s: float = 0.0

    @classmethod
    def build(
        cls, chunk_ids: np.ndarray, leaf_vectors: np.ndarray, config: TreeConfig
    ) -> TreeIndex:
        """Build a tree over all leaves (Algorithm 1 and rebalancing)."""
        started = time.perf_counter()
        tree = build_tree(
            leaf_vectors, mode=config.pair_mode, max_children=config.max_children, knn=config.knn
        )
        vectors = node_vectors(tree, leaf_vectors)
        return cls(tree, np.asarray(chunk_ids, np.int64), vectors, time.perf_counter() - started)

    def search(self, query: np.ndarray, beam: int, k: int) -> Ranking:
        """Top-down search (Algorithm 2): chunk ids of the best k leaves."""
        leaves, scores = tree_search(self.tree, self.vectors, query, k=beam, k_leaves=k)
        return Ranking(self.chunk_ids[leaves], scores.astype(np.float32))

    def covers(self, chunk_ids: np.ndarray) -> bool:
        """Whether the tree's leaves are exactly these chunks."""
        return len(chunk_ids) == len(self.chunk_ids) and bool(
            np.array_equal(np.sort(chunk_ids), np.sort(self.chunk_ids))
        )

    def status(self, max_children: int) -> dict:
        """The `tree` object of `status --json`."""
        tree = self.tree
        return {
            "depth": tree.depth,
            "leaves": tree.n_leaves,
            "abstract_nodes": tree.n_nodes - tree.n_leaves,
            "nodes_per_layer": tree.nodes_per_layer(),
            "max_children": max_children,
            "equi_depth": tree.is_equi_depth(),
        }


def empty_status(max_children: int) -> dict:
    """The `tree` object when there are no leaves yet."""
    return {"depth": 0, "leaves": 0, "abstract_nodes": 0, "nodes_per_layer": [],
            "max_children": max_children, "equi_depth": True}

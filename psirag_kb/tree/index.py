"""The knowledge base's Ψ-RAG tree: a live tree the writer edits, searched through its view."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from psirag_kb.config import TreeConfig
from psirag_kb.storage.records import Ranking
from psirag_kb.storage.scope import Scope
from psirag_kb.tree import build_tree
from psirag_kb.tree.build import resolve_mode
from psirag_kb.tree.live import LabelOf, LeafLookup, LiveTree, Nearest
from psirag_kb.tree.partition import build_partitioned
from psirag_kb.tree.view import TreeView

Neighbours = Callable[..., tuple[np.ndarray, np.ndarray]]
"""neighbours(query, k, scope=None) -> (chunk ids, cosines) of the most similar leaves (an ANN
index), only among the scope's chunks when one is given."""

CANDIDATES = 100
"""Leaves the ANN index proposes to collapsed tree search before the parent term is added."""


class TreeIndex:
    """A live tree over the chunks (writer only) and the view of its last commit (anyone)."""

    def __init__(self, live: LiveTree, config: TreeConfig,
                 neighbours: Neighbours | None = None) -> None:
        self.live = live
        self.config = config
        self.neighbours = neighbours
        self.build_s = 0.0
        self.build_mode = ""
        self.view = TreeView.full(live)

    @classmethod
    def build(
        cls, chunk_ids: np.ndarray, leaf_vectors: np.ndarray, config: TreeConfig,
        next_id: int = 1, lookup: LeafLookup | None = None, neighbours: Neighbours | None = None,
        label_of: LabelOf | None = None,
    ) -> TreeIndex:
        """Build a tree over all leaves at once (Algorithm 1 and rebalancing); with `label_of`,
        one subtree per partition label, joined only above them (`tree/partition.py`)."""
        started = time.perf_counter()
        timings: dict = {}
        options: dict[str, Any] = {"mode": config.pair_mode, "max_children": config.max_children,
                   "knn": config.knn, "exact_max": config.exact_max_leaves}
        if label_of is None:
            tree = build_tree(leaf_vectors, timings=timings, **options)
        else:
            tree, join = build_partitioned(leaf_vectors, label_of(chunk_ids), **options)
            timings["mode"] = resolve_mode(config.pair_mode, len(chunk_ids),
                                           config.exact_max_leaves)
        live = LiveTree.from_tree(tree, chunk_ids, leaf_vectors, config.max_children, next_id,
                                  lookup)
        if label_of is not None:
            live.partition(join, label_of)
        live.clear_changes()
        index = cls(live, config, neighbours)
        index.build_s = time.perf_counter() - started
        index.build_mode = str(timings.get("mode", config.pair_mode))
        return index

    def publish(self, touched: set[int], dropped: set[int]) -> None:
        """Swap in the view after a commit that touched and dropped these keys."""
        self.view = self.view.patched(self.live, touched, dropped)

    def update(self, added: np.ndarray, vectors: np.ndarray, removed: np.ndarray,
               nearest: Nearest) -> None:
        """Remove and insert leaves incrementally."""
        if len(removed):
            self.live.remove(removed.tolist())
        if len(added):
            self.live.insert(added, vectors, nearest, self.config.insert_threshold,
                             self.pair_mode(len(added)))

    def pair_mode(self, n: int) -> str:
        """The pair mode for a build over n leaves."""
        return resolve_mode(self.config.pair_mode, n, self.config.exact_max_leaves)

    @property
    def empty(self) -> bool:
        """Whether the live tree has no leaves."""
        return self.live.root is None

    def search(self, query: np.ndarray, beam: int, k: int, scope: Scope | None = None) -> Ranking:
        """Top-down search (Algorithm 2): keep `beam` nodes per layer, then the best k leaves;
        with a scope, only nodes above its chunks, and more than `beam` of them where the
        best hold fewer than k of its chunks."""
        view = self.view
        if view.root is None:
            return Ranking.empty()
        query = np.asarray(query, dtype=np.float32)
        if scope is not None and len(scope) >= view.n_leaves and scope.contains(
                self.chunk_ids_of(view)).all():
            scope = None  # every leaf is in scope: the search as it is without one
        if view.root < 0:
            if scope is not None and not scope.contains(np.array([-view.root])).all():
                return Ranking.empty()
            return Ranking(np.array([-view.root]), np.ones(1, np.float32))
        held = None if scope is None else scope_counts(view, scope)
        if held is not None and not held:
            return Ranking.empty()
        layer, nodes = view.depth, [view.root]
        while layer > 1 and len(nodes) < beam:  # start on the highest layer with `beam` nodes
            nodes = [kid for node in nodes for kid in view.nodes[node].children
                     if held is None or kid in held]
            layer -= 1
        while layer >= 1:
            scores = np.stack([view.nodes[n].vector for n in nodes]) @ query
            order = np.argsort(-scores, kind="stable")
            if held is None:
                keep = order[:beam].tolist()
            else:  # past the beam until the kept nodes hold k chunks of the scope
                keep, found = [], 0
                for i in order.tolist():
                    if len(keep) >= beam and found >= k:
                        break
                    keep.append(i)
                    found += held[nodes[i]]
            nodes = [kid for i in keep for kid in view.nodes[nodes[i]].children
                     if held is None or kid < 0 or kid in held]
            layer -= 1
        ids = -np.asarray(nodes, dtype=np.int64)
        if scope is not None:
            ids = ids[scope.contains(ids)]
            nodes = (-ids).tolist()
        lookup = self.live.lookup
        vectors = lookup(ids) if lookup else self.live.vectors_of(nodes)
        scores = vectors @ query
        top = np.argsort(-scores, kind="stable")[:k]
        return Ranking(ids[top], scores[top].astype(np.float32))

    def search_collapsed(
        self, query: np.ndarray, parent_weight: float, k: int, abstracts: bool = False,
        near: tuple[np.ndarray, np.ndarray] | None = None, scope: Scope | None = None,
    ) -> Ranking:
        """Leaves and their parents together, cos(q, leaf) + w * cos(q, parent), over the
        leaves an ANN index proposes (never every leaf); `near` are its (ids, cosines) when
        the caller has searched it already (within the scope, when there is one)."""
        view = self.view
        if view.root is None or (self.neighbours is None and near is None):
            return Ranking.empty()
        query = np.asarray(query, dtype=np.float32)
        wanted = min(max(CANDIDATES, k), view.n_leaves if scope is None else len(scope))
        if near is None or len(near[0]) < wanted:
            assert self.neighbours is not None  # checked above when near is None
            near = (self.neighbours(query, max(CANDIDATES, k)) if scope is None
                    else self.neighbours(query, max(CANDIDATES, k), scope))
        ids, scores = near
        if scope is not None:
            inside = scope.contains(ids)
            ids, scores = ids[inside], scores[inside]
        parents = view.parents_of(ids)
        inside = parents > 0
        if view.root < 0:
            inside |= ids == -view.root
        ids, scores, parents = ids[inside], scores[inside], parents[inside]
        if len(ids) == 0:
            return Ranking.empty()
        if view.depth > 0:
            unique, rows = np.unique(parents, return_inverse=True)
            matrix = np.stack([view.nodes[int(p)].guided if abstracts else view.nodes[int(p)].vector
                               for p in unique.tolist()])
            scores = scores + parent_weight * (matrix @ query)[rows]
        top = np.argsort(-scores, kind="stable")[:k]
        return Ranking(ids[top], scores[top].astype(np.float32))

    @staticmethod
    def chunk_ids_of(view: TreeView) -> np.ndarray:
        """Chunk ids of all leaves of a view, ascending."""
        if view.root is not None and view.root < 0:
            return np.array([-view.root], dtype=np.int64)
        return np.flatnonzero(view.leaf_parent > 0).astype(np.int64)

    def chunk_ids(self) -> np.ndarray:
        """Chunk ids of all leaves of the live tree, ascending."""
        return np.sort(-np.asarray(self.live.leaf_keys(), dtype=np.int64))

    def problems(self) -> list[str]:
        """Broken invariants of the live tree (empty when it is valid)."""
        if self.empty:
            return []
        return self.live.to_tree()[0].problems(self.config.max_children,
                                               1 if self.live.join is not None else 2)

    def status(self) -> dict:
        """The `tree` object of `status --json`, from the last published view."""
        view = self.view
        if view.root is None:
            return empty_status(self.config.max_children)
        return {
            "depth": view.depth,
            "leaves": view.n_leaves,
            "abstract_nodes": len(view.nodes),
            "nodes_per_layer": view.nodes_per_layer(),
            "max_children": self.config.max_children,
            "equi_depth": view.is_equi_depth(),
            "dirty": view.dirty,
        }


def scope_counts(view: TreeView, scope: Scope) -> dict[int, int]:
    """Chunks of the scope below each abstract node that has any (its ancestors included)."""
    parents = view.parents_of(scope.ids)
    nodes, counts = np.unique(parents[parents > 0], return_counts=True)
    held = dict(zip(nodes.tolist(), counts.tolist(), strict=True))
    layer = held
    while layer:
        above: dict[int, int] = {}
        for node, count in layer.items():
            parent = view.nodes[node].parent
            if parent is not None:
                above[parent] = above.get(parent, 0) + count
        held.update(above)
        layer = above
    return held


def empty_status(max_children: int) -> dict:
    """The `tree` object when there are no leaves yet."""
    return {"depth": 0, "leaves": 0, "abstract_nodes": 0, "nodes_per_layer": [],
            "max_children": max_children, "equi_depth": True, "dirty": 0}

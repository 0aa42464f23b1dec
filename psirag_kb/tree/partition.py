"""A tree partitioned by reader sets: one subtree per partition label, joined only above them.

Every leaf carries a partition label (an int). Each label's leaves get a tree of their own;
its top is lifted by single-child nodes to the common `join layer` (the height of the tallest
partition), and the partition tops are joined by a tree built above that layer. So every node
on or below the join layer is pure (all its leaves share one label) and only nodes above it
mix partitions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from psirag_kb.tree.build import build_tree
from psirag_kb.tree.model import Tree
from psirag_kb.tree.vectors import normalise, segment_sum

MIXED = np.iinfo(np.int64).min
"""The label of a node whose leaves carry more than one label."""


def build_partitioned(vectors: np.ndarray, labels: np.ndarray, *, mode: str = "auto",
                      max_children: int = 40, knn: int = 32,
                      exact_max: int = 20_000) -> tuple[Tree, int]:
    """The equi-depth tree over the leaves whose nodes up to the returned join layer (>= 1)
    never hold leaves of two labels."""
    labels = np.asarray(labels, np.int64)
    n = vectors.shape[0]
    if labels.shape != (n,):
        raise ValueError(f"need one label per leaf: {labels.shape} labels for {n} leaves")
    options: dict[str, Any] = {"mode": mode, "max_children": max_children, "knn": knn,
                               "exact_max": exact_max}
    order = np.argsort(labels, kind="stable")
    cuts = np.flatnonzero(np.diff(labels[order])) + 1
    groups = np.split(order, cuts)
    subs = [build_tree(vectors[idx], **options) if idx.size > 1 else None for idx in groups]
    join = max([1, *(sub.depth for sub in subs if sub is not None)])
    parent: list[int] = [-1] * n
    children: list[list[int]] = [[] for _ in range(n)]
    layer: list[int] = [0] * n

    def add(kids: list[int], level: int) -> int:
        node = len(parent)
        parent.append(-1)
        children.append(kids)
        layer.append(level)
        for kid in kids:
            parent[kid] = node
        return node

    def graft(sub: Tree, leaves: np.ndarray, lift: int) -> int:
        """Copy a tree's abstract nodes over existing nodes `leaves` (layers raised by lift)."""
        ids = np.empty(sub.n_nodes, np.int64)
        ids[: sub.n_leaves] = leaves
        ids[sub.n_leaves:] = np.arange(sub.n_leaves, sub.n_nodes) + len(parent) - sub.n_leaves
        for node in range(sub.n_leaves, sub.n_nodes):
            parent.append(-1)
            children.append([int(ids[k]) for k in sub.children[node]])
            layer.append(int(sub.layer[node]) + lift)
        for node in range(sub.n_leaves, sub.n_nodes):
            for kid in children[int(ids[node])]:
                parent[kid] = int(ids[node])
        return int(ids[sub.root])

    tops: list[int] = []
    for idx, sub in zip(groups, subs, strict=True):
        if sub is None:
            top = int(idx[0])
        else:
            top = graft(sub, idx, 0)
        while layer[top] < join:  # lift a short partition to the join layer
            top = add([top], layer[top] + 1)
        tops.append(top)
    if len(tops) > 1:
        _, sums = segment_sum(np.asarray(vectors, np.float32), _labels_by_group(groups, n))
        upper = build_tree(normalise(sums), **options)
        root = graft(upper, np.asarray(tops, np.int64), join)
    else:
        root = tops[0]
    tree = Tree(n_leaves=n, parent=np.asarray(parent, np.int64), children=children,
                layer=np.asarray(layer, np.int32), root=root)
    return tree, join


def _labels_by_group(groups: list[np.ndarray], n: int) -> np.ndarray:
    """Group index of every leaf (the groups' order, so segment sums come out in it)."""
    out = np.empty(n, np.int64)
    for number, idx in enumerate(groups):
        out[idx] = number
    return out


def node_labels(tree: Tree, labels: np.ndarray) -> np.ndarray:
    """Label of every node: its leaves' label when they share one, else MIXED."""
    out = np.full(tree.n_nodes, MIXED, np.int64)
    out[: tree.n_leaves] = labels
    for node in np.argsort(tree.layer, kind="stable").tolist():
        kids = tree.children[node]
        if kids:
            first = out[kids[0]]
            out[node] = first if all(out[k] == first for k in kids) else MIXED
    return out


def mixing(tree: Tree, labels: np.ndarray, join: int) -> list[int]:
    """Nodes on or below the join layer whose leaves carry two labels (empty when none)."""
    below = node_labels(tree, labels)
    mixed = (below == MIXED) & (tree.layer <= join) & (np.arange(tree.n_nodes) >= tree.n_leaves)
    return np.flatnonzero(mixed).tolist()

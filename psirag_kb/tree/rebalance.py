"""Rebalancing: split over-full nodes in two, B-tree style, keeping similar children together."""

from __future__ import annotations

import numpy as np

from psirag_kb.tree.model import Tree
from psirag_kb.tree.vectors import abstract_vectors, normalise

_POWER_STEPS = 12


def principal_halves(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split rows into two equal-size halves along their principal direction (sorted indices)."""
    k = vectors.shape[0]
    centred = vectors.astype(np.float64) - vectors.mean(axis=0, dtype=np.float64)
    norms = np.einsum("ij,ij->i", centred, centred)
    direction = centred[int(np.argmax(norms))].copy()
    for _ in range(_POWER_STEPS):
        nxt = centred.T @ (centred @ direction)
        size = np.linalg.norm(nxt)
        if size == 0:
            break
        direction = nxt / size
    order = np.argsort(centred @ direction, kind="stable")
    first, second = np.sort(order[: k // 2]), np.sort(order[k // 2 :])
    if second[0] < first[0]:
        first, second = second, first
    return first, second


class _Grower:
    """Mutable copy of a tree that can split nodes and grow a new root."""

    def __init__(self, tree: Tree, vectors: np.ndarray) -> None:
        self.parent = tree.parent.tolist()
        self.children = [list(kids) for kids in tree.children]
        self.layer = tree.layer.tolist()
        self.root = tree.root
        self.n_leaves = tree.n_leaves
        self.leaf_vectors = np.asarray(vectors)
        self.vectors = abstract_vectors(tree, self.leaf_vectors)

    def _vectors_of(self, nodes: list[int]) -> np.ndarray:
        """Vectors of same-layer nodes."""
        if nodes[0] < self.n_leaves:
            return self.leaf_vectors[nodes].astype(np.float32)
        return self.vectors[np.asarray(nodes) - self.n_leaves]

    def _add(self, kids: list[int], layer: int, parent: int, vector: np.ndarray) -> int:
        """Append a node with the given children and vector."""
        node = len(self.parent)
        self.parent.append(parent)
        self.layer.append(layer)
        self.children.append(kids)
        for kid in kids:
            self.parent[kid] = node
        row = node - self.n_leaves
        if row >= self.vectors.shape[0]:
            grown = np.zeros((row + row // 4 + 64, self.vectors.shape[1]), dtype=np.float32)
            grown[: self.vectors.shape[0]] = self.vectors
            self.vectors = grown
        self.vectors[row] = vector
        return node

    def _refresh(self, node: int) -> None:
        """Recompute a node's vector from its children."""
        mean = self._vectors_of(self.children[node]).mean(axis=0)
        self.vectors[node - self.n_leaves] = normalise(mean)

    def split(self, node: int) -> list[int]:
        """Split one node in two under the same parent; returns the nodes to check next."""
        kids = self.children[node]
        first, second = principal_halves(self._vectors_of(kids))
        self.children[node] = [kids[i] for i in first]
        self._refresh(node)
        right = [kids[i] for i in second]
        up = self.parent[node]
        sibling = self._add(right, self.layer[node], up, np.zeros(self.vectors.shape[1]))
        self._refresh(sibling)
        if up < 0:
            self.root = self._add([node, sibling], self.layer[node] + 1, -1, np.zeros(1))
            self._refresh(self.root)
            return [node, sibling]
        siblings = self.children[up]
        siblings.insert(siblings.index(node) + 1, sibling)
        self._refresh(up)
        return [node, sibling, up]

    def freeze(self) -> Tree:
        """The grown tree as a Tree."""
        return Tree(
            n_leaves=self.n_leaves,
            parent=np.asarray(self.parent, dtype=np.int64),
            children=self.children,
            layer=np.asarray(self.layer, dtype=np.int32),
            root=self.root,
        )


def rebalance(tree: Tree, vectors: np.ndarray, max_children: int) -> Tree:
    """Split every node with more than max_children children until none is left (root too)."""
    if max_children < 3:
        raise ValueError(f"max_children must be at least 3, got {max_children}")
    sizes = np.fromiter((len(kids) for kids in tree.children), np.int64, tree.n_nodes)
    if not np.any(sizes > max_children):
        return tree
    grower = _Grower(tree, vectors)
    todo = np.flatnonzero(sizes > max_children).tolist()
    while todo:
        node = todo.pop()
        if len(grower.children[node]) > max_children:
            todo.extend(grower.split(node))
    return grower.freeze()

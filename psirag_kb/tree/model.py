"""The abstract tree as plain arrays: parents, ordered children and layers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


def leaves_under(node: int, children: Callable[[int], Sequence[int]],
                 is_leaf: Callable[[int], bool]) -> list[int]:
    """The leaves below a node (the node itself for a leaf), left to right, for any tree that
    says what a node's children are and which ids are leaves (negative keys, ids < n_leaves)."""
    out, stack = [], [node]
    while stack:
        current = stack.pop()
        if is_leaf(current):
            out.append(current)
        else:
            stack.extend(reversed(children(current)))
    return out


@dataclass
class Tree:
    """A rooted tree whose leaves are nodes 0..n_leaves-1 and whose abstract nodes follow."""

    n_leaves: int
    parent: np.ndarray
    children: list[list[int]]
    layer: np.ndarray
    root: int

    @property
    def n_nodes(self) -> int:
        """Number of nodes, leaves included."""
        return int(self.parent.shape[0])

    @property
    def depth(self) -> int:
        """Layer of the root, which is the depth of every leaf in an equi-depth tree."""
        return int(self.layer[self.root])

    def nodes_per_layer(self) -> list[int]:
        """Node counts indexed by layer, leaves first."""
        return np.bincount(self.layer, minlength=self.depth + 1).tolist()

    def nodes_at_layer(self, layer: int) -> np.ndarray:
        """Ids of the nodes on one layer, in ascending order."""
        return np.flatnonzero(self.layer == layer)

    def leaves_under(self, node: int) -> np.ndarray:
        """Leaf ids below a node (the node itself for a leaf), left to right."""
        leaves = leaves_under(node, self.children.__getitem__, lambda n: not self.children[n])
        return np.asarray(leaves, dtype=np.int64)

    def leaf_depths(self) -> np.ndarray:
        """Number of edges from each leaf up to the top of its ancestor chain."""
        steps = np.zeros(self.n_leaves, dtype=np.int64)
        current = np.arange(self.n_leaves, dtype=np.int64)
        for _ in range(self.n_nodes):
            up = self.parent[current]
            alive = up >= 0
            if not alive.any():
                break
            steps += alive
            current = np.where(alive, up, current)
        return steps

    def problems(self, max_children: int, min_children: int = 2) -> list[str]:
        """Every broken invariant, described in one line each; empty for a valid tree (a
        partitioned tree lifts short partitions by nodes of one child: min_children 1)."""
        found: list[str] = []
        n_nodes = self.n_nodes
        if len(self.children) != n_nodes or self.layer.shape[0] != n_nodes:
            return [f"parent, children and layer lengths differ ({n_nodes}, "
                    f"{len(self.children)}, {self.layer.shape[0]})"]
        roots = np.flatnonzero(self.parent < 0)
        if roots.tolist() != [self.root]:
            found.append(f"roots are {roots.tolist()[:10]}, expected only {self.root}")
        if self.n_leaves < 1 or self.n_leaves > n_nodes:
            found.append(f"n_leaves {self.n_leaves} does not fit {n_nodes} nodes")
            return found
        for node in range(n_nodes):
            kids = self.children[node]
            if node < self.n_leaves:
                if kids:
                    found.append(f"leaf {node} has children")
                if self.layer[node] != 0:
                    found.append(f"leaf {node} is on layer {self.layer[node]}")
                continue
            if not min_children <= len(kids) <= max_children:
                found.append(f"node {node} has {len(kids)} children "
                             f"(allowed {min_children}..{max_children})")
            for kid in kids:
                if self.parent[kid] != node:
                    found.append(f"child {kid} of {node} has parent {self.parent[kid]}")
                if self.layer[kid] != self.layer[node] - 1:
                    found.append(f"child {kid} of {node} is not one layer below it")
        counted = sum(len(kids) for kids in self.children)
        if counted != n_nodes - 1:
            found.append(f"{counted} child links for {n_nodes} nodes (expected {n_nodes - 1})")
        if found:
            return found
        reached = np.zeros(n_nodes, dtype=bool)
        stack = [self.root]
        while stack:
            node = stack.pop()
            if reached[node]:
                found.append(f"node {node} is reached twice")
                return found
            reached[node] = True
            stack.extend(self.children[node])
        if not reached.all():
            found.append(f"{int((~reached).sum())} nodes are not reachable from the root")
        elif not self.is_equi_depth():
            found.append("leaves are not all at the root's depth")
        return found

    def is_equi_depth(self) -> bool:
        """True when every leaf is on layer 0 and exactly `depth` edges below the root."""
        if np.any(self.layer[: self.n_leaves] != 0):
            return False
        return bool(np.all(self.leaf_depths() == self.depth))

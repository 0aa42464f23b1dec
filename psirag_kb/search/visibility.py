"""What of the tree one person may see: a node only when they may read every leaf below it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from psirag_kb.storage.scope import Scope
from psirag_kb.tree.index import scope_counts
from psirag_kb.tree.view import TreeView


class Visibility:
    """Per-node checks for one person over one published view of the tree.

    A node is visible when every leaf below it is readable, so its abstract (made from those
    leaves' text) tells them nothing they may not read. Each check is O(1) once the scope's
    leaves have been counted per node (one pass over the readable chunk ids, made on first use);
    a tree partitioned at grant boundaries can answer from the partition instead.
    """

    def __init__(self, view: TreeView, scope: Scope) -> None:
        self.view = view
        self.scope = scope
        self._held: dict[int, int] | None = None

    @property
    def held(self) -> dict[int, int]:
        """Readable leaves below each abstract node that has any."""
        if self._held is None:
            self._held = scope_counts(self.view, self.scope)
        return self._held

    def leaf(self, chunk_id: int) -> bool:
        """Whether the person may read this chunk."""
        return bool(self.scope.contains(np.array([chunk_id], np.int64))[0])

    def node(self, key: int) -> bool:
        """Whether every leaf below a node (or the leaf, for a negative key) is readable."""
        if key < 0:
            return self.leaf(-key)
        info = self.view.nodes.get(key)
        return info is not None and self.held.get(key, 0) == info.leaves

    def some(self, key: int) -> bool:
        """Whether any leaf below a node (or the leaf itself) is readable."""
        return self.leaf(-key) if key < 0 else self.held.get(key, 0) > 0

    def status(self) -> dict[str, Any]:
        """The tree's shape as this person sees it: readable leaves and visible nodes."""
        view = self.view
        if view.root is None:
            return {"depth": 0, "leaves": 0, "abstract_nodes": 0, "nodes_per_layer": [],
                    "dirty": 0}
        seen = [view.nodes[n] for n, held in self.held.items() if held == view.nodes[n].leaves]
        layers = Counter(info.layer for info in seen)
        leaves = int(view.has_leaf(-view.root) and self.leaf(-view.root)) if view.root < 0 else (
            sum(held for n, held in self.held.items() if view.nodes[n].layer == 1))
        depth = max(layers, default=0)
        return {"depth": depth, "leaves": leaves, "abstract_nodes": len(seen),
                "nodes_per_layer": [leaves] + [layers[n] for n in range(1, depth + 1)],
                "dirty": sum(info.dirty for info in seen)}

    def tops(self) -> list[int]:
        """The highest visible keys, left to right: what a virtual root lists when the real one
        is not visible (only the nodes above a readable leaf are walked)."""
        root = self.view.root
        if root is None:
            return []
        out: list[int] = []
        stack = [root]
        while stack:
            key = stack.pop()
            if self.node(key):
                out.append(key)
            elif key > 0 and self.some(key):
                stack.extend(reversed(self.view.nodes[key].children))
        return out

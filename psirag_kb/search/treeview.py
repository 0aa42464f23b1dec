"""An immutable view of the tree for readers, and what people see of it: nodes and paths."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from psirag_kb.errors import KBError, NodeNotFound
from psirag_kb.storage.store import Hit
from psirag_kb.tree.live import LiveTree
from psirag_kb.tree.model import Tree


@dataclass(frozen=True)
class TreeView:
    """The tree as it was after one commit: arrays to search, abstracts and dirty flags to show.

    Built by the writer after each commit and swapped in whole; readers never see a half edit.
    """

    tree: Tree | None
    chunk_ids: np.ndarray
    """Chunk id of each leaf row."""
    vectors: np.ndarray
    """Centroid vector of each row (leaves first)."""
    guided: np.ndarray | None
    """Vectors with abstract embeddings where nodes have them (when configured)."""
    keys: np.ndarray
    """Live-tree key of each row (-chunk id for leaves)."""
    row: dict[int, int]
    abstracts: dict[int, str]
    dirty: frozenset[int]
    leaf_counts: np.ndarray

    @classmethod
    def empty(cls, dim: int) -> TreeView:
        """The view of a tree with no leaves."""
        return cls(None, np.zeros(0, np.int64), np.zeros((0, dim), np.float32), None,
                   np.zeros(0, np.int64), {}, {}, frozenset(), np.zeros(0, np.int64))

    @classmethod
    def of(cls, live: LiveTree, guided: bool = False) -> TreeView:
        """A view of the live tree as it is now (call on the writer thread)."""
        if live.root is None:
            return cls.empty(live.dim)
        tree, chunk_ids, vectors, keys = live.snapshot()
        guided_vectors = None
        if guided:
            guided_vectors = vectors.copy()
            found = live.abstract_vectors
            for row in range(tree.n_leaves, tree.n_nodes):
                vector = found.get(int(keys[row]))
                if vector is not None:
                    guided_vectors[row] = vector
        counts = np.zeros(tree.n_nodes, np.int64)
        counts[: tree.n_leaves] = 1
        for layer in range(tree.depth):
            rows = np.flatnonzero(tree.layer == layer)
            rows = rows[tree.parent[rows] >= 0]
            np.add.at(counts, tree.parent[rows], counts[rows])
        return cls(tree, chunk_ids, vectors, guided_vectors, keys,
                   {int(k): i for i, k in enumerate(keys.tolist())}, dict(live.abstracts),
                   frozenset(live.dirty), counts)

    @property
    def is_empty(self) -> bool:
        """Whether the tree has no leaves."""
        return self.tree is None

    def key(self, row: int) -> int:
        """Live-tree key of a row."""
        return int(self.keys[row])

    def parent_key(self, row: int) -> int | None:
        """Key of a row's parent (None for the root)."""
        assert self.tree is not None
        up = int(self.tree.parent[row])
        return None if up < 0 else self.key(up)


def node_view(
    view: TreeView, node_id: int | None, hits: Callable[[Iterable[int]], dict[int, Hit]]
) -> dict[str, Any]:
    """One abstract node (the root by default): its abstract and its children."""
    tree = view.tree
    if tree is None:
        raise KBError("the tree is empty: ingest some documents first")
    root = view.key(tree.root)
    node = root if node_id is None else int(node_id)
    lone = node_id is None and node < 0  # one chunk and no abstract node yet: show it as a child
    if not lone and (node <= 0 or node not in view.row):
        if node < 0 and node in view.row:
            raise NodeNotFound(f"{node_id} is a leaf, not an abstract node")
        raise NodeNotFound(
            f"no tree node {node_id}; `psirag-kb tree` shows the root and its children"
        )
    row = view.row[node]
    kids = [node] if lone else [view.key(c) for c in tree.children[row]]
    leaf_ids = [-k for k in kids if k < 0]
    found = hits(leaf_ids) if leaf_ids else {}
    children = []
    for kid in kids:
        if kid < 0:
            hit = found.get(-kid)
            children.append({
                "id": -kid, "kind": "leaf", "leaves": 1,
                "abstract": hit.text if hit else "",
                "source": hit.source if hit else None,
                "lines": [hit.line_first, hit.line_last]
                if hit and hit.line_first is not None else None,
            })
        else:
            children.append({
                "id": kid, "kind": "node", "leaves": int(view.leaf_counts[view.row[kid]]),
                "abstract": view.abstracts.get(kid, ""), "dirty": kid in view.dirty,
            })
    if lone:
        return {"id": 0, "layer": 1, "abstract": "", "dirty": False, "parent": None,
                "leaves": 1, "children": children}
    return {
        "id": node,
        "layer": int(tree.layer[row]),
        "abstract": view.abstracts.get(node, ""),
        "dirty": node in view.dirty,
        "parent": view.parent_key(row),
        "leaves": int(view.leaf_counts[row]),
        "children": children,
    }


def path_view(view: TreeView, chunk_id: int) -> list[dict[str, Any]]:
    """The abstract nodes above a chunk's leaf, root first: id, layer, abstract, dirty."""
    key = -int(chunk_id)
    if chunk_id <= 0 or view.tree is None or key not in view.row:
        raise NodeNotFound(f"chunk {chunk_id} is not in the tree; run the query again")
    tree, out = view.tree, []
    row = int(tree.parent[view.row[key]])
    while row >= 0:
        node = view.key(row)
        out.append({"id": node, "layer": int(tree.layer[row]),
                    "abstract": view.abstracts.get(node, ""), "dirty": node in view.dirty})
        row = int(tree.parent[row])
    return out[::-1]

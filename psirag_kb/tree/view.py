"""An immutable view of the tree for readers, patched per commit, and what people see of it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from psirag_kb.errors import NodeNotFound, TreeEmpty
from psirag_kb.storage.records import Hit
from psirag_kb.tree.live import LiveTree, is_leaf_key
from psirag_kb.tree.model import leaves_under


@dataclass(frozen=True)
class NodeInfo:
    """One abstract node as readers see it."""

    parent: int | None
    layer: int
    children: tuple[int, ...]
    """Child keys in order (-chunk id for leaves)."""
    vector: np.ndarray
    """Mean of the children (the centroid)."""
    guided: np.ndarray
    """The abstract's embedding where the node has one, else the centroid."""
    abstract: str
    dirty: bool
    leaves: int
    label: str = ""
    """The display label ("" until one is written: show the abstract then)."""


@dataclass(frozen=True)
class TreeView:
    """The tree as it was after one commit; readers never see a half edit.

    The writer makes the next view from this one and the commit's changed nodes: a shallow copy
    of the node table and of one integer array, so a commit costs what it changed, not the tree.
    """

    root: int | None
    nodes: dict[int, NodeInfo]
    leaf_parent: np.ndarray
    """Parent node of each chunk id that is a leaf (0 otherwise)."""
    n_leaves: int
    dirty: int

    @classmethod
    def empty(cls) -> TreeView:
        """The view of a tree with no leaves."""
        return cls(None, {}, np.zeros(0, np.int64), 0, 0)

    @classmethod
    def full(cls, live: LiveTree) -> TreeView:
        """A view of the whole live tree (after a build or a load; call on the writer)."""
        if live.root is None:
            return cls.empty()
        nodes: dict[int, NodeInfo] = {}
        for node in sorted(live.children, key=live.level):
            nodes[node] = _info(live, node, nodes)
        ids: list[int] = []
        parents: list[int] = []
        for node, kids in live.children.items():
            if live.layer[node] == 1:
                ids.extend(-k for k in kids)
                parents.extend([node] * len(kids))
        size = max(ids, default=0) + 1
        if live.root < 0:
            size = max(size, -live.root + 1)
        leaf_parent = np.zeros(size, np.int64)
        leaf_parent[np.asarray(ids, np.int64)] = np.asarray(parents, np.int64)
        return cls(live.root, nodes, leaf_parent, live.n_leaves, len(live.dirty))

    def patched(self, live: LiveTree, touched: set[int], dropped: set[int]) -> TreeView:
        """The view after a commit that touched and dropped these keys (call on the writer)."""
        if live.root is None:
            return TreeView.empty()
        nodes = dict(self.nodes)
        for key in dropped:
            if key > 0:
                nodes.pop(key, None)
        leaf_ids = [-k for k in touched | dropped if k < 0]
        size = max(max(leaf_ids, default=0) + 1, len(self.leaf_parent))
        leaf_parent = np.zeros(size + size // 4 if size > len(self.leaf_parent) else size,
                               np.int64)
        leaf_parent[: len(self.leaf_parent)] = self.leaf_parent
        for chunk_id in leaf_ids:
            leaf_parent[chunk_id] = live.parent.get(-chunk_id, 0)
        for node in sorted((k for k in touched if k > 0 and k in live.children),
                           key=live.level):
            nodes[node] = _info(live, node, nodes)
        return TreeView(live.root, nodes, leaf_parent, live.n_leaves, len(live.dirty))

    @property
    def depth(self) -> int:
        """Layer of the root (0 for one leaf or none)."""
        return 0 if self.root is None or self.root < 0 else self.nodes[self.root].layer

    def leaves_under(self, node: int) -> list[int]:
        """Chunk ids below a node of the view, left to right."""
        keys = leaves_under(node, lambda n: self.nodes[n].children, is_leaf_key)
        return [-key for key in keys]

    def parents_of(self, chunk_ids: np.ndarray) -> np.ndarray:
        """Parent node of each chunk id (0 for none, or for a chunk that is not a leaf)."""
        ids = np.asarray(chunk_ids, np.int64)
        out = np.zeros(len(ids), np.int64)
        inside = (ids > 0) & (ids < len(self.leaf_parent))
        out[inside] = self.leaf_parent[ids[inside]]
        return out

    def has_leaf(self, chunk_id: int) -> bool:
        """Whether a chunk is a leaf in this view."""
        if self.root is not None and self.root == -chunk_id:
            return True
        return 0 < chunk_id < len(self.leaf_parent) and self.leaf_parent[chunk_id] > 0

    def nodes_per_layer(self) -> list[int]:
        """Node counts by layer, leaves first."""
        if self.root is None:
            return []
        counts = Counter(info.layer for info in self.nodes.values())
        return [self.n_leaves] + [counts[layer] for layer in range(1, self.depth + 1)]

    def is_equi_depth(self) -> bool:
        """Whether every node sits one layer below its parent and leaves hang from layer 1."""
        for info in self.nodes.values():
            if info.parent is not None and self.nodes[info.parent].layer != info.layer + 1:
                return False
            if (info.layer == 1) != (info.children[0] < 0):
                return False
        return True


def _info(live: LiveTree, node: int, done: dict[int, NodeInfo]) -> NodeInfo:
    """A node's entry; its abstract children's entries must already be in `done`."""
    kids = tuple(live.children[node])
    vector = live.vectors[node]
    guided = live.abstract_vectors.get(node)
    layer = live.layer[node]
    return NodeInfo(
        parent=live.parent.get(node), layer=layer, children=kids, vector=vector,
        guided=vector if guided is None else guided, abstract=live.abstracts.get(node, ""),
        dirty=node in live.dirty, label=live.labels.get(node, ""),
        leaves=len(kids) if layer == 1 else sum(done[kid].leaves for kid in kids),
    )


class Visible(Protocol):
    """Per-node checks of what one person may see (see `search/visibility.py`)."""

    def node(self, key: int) -> bool: ...
    def tops(self) -> list[int]: ...


def node_view(
    view: TreeView, node_id: int | None, hits: Callable[[Iterable[int]], dict[int, Hit]],
    visible: Visible | None = None,
) -> dict[str, Any]:
    """One abstract node (the root by default): its abstract and its children; with `visible`,
    only what the person may see (a node they may not see is not found, and the root is a
    virtual one listing the highest nodes they may see when they may not see the real one)."""
    if view.root is None:
        raise TreeEmpty("there is no topic tree yet: it is built when the first ingest of the "
                        "documents ends (search works meanwhile)")
    node = view.root if node_id is None else int(node_id)
    if visible is not None and node_id is None and not visible.node(node):
        return _virtual_root(view, visible.tops(), hits)
    lone = node_id is None and node < 0  # one chunk and no abstract node yet: show it as a child
    if (not lone and (node <= 0 or node not in view.nodes)) or (
            visible is not None and not visible.node(node)):
        if node < 0 and view.has_leaf(-node) and (visible is None or visible.node(node)):
            raise NodeNotFound(f"{node_id} is a leaf, not an abstract node")
        raise NodeNotFound(
            f"no tree node {node_id}; `psirag-kb tree` shows the root and its children"
        )
    kids = [node] if lone else list(view.nodes[node].children)
    children = _children(view, kids, hits)
    if lone:
        return {"id": 0, "layer": 1, "abstract": "", "label": "", "dirty": False, "parent": None,
                "leaves": 1, "children": children}
    info = view.nodes[node]
    return {
        "id": node,
        "layer": info.layer,
        "abstract": info.abstract,
        "label": info.label or info.abstract,
        "dirty": info.dirty,
        "parent": None if visible is not None and info.parent is not None
        and not visible.node(info.parent) else info.parent,
        "leaves": info.leaves,
        "children": children,
    }


def _virtual_root(view: TreeView, kids: list[int],
                  hits: Callable[[Iterable[int]], dict[int, Hit]]) -> dict[str, Any]:
    """A root without an abstract over the highest nodes one person may see (id 0)."""
    children = _children(view, kids, hits)
    layer = max((view.nodes[k].layer for k in kids if k > 0), default=0) + 1
    return {"id": 0, "layer": layer, "abstract": "", "label": "", "dirty": False, "parent": None,
            "leaves": sum(c["leaves"] for c in children), "children": children}


def _children(view: TreeView, kids: list[int],
              hits: Callable[[Iterable[int]], dict[int, Hit]]) -> list[dict[str, Any]]:
    """The entries of a node's children: abstract nodes, and leaves with their text."""
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
                "location": hit.location if hit else None,
            })
        else:
            info = view.nodes[kid]
            children.append({
                "id": kid, "kind": "node", "leaves": info.leaves,
                "abstract": info.abstract, "label": info.label or info.abstract,
                "dirty": info.dirty,
            })
    return children


def path_view(view: TreeView, chunk_id: int,
              visible: Visible | None = None) -> list[dict[str, Any]]:
    """The abstract nodes above a chunk's leaf, root first: id, layer, abstract, dirty; with
    `visible`, only the nodes the person may see (a leaf they may not read is not found)."""
    if chunk_id <= 0 or not view.has_leaf(chunk_id) or (
            visible is not None and not visible.node(-chunk_id)):
        raise NodeNotFound(f"chunk {chunk_id} is not in the tree; run the query again")
    out = []
    node = int(view.parents_of(np.array([chunk_id]))[0]) or None
    while node is not None and (visible is None or visible.node(node)):
        info = view.nodes[node]
        out.append({"id": node, "layer": info.layer, "abstract": info.abstract,
                    "label": info.label or info.abstract, "dirty": info.dirty})
        node = info.parent
    return out[::-1]

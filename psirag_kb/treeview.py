"""Read-only views of the live tree for people: a node with its children, a chunk's ancestors."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .errors import KBError, NodeNotFound
from .store import Hit
from .tree.live import LiveTree


def node_view(
    live: LiveTree, node_id: int | None, hits: Callable[[Iterable[int]], dict[int, Hit]]
) -> dict[str, Any]:
    """One abstract node (the root by default): its abstract and its children."""
    if live.root is None:
        raise KBError("the tree is empty: ingest some documents first")
    node = live.root if node_id is None else int(node_id)
    lone = node_id is None and node < 0  # one chunk and no abstract node yet: show it as a child
    if not lone and (node < 0 or node not in live.children):
        if node < 0 and node in live.vectors:
            raise NodeNotFound(f"{node_id} is a leaf, not an abstract node")
        raise NodeNotFound(
            f"no tree node {node_id}; `psirag-kb tree` shows the root and its children"
        )
    kids = [node] if lone else live.children[node]
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
                "id": kid, "kind": "node", "leaves": len(live.leaves_under(kid)),
                "abstract": live.abstracts.get(kid, ""), "dirty": kid in live.dirty,
            })
    if lone:
        return {"id": 0, "layer": 1, "abstract": "", "dirty": False, "parent": None,
                "leaves": 1, "children": children}
    return {
        "id": node,
        "layer": live.level(node),
        "abstract": live.abstracts.get(node, ""),
        "dirty": node in live.dirty,
        "parent": live.parent.get(node),
        "leaves": len(live.leaves_under(node)),
        "children": children,
    }


def path_view(live: LiveTree, chunk_id: int) -> list[dict[str, Any]]:
    """The abstract nodes above a chunk's leaf, root first: id, layer, abstract, dirty."""
    key = -int(chunk_id)
    if chunk_id <= 0 or (key not in live.parent and key != live.root):
        raise NodeNotFound(f"chunk {chunk_id} is not in the tree; run the query again")
    return [
        {"id": node, "layer": live.level(node), "abstract": live.abstracts.get(node, ""),
         "dirty": node in live.dirty}
        for node in reversed(live.ancestors(key))
    ]

"""A topic map: a node, its children and theirs, each with its size, label, abstract and the
files a bounded sample of its passages comes from, as far as one person may see."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from psirag_kb.storage.records import Hit
from psirag_kb.tree.view import TreeView, Visible, node_view

SAMPLE = 2_000
"""Passages sampled for the whole map (spread over its smallest drawn areas)."""
MOST_PER_AREA = 64
"""The most passages sampled for one area."""
FILES = 3
"""Files named for each area."""


def topic_map(view: TreeView, node_id: int | None,
              hits: Callable[[Iterable[int]], dict[int, Hit]],
              files_of: Callable[[Iterable[int]], dict[int, tuple[str, float]]],
              visible: Visible | None = None, budget: int = SAMPLE) -> dict[str, Any]:
    """The node (`node_view`: what the person may not see is not found), its children, and
    the children of its abstract children, each with `files` (the largest among a sample of
    its passages, with estimated passages), `path` (the file most of the sample is from) and
    `changed` (the newest modification time in the sample); `trail`: the visible nodes above.
    The work is bounded by the nodes drawn and `budget`, never by the passages below."""
    top = node_view(view, node_id, hits, visible)
    for child in top["children"]:
        if child["kind"] == "node":
            kids = view.nodes[child["id"]].children
            child["children"] = [_area(view, kid) for kid in kids if kid > 0]
    smallest = [g for c in top["children"] for g in c.get("children") or [c]] or [top]
    each = max(1, min(MOST_PER_AREA, budget // max(1, len(smallest))))
    samples = {id(area): _sample(view, _key(area), each) for area in smallest}
    for child in top["children"]:
        if child.get("children"):
            samples[id(child)] = [i for g in child["children"] for i in samples[id(g)]]
    samples[id(top)] = [i for c in top["children"] for i in samples.get(id(c), [])]
    found = files_of({i for ids in samples.values() for i in ids})
    for area in [top, *top["children"], *(g for c in top["children"]
                                          for g in c.get("children") or [])]:
        _describe(area, [found[i] for i in samples.get(id(area), []) if i in found])
    top["trail"] = _trail(view, top, visible)
    return top


def _key(area: dict[str, Any]) -> int:
    """The tree key of an area (a leaf's is minus its chunk id)."""
    return -int(area["id"]) if area.get("kind") == "leaf" else int(area["id"])


def _area(view: TreeView, key: int) -> dict[str, Any]:
    """An abstract node as a map area."""
    info = view.nodes[key]
    return {"id": key, "kind": "node", "leaves": info.leaves, "abstract": info.abstract,
            "label": info.label or info.abstract, "dirty": info.dirty}


def _sample(view: TreeView, key: int, want: int) -> list[int]:
    """Up to `want` chunk ids below a key, spread over its branches in proportion to their
    passages (visits at most `want` nodes per layer)."""
    if key <= 0:
        return [-key] if key < 0 else []
    out: list[int] = []
    stack = [(key, want)]
    while stack:
        node, wanted = stack.pop()
        kids = view.nodes[node].children
        leaves = [-k for k in kids if k < 0]
        if leaves:
            step = len(leaves) / min(wanted, len(leaves))
            out.extend(leaves[int(i * step)] for i in range(min(wanted, len(leaves))))
            continue
        total = max(1, view.nodes[node].leaves)
        sizes = [(view.nodes[k].leaves, k) for k in kids]
        shares = [(wanted * size // total, k) for size, k in sizes]
        left = wanted - sum(s for s, _ in shares)
        for _, k in sorted(sizes, reverse=True)[:left]:
            shares.append((1, k))
        given: Counter[int] = Counter()
        for share, k in shares:
            given[k] += share
        stack.extend((k, n) for k, n in given.items() if n > 0)
    return out


def _describe(area: dict[str, Any], files: list[tuple[str, float]]) -> None:
    """Set an area's files, main path and newest change from its sample's files."""
    counts = Counter(path for path, _ in files)
    scale = area["leaves"] / max(1, len(files))
    area["files"] = [{"path": p, "passages": max(1, round(n * scale))}
                     for p, n in counts.most_common(FILES)]
    area["path"] = area["files"][0]["path"] if area["files"] else (area.get("source") or "")
    area["changed"] = max((mtime for _, mtime in files), default=0.0)


def _trail(view: TreeView, top: dict[str, Any], visible: Visible | None) -> list[dict[str, Any]]:
    """The visible nodes above the map's node, root first."""
    out: list[dict[str, Any]] = []
    parent = top.get("parent")
    while parent is not None and parent in view.nodes and (
            visible is None or visible.node(parent)):
        info = view.nodes[parent]
        out.append({"id": parent, "label": info.label or info.abstract})
        parent = info.parent
    return out[::-1]

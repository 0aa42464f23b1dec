"""Global questions ("what is this about?") answered from the tree's top layers, and leaves
picked for coverage of its top branches (the Ψ-RAG idea: upper layers summarise everything)."""

from __future__ import annotations

import re
from typing import Any

from psirag_kb.tree.view import TreeView

MAX_BRANCHES = 12
"""Top branches an overview lists."""
MIN_BRANCHES = 4
"""Fewer top branches than this are opened one layer down (when it does not pass
MAX_BRANCHES)."""
TOPICS_PER_BRANCH = 4
"""Labels of a branch's own children shown with it."""
LABEL_PHRASES = 5
"""Phrases of a label shown per node."""

_COLLECTION = (r"(?:the|this|these|my|our|that|all(?:\s+the)?)\s+(?:whole\s+|entire\s+)?"
               r"(?:knowledge\s+base|kb|collection|corpus|folder|directory|docs|documents?"
               r"|files?|data|library|archive)\b")
"""The collection or a folder, as a question names it ("this knowledge base", "the folder")."""
_GLOBAL = re.compile(
    rf"\b(?:what(?:'s|\s+is|\s+are)?\s+{_COLLECTION}.*\babout"
    r"|what(?:'s|\s+is)\s+(?:this|it)\s+(?:all\s+)?about"
    r"|(?:what|which)\s+(?:main\s+)?(?:topics|subjects|themes|areas)\b(?!.*\b(?:of|in|about)"
    r"\s+(?!(?:the|this|these|my|our)\b))"
    rf"|summari[sz]e\s+(?:{_COLLECTION}|everything|it\s+all)"
    rf"|overview\s+of\s+(?:{_COLLECTION}|everything)"
    r"|(?:give|show)\s+(?:me\s+)?an?\s+overview\s*[.?!]*$"
    rf"|what(?:'s|\s+is)\s+in\s+{_COLLECTION})",
    re.IGNORECASE,
)


def is_global(question: str) -> bool:
    """Whether a question asks about the whole collection or a folder, not a fact in it."""
    return bool(_GLOBAL.search(" ".join(question.split())))


def _kids(view: TreeView, key: int, visible: Any | None) -> list[int]:
    """A node's children the person may see (all of them without `visible`)."""
    kids = list(view.nodes[key].children) if key > 0 else []
    return kids if visible is None else [k for k in kids if visible.node(k)]


def branches(view: TreeView, visible: Any | None = None) -> list[int]:
    """The top branches: the root's children that are nodes (the highest nodes the person may
    see, for one who may not see the root), largest first, at most MAX_BRANCHES."""
    root = view.root
    if root is None:
        return []
    if root < 0:
        return []
    if visible is not None and not visible.node(root):
        tops = visible.tops()
    else:
        tops = [k for k in _kids(view, root, visible) if k > 0] or [root]
    tops = [k for k in tops if k > 0]
    while len(tops) < MIN_BRANCHES:
        opened = [c for k in tops for c in (
            [n for n in _kids(view, k, visible) if n > 0] or [k])]
        if len(opened) == len(tops) or len(opened) > MAX_BRANCHES:
            break
        tops = opened
    return sorted(tops, key=lambda k: -view.nodes[k].leaves)[:MAX_BRANCHES]


def _label(view: TreeView, key: int) -> str:
    """A node's label (or abstract), cut to its first LABEL_PHRASES phrases."""
    info = view.nodes[key]
    return ", ".join((info.label or info.abstract).split(", ")[:LABEL_PHRASES])


def overview(view: TreeView, visible: Any | None = None) -> list[dict[str, Any]]:
    """The top branches with their labels, abstracts, sizes and their children's labels."""
    out = []
    for key in branches(view, visible):
        info = view.nodes[key]
        topics = [_label(view, k) for k in _kids(view, key, visible) if k > 0]
        topics.sort(key=len)
        out.append({"node": key, "layer": info.layer, "label": _label(view, key),
                    "abstract": info.abstract, "leaves": info.leaves,
                    "topics": topics[:TOPICS_PER_BRANCH]})
    return out


def overview_text(entries: list[dict[str, Any]]) -> str:
    """The overview written without an LLM: each branch's label, size and topics, cited [n]."""
    if not entries:
        return "Nothing is indexed yet."
    total = sum(e["leaves"] for e in entries)
    parts = []
    for number, entry in enumerate(entries, start=1):
        topics = "; ".join(entry["topics"])
        files = ", ".join(entry.get("files", []))
        parts.append(f"{entry['label'] or 'untitled'} ({entry['leaves']} passages"
                     f"{': ' + topics if topics else ''}{'; from ' + files if files else ''})"
                     f" [{number}]")
    return f"{total} passages in {len(entries)} main topics: " + ". ".join(parts) + "."


def coverage_leaves(view: TreeView, k: int, visible: Any | None = None) -> dict[int, list[int]]:
    """k leaf chunk ids spread over the top branches in proportion to their size (at least
    one each), each branch's share spread again over its children down to the leaves, per
    branch: a cost of k times the depth, never a scan of the leaves."""
    tops = branches(view, visible)
    if not tops:
        root = view.root
        return {0: [-root]} if root is not None and root < 0 else {}
    return {key: _spread(view, key, share, visible) for key, share in
            zip(tops, _shares([view.nodes[t].leaves for t in tops], k), strict=True)}


def _shares(sizes: list[int], k: int) -> list[int]:
    """k split in proportion to sizes, at least one each while k lasts (largest first)."""
    shares = [0] * len(sizes)
    total = sum(sizes) or 1
    left = k
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        if left <= 0:
            break
        shares[i] = 1
        left -= 1
    exact = [k * s / total for s in sizes]
    while left > 0:
        i = max(range(len(sizes)), key=lambda i: exact[i] - shares[i])
        shares[i] += 1
        left -= 1
    return shares


def _spread(view: TreeView, key: int, share: int, visible: Any | None) -> list[int]:
    """`share` leaves under one node, spread over its children."""
    if share <= 0:
        return []
    kids = _kids(view, key, visible)
    leaves = [-k for k in kids if k < 0]
    nodes = [k for k in kids if k > 0]
    if not nodes:
        step = max(len(leaves) / share, 1.0)
        return [leaves[int(i * step)] for i in range(min(share, len(leaves)))]
    out: list[int] = []
    for kid, part in zip(nodes, _shares([view.nodes[n].leaves for n in nodes], share),
                         strict=True):
        out.extend(_spread(view, kid, part, visible))
    return out

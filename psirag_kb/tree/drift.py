"""Drift: how much worse an incrementally grown subtree is than a local rebuild, and the rebuild."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from psirag_kb.tree.build import build_tree
from psirag_kb.tree.model import Tree

if TYPE_CHECKING:
    from psirag_kb.tree.live import LiveTree


def cut_to_height(tree: Tree, height: int) -> Tree | None:
    """Keep layers below `height` and hang that layer's top nodes under one new root.

    The result has exactly `height` layers above the leaves, so it can replace a subtree of that
    height in an equi-depth tree; None when the tree is not tall enough.
    """
    if tree.depth < height:
        return None
    if tree.depth == height:
        return tree
    keep = np.flatnonzero(tree.layer < height)
    tops = np.flatnonzero(tree.layer == height - 1)
    index = np.full(tree.n_nodes, -1, dtype=np.int64)
    index[keep] = np.arange(len(keep))
    root = len(keep)
    parent = np.append(np.where(tree.layer[keep] == height - 1, root, index[tree.parent[keep]]), -1)
    children = [[int(index[c]) for c in tree.children[node]] for node in keep.tolist()]
    children.append(index[tops].tolist())
    layer = np.append(tree.layer[keep], height).astype(np.int32)
    return Tree(tree.n_leaves, parent.astype(np.int64), children, layer, root)


def neighbour_cost(tree: Tree, vectors: np.ndarray, k: int = 5) -> float:
    """Dasgupta's cost on the k-nearest-neighbour graph, per edge: the mean leaf count of the
    lowest common ancestor of each leaf and its k most similar leaves (lower is better)."""
    n = tree.n_leaves
    k = min(k, n - 1)
    if k < 1:
        return 0.0
    x = np.asarray(vectors, dtype=np.float32)
    neighbours = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, 1024):
        block = x[start:start + 1024] @ x.T
        rows = np.arange(block.shape[0])
        block[rows, start + rows] = -np.inf
        neighbours[start:start + 1024] = np.argpartition(-block, k - 1, axis=1)[:, :k]
    sizes = np.zeros(tree.n_nodes, dtype=np.int64)
    sizes[:n] = 1
    ancestors = [np.arange(n)]
    for _ in range(tree.depth):
        ancestors.append(tree.parent[ancestors[-1]])
    for node in np.argsort(tree.layer, kind="stable").tolist():
        if tree.parent[node] >= 0:
            sizes[tree.parent[node]] += sizes[node]
    cost = np.zeros((n, k), dtype=np.float64)
    found = np.zeros((n, k), dtype=bool)
    for level in ancestors[1:]:
        same = (level[:, None] == level[neighbours]) & ~found
        cost[same] = np.broadcast_to(sizes[level][:, None], (n, k))[same]
        found |= same
    return float(cost.mean())


def local_rebuild(
    current: Tree, leaf_vectors: np.ndarray, max_children: int, mode: str = "exact"
) -> tuple[Tree, float] | None:
    """A rebuilt tree of the same height over the same leaves, and the drift ratio.

    The ratio is the current subtree's neighbour cost over the rebuilt one's: above 1, the
    subtree groups similar leaves worse than a fresh Algorithm 1 build would. The rebuild is cut
    to the current height so it fits in place; None when it cannot be made that tall.
    """
    if current.n_leaves < 3:
        return None
    rebuilt = cut_to_height(
        build_tree(leaf_vectors, mode=mode, max_children=max_children), current.depth
    )
    if rebuilt is None:
        return None
    now = neighbour_cost(current, leaf_vectors)
    best = neighbour_cost(rebuilt, leaf_vectors)
    return rebuilt, (now / best if best > 0 else 1.0)


def repair(
    live: LiveTree, max_children: int, mode: str, tolerance: float, max_leaves: int
) -> dict[str, Any]:
    """Rebuild in place the subtrees (of at most `max_leaves`) that drifted beyond `tolerance`.

    Only subtrees that incremental edits changed since the last check are looked at, so the
    cost follows the edits, not the size of the tree.
    """
    checked = rebuilt = 0
    worst = 1.0
    if live.root is None or live.root < 0:
        return {"checked": 0, "rebuilt": 0, "worst_ratio": 1.0}
    candidates, stack = [], [live.root]
    while stack:
        node = stack.pop()
        if node not in live.edited:
            continue
        if live.join is not None and live.level(node) > live.join:  # never rebuilt across labels
            stack.extend(k for k in live.children[node] if k > 0)
        elif len(live.leaves_under(node)) <= max_leaves:
            candidates.append(node)
        else:
            stack.extend(k for k in live.children[node] if k > 0)
    for node in candidates:
        if node not in live.children or live.level(node) < 2:
            continue
        tree, chunk_ids, vectors = live.subtree(node)
        result = local_rebuild(tree, vectors, max_children, mode)
        checked += 1
        if result is None:
            continue
        replacement, ratio = result
        worst = max(worst, ratio)
        if ratio > 1.0 + tolerance:
            live.replace_subtree(node, replacement, chunk_ids)
            rebuilt += 1
    live.edited.clear()
    return {"checked": checked, "rebuilt": rebuilt, "worst_ratio": round(worst, 4)}

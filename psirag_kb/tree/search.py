"""Algorithm 2: top-down beam search from the upper layers to the leaves."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from psirag_kb.tree.model import Tree


def _top(nodes: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best-scoring nodes, best first (ties keep the given order)."""
    order = np.argsort(-scores, kind="stable")[:k]
    return nodes[order], scores[order]


def _children_of(tree: Tree, nodes: np.ndarray) -> np.ndarray:
    """Children of the given nodes, concatenated in order."""
    kids = [tree.children[int(node)] for node in nodes]
    return np.fromiter((kid for group in kids for kid in group), np.int64)


def start_layer(tree: Tree, k: int) -> int:
    """Highest layer below the root that has at least k nodes (0 when none has)."""
    counts = tree.nodes_per_layer()
    for layer in range(tree.depth - 1, 0, -1):
        if counts[layer] >= k:
            return layer
    return 0


def tree_search(
    tree: Tree,
    vectors: np.ndarray,
    query: np.ndarray,
    *,
    k: int | Sequence[int] = 10,
    k_leaves: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Leaf indices and cosine scores of the best leaves for a query, best first.

    `vectors` are node vectors (n_nodes, d); `k` is one beam width or per-layer widths, top
    layer first (the last one repeats); `k_leaves` defaults to the last width.
    """
    widths = [k] if isinstance(k, int) else [int(w) for w in k]
    if not widths or min(widths) < 1:
        raise ValueError(f"beam widths must be positive, got {k!r}")
    if vectors.shape[0] != tree.n_nodes:
        raise ValueError(f"{vectors.shape[0]} vectors for a tree with {tree.n_nodes} nodes")
    q = np.asarray(query, dtype=np.float32).ravel()
    norm = float(np.linalg.norm(q))
    q = q / norm if norm > 0 else q
    wanted = widths[-1] if k_leaves is None else k_leaves
    layer = start_layer(tree, widths[0])
    nodes = tree.nodes_at_layer(layer) if tree.depth > 0 else np.array([tree.root])
    step = 0
    while True:
        scores = vectors[nodes] @ q
        if layer == 0:
            return _top(nodes, scores, wanted)
        width = widths[min(step, len(widths) - 1)]
        nodes, _ = _top(nodes, scores, width)
        nodes = _children_of(tree, nodes)
        layer -= 1
        step += 1

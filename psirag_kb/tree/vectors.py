"""Vectors of abstract nodes: the normalised mean of their children, bottom-up."""

from __future__ import annotations

import numpy as np

from psirag_kb.tree.model import Tree


def normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), as float32."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


def segment_sum(values: np.ndarray, segments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct segment ids (ascending) and the row sums of values in each of them."""
    order = np.argsort(segments, kind="stable")
    sorted_ids = segments[order]
    if sorted_ids.size == 0:
        return sorted_ids, np.zeros((0, values.shape[1]), dtype=values.dtype)
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    return sorted_ids[starts], np.add.reduceat(values[order], starts, axis=0)


def abstract_vectors(tree: Tree, leaf_vectors: np.ndarray) -> np.ndarray:
    """(n_nodes - n_leaves, d) float32 vectors of the abstract nodes, computed bottom-up."""
    leaf_vectors = np.asarray(leaf_vectors, dtype=np.float32)
    if leaf_vectors.ndim != 2 or leaf_vectors.shape[0] != tree.n_leaves:
        raise ValueError(
            f"leaf vectors of shape {leaf_vectors.shape} do not fit a tree with "
            f"{tree.n_leaves} leaves"
        )
    n = tree.n_leaves
    out = np.zeros((tree.n_nodes - n, leaf_vectors.shape[1]), dtype=np.float32)
    below = np.arange(n)
    values = leaf_vectors
    for _ in range(tree.depth):
        keep = tree.parent[below] >= 0
        below, sums = segment_sum(values[keep], tree.parent[below[keep]])
        values = normalise(sums)
        out[below - n] = values
    return out


def node_vectors(tree: Tree, leaf_vectors: np.ndarray) -> np.ndarray:
    """(n_nodes, d) float32: leaves keep their vectors, abstract nodes get their children's mean."""
    abstract = abstract_vectors(tree, leaf_vectors)
    return np.concatenate([np.asarray(leaf_vectors, dtype=np.float32), abstract])

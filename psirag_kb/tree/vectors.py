"""Vectors of abstract nodes: the normalised mean of their children, bottom-up."""

from __future__ import annotations

import numpy as np

from psirag_kb.tree.model import Tree


def normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), as float32."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


SUM_BLOCK = 65_536
"""Rows summed at a time, so a sum over a million vectors never copies all of them."""


def segment_sum(
    values: np.ndarray, segments: np.ndarray, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct segment ids (ascending) and the row sums of values in each of them.

    `rows` (a boolean mask) limits the sum to some rows. Rows are read in blocks and summed in
    at least float32, so float16 values and huge inputs cost one block of extra memory.
    """
    segments = np.asarray(segments)
    kind = np.result_type(values.dtype, np.float32)
    if rows is not None:
        ids = np.unique(segments[rows])
    else:
        ids = np.unique(segments)
    out = np.zeros((ids.size, values.shape[1]), dtype=kind)
    for start in range(0, segments.shape[0], SUM_BLOCK):
        seg = segments[start:start + SUM_BLOCK]
        block = values[start:start + SUM_BLOCK]
        if rows is not None:
            keep = rows[start:start + SUM_BLOCK]
            seg, block = seg[keep], block[keep]
        if seg.size == 0:
            continue
        order = np.argsort(seg, kind="stable")
        ordered = seg[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        sums = np.add.reduceat(block[order].astype(kind, copy=False), starts, axis=0)
        out[np.searchsorted(ids, ordered[starts])] += sums
    return ids, out


def abstract_vectors(tree: Tree, leaf_vectors: np.ndarray) -> np.ndarray:
    """(n_nodes - n_leaves, d) float32 vectors of the abstract nodes, computed bottom-up."""
    leaf_vectors = np.asarray(leaf_vectors)
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
        up = tree.parent[below]
        below, sums = segment_sum(values, up, rows=up >= 0)  # the root has no parent
        values = normalise(sums)
        out[below - n] = values
    return out


def node_vectors(tree: Tree, leaf_vectors: np.ndarray) -> np.ndarray:
    """(n_nodes, d) float32: leaves keep their vectors, abstract nodes get their children's mean."""
    abstract = abstract_vectors(tree, leaf_vectors)
    return np.concatenate([np.asarray(leaf_vectors, dtype=np.float32), abstract])

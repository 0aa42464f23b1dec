"""The partitioned tree: no node on or below the join layer holds leaves of two labels."""

from __future__ import annotations

import numpy as np
import pytest

from psirag_kb.tree.build import build_tree
from psirag_kb.tree.partition import MIXED, build_partitioned, mixing, node_labels


def clustered(n: int, labels: np.ndarray, seed: int, twins: bool = True) -> np.ndarray:
    """Unit vectors whose nearest neighbours lie in other labels (near-twins across them)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(max(1, n // 3 + 1), 16))
    x = base[np.arange(n) % base.shape[0]] if twins else rng.normal(size=(n, 16))
    x = x + 0.01 * rng.normal(size=x.shape) + 0.001 * labels[:, None]
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("seed", range(12))
def test_no_node_below_the_join_layer_mixes_labels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    labels = rng.integers(-1, int(rng.integers(1, 7)), size=n)
    x = clustered(n, labels, seed)
    tree, join = build_partitioned(x, labels, max_children=int(rng.integers(3, 9)))
    assert tree.problems(40, min_children=1) == []
    assert join >= 1
    assert mixing(tree, labels, join) == []
    marks = node_labels(tree, labels)
    tops = np.flatnonzero(tree.layer == join)
    assert sorted(marks[tops].tolist()) == sorted(np.unique(labels).tolist())  # one top each
    assert np.all(tree.layer[tree.n_leaves:] >= 1)


def test_an_unpartitioned_build_mixes_the_twins() -> None:
    """The failure the partition prevents: near-twins in two labels share low nodes."""
    n = 120
    labels = np.arange(n) % 2
    x = clustered(n, labels, 0)
    tree = build_tree(x, max_children=6)
    assert mixing(tree, labels, 1)
    parted, join = build_partitioned(x, labels, max_children=6)
    assert mixing(parted, labels, join) == []
    assert node_labels(parted, labels)[parted.root] == MIXED


def test_one_label_is_a_plain_build_with_a_pure_root() -> None:
    x = clustered(50, np.zeros(50), 3)
    tree, join = build_partitioned(x, np.zeros(50, np.int64), max_children=5)
    assert join == tree.depth
    assert node_labels(tree, np.zeros(50, np.int64))[tree.root] == 0


def test_labels_must_fit_the_leaves() -> None:
    with pytest.raises(ValueError, match="one label per leaf"):
        build_partitioned(np.eye(3, dtype=np.float32), np.zeros(2))

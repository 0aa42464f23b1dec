"""The partitioned tree: no node on or below the join layer holds leaves of two labels."""

from __future__ import annotations

import numpy as np
import pytest

from psirag_kb.tree.build import build_tree
from psirag_kb.tree.live import LiveTree
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


def live_mixing(live: LiveTree, labels: dict[int, int]) -> list[int]:
    """Nodes of a live tree on or below its join layer that mix labels."""
    tree, keys = live.to_tree()
    leaf_labels = np.array([labels[-int(k)] for k in keys[: tree.n_leaves]], np.int64)
    assert tree.problems(live.max_children, min_children=1) == []
    return mixing(tree, leaf_labels, live.join)


@pytest.mark.parametrize("seed", range(16))
def test_live_edits_keep_partitions_pure(seed: int) -> None:
    """Insertions (near twins of other labels, new labels; by leaf collapse, or as subtrees
    when every new leaf is far) and removals never mix labels."""
    rng = np.random.default_rng(seed)
    n = 80
    labels = {i + 1: int(rng.integers(0, 3)) for i in range(n)}
    x = clustered(n, np.array(list(labels.values())), seed)
    vectors = {i + 1: x[i] for i in range(n)}
    tree, join = build_partitioned(x, np.array(list(labels.values())), max_children=5)
    live = LiveTree.from_tree(tree, np.arange(1, n + 1), x, 5)

    def label_of(ids: np.ndarray) -> np.ndarray:
        return np.array([labels[int(i)] for i in ids], np.int64)

    def nearest(rows: np.ndarray, want=None) -> tuple[np.ndarray, np.ndarray]:
        ids = np.array(sorted(vectors), np.int64)
        if want is not None and seed % 4 == 1:  # the same partition's nearest leaf, at times
            ids = np.array([i for i in ids.tolist() if labels[i] == want[0]] or [1], np.int64)
        scores = rows @ np.stack([vectors[int(i)] for i in ids]).T
        best = np.argmax(scores, axis=1)
        return ids[best], scores[np.arange(len(rows)), best]

    assert live.partition(join, label_of) == 0
    next_id = n + 1
    for _ in range(6):
        count = int(rng.integers(1, 40))
        new = np.arange(next_id, next_id + count)
        next_id += count
        for chunk_id in new.tolist():
            labels[chunk_id] = int(rng.integers(0, 5))  # labels 3 and 4 are new partitions
        twins = x[rng.integers(0, n, size=count)] + 0.001 * rng.normal(size=(count, 16))
        twins = (twins / np.linalg.norm(twins, axis=1, keepdims=True)).astype(np.float32)
        live.insert(new, twins, nearest, threshold=1.01 if seed % 2 else 0.0)
        vectors.update(zip(new.tolist(), twins, strict=True))
        assert live_mixing(live, labels) == []
        gone = rng.choice(sorted(vectors), size=int(rng.integers(1, 10)), replace=False)
        live.remove(gone.tolist())
        for chunk_id in gone.tolist():
            del vectors[chunk_id]
        assert live_mixing(live, labels) == []
    assert set(live.tops) == {labels[c] for c in vectors}


def test_an_unpartitioned_live_tree_puts_a_twin_beside_another_label() -> None:
    """Without labels a new leaf joins its nearest leaf's parent, whatever that leaf's label."""
    x = clustered(40, np.zeros(40), 1)
    labels = {i + 1: 0 for i in range(40)}
    live = LiveTree.from_tree(build_tree(x, max_children=5), np.arange(1, 41), x, 5)
    labels[41] = 1
    live.insert(np.array([41]), x[:1], lambda rows: (np.array([1]), np.ones(1)), threshold=0.0)
    tree, keys = live.to_tree()
    leaf_labels = np.array([labels[-int(k)] for k in keys[: tree.n_leaves]], np.int64)
    assert mixing(tree, leaf_labels, 1)


def test_a_lone_leaf_and_a_leaf_of_another_label_stay_equi_depth() -> None:
    x = clustered(2, np.array([0, 1]), 5)
    live = LiveTree.from_tree(build_tree(x[:1]), np.array([1]), x[:1], 5)
    labels = {1: 0, 2: 1}
    live.partition(1, lambda ids: np.array([labels[int(i)] for i in ids], np.int64))
    live.insert(np.array([2]), x[1:], lambda rows, want=None: (np.array([1]), np.ones(1)), 0.0)
    assert live_mixing(live, labels) == []
    assert live.to_tree()[0].is_equi_depth()


def test_one_partition_raises_its_join_layer_as_it_grows() -> None:
    """A tree that started as one small partition keeps joining new subtrees high up."""
    rng = np.random.default_rng(7)
    x = clustered(300, np.zeros(300), 7, twins=False)
    labels = dict.fromkeys(range(1, 301), 0)
    live = LiveTree.from_tree(build_tree(x[:3], max_children=4), np.arange(1, 4), x[:3], 4)
    live.partition(live.depth, lambda ids: np.array([labels[int(i)] for i in ids], np.int64))
    for start in range(3, 300, 30):
        ids = np.arange(start + 1, min(start + 31, 301))
        live.insert(ids, x[start:start + len(ids)], lambda rows, want=None: (
            np.ones(len(rows), np.int64), np.zeros(len(rows))), threshold=float(rng.random()))
    assert live_mixing(live, labels) == []
    assert live.join >= live.depth - 1 and live.depth >= 3

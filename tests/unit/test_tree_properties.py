"""Invariants of built and rebalanced trees in every pair mode (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psirag_kb.tree import Tree, build_tree, node_vectors, rebalance
from psirag_kb.tree.rebalance import principal_halves


def clustered(seed: int, n: int, d: int, clusters: int, spread: float) -> np.ndarray:
    """Normalised vectors around a few random centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d))
    x = centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def assert_valid(tree: Tree, n: int, max_children: int) -> None:
    """One root, n leaves, equi-depth, 2..max_children children per abstract node."""
    assert tree.problems(max_children) == []
    assert tree.n_leaves == n
    assert np.count_nonzero(tree.parent < 0) == 1
    assert tree.is_equi_depth()
    sizes = [len(tree.children[a]) for a in range(n, tree.n_nodes)]
    assert all(2 <= s <= max_children for s in sizes)
    assert sorted(tree.leaves_under(tree.root).tolist()) == list(range(n))


inputs = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**31),
        "n": st.integers(1, 120),
        "d": st.integers(2, 12),
        "clusters": st.integers(1, 6),
        "spread": st.sampled_from([0.0, 0.05, 0.5, 3.0]),
        "max_children": st.integers(3, 6),
    }
)


@pytest.mark.parametrize("mode", ["exact", "hnsw", "bucketing"])
@settings(max_examples=25, deadline=None)
@given(case=inputs, knn=st.integers(1, 8), buckets=st.integers(1, 8))
def test_every_mode_builds_a_valid_tree(mode: str, case: dict, knn: int, buckets: int) -> None:
    x = clustered(case["seed"], case["n"], case["d"], case["clusters"], case["spread"])
    tree = build_tree(x, mode=mode, max_children=case["max_children"], knn=knn, buckets=buckets)
    assert_valid(tree, case["n"], case["max_children"])
    if case["n"] > 1:
        assert tree.depth >= 1


def test_hnsw_links_stray_components() -> None:
    # Far-apart tight clusters and one neighbour per leaf leave many kNN components.
    x = clustered(11, 400, 16, 8, 0.05)
    tree = build_tree(x, mode="hnsw", knn=1, max_children=10)
    assert_valid(tree, 400, 10)


def test_bucketing_with_many_buckets_stays_equi_depth() -> None:
    x = clustered(12, 500, 16, 5, 0.6)
    tree = build_tree(x, mode="bucketing", buckets=20, max_children=8)
    assert_valid(tree, 500, 8)


def test_rebalance_splits_a_star_and_keeps_clusters_together() -> None:
    x = clustered(3, 40, 8, 2, 0.05)
    star = Tree(
        n_leaves=40,
        parent=np.r_[np.full(40, 40), -1].astype(np.int64),
        children=[[] for _ in range(40)] + [list(range(40))],
        layer=np.r_[np.zeros(40), 1].astype(np.int32),
        root=40,
    )
    tree = rebalance(star, x, max_children=20)
    assert_valid(tree, 40, 20)
    assert tree.depth == 2
    groups = [set(tree.children[c]) for c in tree.children[tree.root]]
    assert sorted(len(g) for g in groups) == [20, 20]
    sims = x @ x.T
    inside = np.mean([sims[a, b] for g in groups for a in g for b in g if a != b])
    across = np.mean([sims[a, b] for a in groups[0] for b in groups[1]])
    assert inside > across


def test_rebalance_keeps_child_order_and_is_idempotent() -> None:
    x = clustered(4, 200, 8, 3, 0.5)
    tree = build_tree(x, max_children=200)
    once = rebalance(tree, x, max_children=4)
    assert_valid(once, 200, 4)
    assert rebalance(once, x, max_children=4) is once
    for node in range(200, once.n_nodes):
        kids = once.children[node]
        if kids and kids[0] < 200:
            original = [k for k in tree.children[tree.parent[kids[0]]] if k in set(kids)]
            assert kids == original or tree.parent[kids[0]] != tree.parent[kids[-1]]


def test_principal_halves_are_balanced_and_sorted() -> None:
    x = clustered(5, 9, 4, 2, 0.1)
    first, second = principal_halves(x)
    assert sorted([len(first), len(second)]) == [4, 5]
    assert 0 in first
    assert sorted(np.r_[first, second].tolist()) == list(range(9))
    assert list(first) == sorted(first) and list(second) == sorted(second)


@settings(max_examples=25, deadline=None)
@given(case=inputs)
def test_node_vectors_are_normalised_means(case: dict) -> None:
    x = clustered(case["seed"], case["n"], case["d"], case["clusters"], case["spread"])
    tree = build_tree(x, max_children=case["max_children"])
    vecs = node_vectors(tree, x)
    assert vecs.shape == (tree.n_nodes, x.shape[1]) and vecs.dtype == np.float32
    assert np.array_equal(vecs[: tree.n_leaves], x)
    norms = np.linalg.norm(vecs, axis=1)
    assert np.allclose(norms[norms > 1e-3], 1.0, atol=1e-5)
    for node in range(tree.n_leaves, tree.n_nodes):
        mean = vecs[tree.children[node]].mean(axis=0)
        if np.linalg.norm(mean) > 1e-3:
            assert np.allclose(vecs[node], mean / np.linalg.norm(mean), atol=1e-5)


def test_problems_are_reported() -> None:
    bad = Tree(
        n_leaves=3,
        parent=np.array([3, 3, 4, 4, -1], dtype=np.int64),
        children=[[], [], [], [0, 1], [3, 2]],
        layer=np.array([0, 0, 0, 1, 2], dtype=np.int32),
        root=4,
    )
    found = " ".join(bad.problems(40))
    assert "child 2 of 4 is not one layer below it" in found
    assert not bad.is_equi_depth()
    single = Tree(
        n_leaves=2,
        parent=np.array([2, -1, -1], dtype=np.int64),
        children=[[], [], [0]],
        layer=np.array([0, 0, 1], dtype=np.int32),
        root=2,
    )
    assert any("roots are" in p for p in single.problems(40))
    assert any("1 children" in p for p in single.problems(40))

"""Tree retrieval (Algorithm 2) and Dasgupta's cost."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psirag_kb.tree import Tree, build_tree, dasgupta_cost, node_vectors, tree_search
from psirag_kb.tree.search import start_layer


def clustered(seed: int, n: int, d: int, clusters: int, spread: float) -> np.ndarray:
    """Normalised vectors around a few random centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d))
    x = centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def brute_cost(tree: Tree, x: np.ndarray, weight: str = "distance") -> float:
    """Dasgupta's cost by finding every pair's lowest common ancestor."""
    def chain(leaf: int) -> list[int]:
        out = [leaf]
        while tree.parent[out[-1]] >= 0:
            out.append(int(tree.parent[out[-1]]))
        return out

    chains = [chain(i) for i in range(tree.n_leaves)]
    size = {node: len(tree.leaves_under(node)) for node in range(tree.n_nodes)}
    total = 0.0
    for i, j in itertools.combinations(range(tree.n_leaves), 2):
        above_j = set(chains[j])
        lca = next(node for node in chains[i] if node in above_j)
        cos = float(np.dot(x[i].astype(np.float64), x[j]))
        total += ((1.0 - cos) if weight == "distance" else (1.0 + cos) / 2.0) * size[lca]
    return total


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 40),
    mode=st.sampled_from(["exact", "hnsw", "bucketing"]),
    max_children=st.integers(3, 6),
)
def test_dasgupta_cost_matches_brute_force(seed: int, n: int, mode: str, max_children: int) -> None:
    x = clustered(seed, n, 6, 3, 0.5)
    tree = build_tree(x, mode=mode, max_children=max_children, buckets=3, knn=3)
    for weight in ("distance", "similarity"):
        assert dasgupta_cost(tree, x, weight=weight) == pytest.approx(
            brute_cost(tree, x, weight), rel=1e-6, abs=1e-6
        )


@pytest.mark.parametrize("mode", ["exact", "hnsw", "bucketing"])
def test_clustered_tree_costs_less_than_a_random_tree(mode: str) -> None:
    # A random tree here is the same shape with the leaves shuffled, so only placement differs.
    x = clustered(1, 300, 16, 6, 0.3)
    built = build_tree(x, mode=mode, max_children=10)
    rng = np.random.default_rng(2)
    shuffled = [x[rng.permutation(300)] for _ in range(5)]
    built_cost = dasgupta_cost(built, x, weight="similarity")
    assert all(built_cost < dasgupta_cost(built, s, weight="similarity") for s in shuffled)
    # With the paper's distance weights the same comparison goes the other way.
    assert all(dasgupta_cost(built, x) > dasgupta_cost(built, s) for s in shuffled)


def test_unknown_cost_weight_is_an_error() -> None:
    x = clustered(1, 5, 4, 1, 0.5)
    with pytest.raises(ValueError, match="weight"):
        dasgupta_cost(build_tree(x), x, weight="other")


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 80),
    max_children=st.integers(3, 6),
    pick=st.integers(0, 10**6),
)
def test_search_with_a_full_beam_finds_the_query_leaf(
    seed: int, n: int, max_children: int, pick: int
) -> None:
    x = clustered(seed, n, 8, 4, 0.4)
    tree = build_tree(x, max_children=max_children)
    vecs = node_vectors(tree, x)
    target = pick % n
    leaves, scores = tree_search(tree, vecs, x[target], k=n)
    assert scores[0] == pytest.approx(1.0, abs=1e-5)
    assert np.allclose(x[leaves[0]], x[target], atol=1e-6)
    assert list(scores) == sorted(scores, reverse=True)


def test_search_with_a_narrow_beam_mostly_finds_the_query_leaf() -> None:
    x = clustered(4, 600, 16, 12, 0.3)
    tree = build_tree(x, max_children=10)
    vecs = node_vectors(tree, x)
    found = sum(int(tree_search(tree, vecs, x[i], k=10)[0][0] == i) for i in range(0, 600, 5))
    assert found >= 0.9 * 120


def test_search_returns_k_leaves_best_first_and_accepts_per_layer_widths() -> None:
    x = clustered(5, 300, 8, 5, 0.5)
    tree = build_tree(x, max_children=6)
    vecs = node_vectors(tree, x)
    leaves, scores = tree_search(tree, vecs, x[7], k=5, k_leaves=12)
    assert leaves.shape == (12,) and leaves.max() < 300
    assert np.allclose(scores, x[leaves] @ x[7], atol=1e-5)
    assert np.all(np.diff(scores) <= 0)
    wide, _ = tree_search(tree, vecs, x[7], k=[4, 8, 16, 16])
    assert wide.shape == (16,)
    with pytest.raises(ValueError):
        tree_search(tree, vecs, x[7], k=0)


def test_search_starts_at_the_highest_layer_with_k_nodes() -> None:
    x = clustered(6, 200, 8, 5, 0.5)
    tree = build_tree(x, max_children=4)
    counts = tree.nodes_per_layer()
    layer = start_layer(tree, 10)
    assert counts[layer] >= 10
    assert all(counts[upper] < 10 for upper in range(layer + 1, tree.depth))
    assert start_layer(tree, 10**6) == 0


def test_search_on_a_single_leaf() -> None:
    x = clustered(7, 1, 4, 1, 0.0)
    tree = build_tree(x)
    leaves, scores = tree_search(tree, node_vectors(tree, x), x[0])
    assert leaves.tolist() == [0] and scores[0] == pytest.approx(1.0)

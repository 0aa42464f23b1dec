"""Algorithm 1 (merging and collapse): hand-made cases and a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psirag_kb.tree import Tree, build_tree
from psirag_kb.tree.pairs import exact_mst, spanning_forest


def circle(*degrees: float) -> np.ndarray:
    """Unit vectors in the plane at the given angles."""
    rad = np.deg2rad(np.asarray(degrees, dtype=np.float64))
    return np.stack([np.cos(rad), np.sin(rad)], axis=1).astype(np.float32)


def reference_tree(x: np.ndarray) -> Tree:
    """Algorithm 1 literally: every pair sorted, roots and depths found by walking parents."""
    n = x.shape[0]
    sims = x @ x.T
    iu, iv = np.triu_indices(n, 1)
    w = sims[iu, iv]
    order = np.lexsort((iv, iu, -w.astype(np.float64)))
    parent = [-1] * n
    layer = [0] * n
    children: list[list[int]] = [[] for _ in range(n)]

    def root(a: int) -> int:
        while parent[a] != -1:
            a = parent[a]
        return a

    def depth(a: int) -> int:
        steps = 0
        while parent[a] != -1:
            a, steps = parent[a], steps + 1
        return steps

    def up(a: int, steps: int) -> int:
        for _ in range(steps):
            a = parent[a]
        return a

    def new(kids: list[int]) -> None:
        parent.append(-1)
        layer.append(layer[kids[0]] + 1)
        children.append(kids)
        for kid in kids:
            parent[kid] = len(parent) - 1

    links = 0
    for e in order.tolist():
        if links == n - 1:
            break
        u, v = int(iu[e]), int(iv[e])
        ru, rv = root(u), root(v)
        if ru == rv:
            continue
        du, dv = depth(u), depth(v)
        if parent[u] == -1 and parent[v] == -1:
            new([u, v])
        elif du == dv:
            new([ru, rv])
        elif du > dv:
            target = up(u, dv + 1)
            children[target].append(rv)
            parent[rv] = target
        else:
            target = up(v, du + 1)
            children[target].append(ru)
            parent[ru] = target
        links += 1
    roots = [i for i, p in enumerate(parent) if p == -1]
    assert len(roots) == 1
    return Tree(n, np.asarray(parent, np.int64), children, np.asarray(layer, np.int32), roots[0])


def canonical(tree: Tree) -> set[tuple]:
    """Abstract nodes as (layer, leaf set, ordered child leaf sets), free of node numbering."""
    leafsets = {node: frozenset(tree.leaves_under(node).tolist()) for node in range(tree.n_nodes)}
    return {
        (int(tree.layer[node]), leafsets[node], tuple(leafsets[k] for k in tree.children[node]))
        for node in range(tree.n_leaves, tree.n_nodes)
    }


def shape(tree: Tree, node: int) -> object:
    """Nested lists of leaf ids, in child order."""
    kids = tree.children[node]
    return node if not kids else [shape(tree, k) for k in kids]


def test_merging_two_lone_leaves() -> None:
    tree = build_tree(circle(0, 10))
    assert shape(tree, tree.root) == [0, 1]
    assert tree.depth == 1


def test_equal_depth_roots_get_a_new_parent() -> None:
    # (2,3) 8 deg, then (0,1) 10 deg, then (1,2) 30 deg joins two height-1 roots.
    tree = build_tree(circle(0, 10, 40, 48))
    assert shape(tree, tree.root) == [[0, 1], [2, 3]]
    assert tree.depth == 2


def test_leaf_node_collapse() -> None:
    # (0,1) merges; (1,2) finds leaf 2 alone, so 2 joins the parent of 1.
    tree = build_tree(circle(0, 10, 25))
    assert shape(tree, tree.root) == [0, 1, 2]
    assert tree.depth == 1


def test_abstract_node_collapse_into_the_root() -> None:
    # Leaves 0-3 form a height-2 tree; (4,5) a height-1 tree that joins at layer 2 via (3,4).
    tree = build_tree(circle(0, 10, 40, 48, 120, 127))
    assert shape(tree, tree.root) == [[0, 1], [2, 3], [4, 5]]
    assert tree.depth == 2


def test_abstract_node_collapse_below_the_root() -> None:
    # Two height-2 trees (0-3, 4-7) merge into a height-3 root through (3,4); then (8,9), a
    # height-1 tree, collapses via (7,8) into the layer-2 ancestor of 7, not into the root.
    tree = build_tree(circle(0, 1, 10, 11.5, 40, 41.2, 50, 51.4, 85, 86.6))
    assert tree.depth == 3
    assert shape(tree, tree.root) == [[[0, 1], [2, 3]], [[4, 5], [6, 7], [8, 9]]]


def test_same_root_pairs_are_skipped() -> None:
    # (0,2) ranks above (1,2)'s cross pairs but 0 and 2 already share a root.
    tree = build_tree(circle(0, 3, 6, 60))
    assert tree.problems(40) == []
    assert shape(tree, tree.root) == [[0, 1, 2], [3]] or tree.depth == 1
    assert sorted(tree.leaves_under(tree.root).tolist()) == [0, 1, 2, 3]


def test_single_leaf_is_its_own_root() -> None:
    tree = build_tree(circle(30))
    assert (tree.n_nodes, tree.root, tree.depth) == (1, 0, 0)
    assert tree.problems(40) == []


def test_no_vectors_is_an_error() -> None:
    with pytest.raises(ValueError, match="zero vectors"):
        build_tree(np.zeros((0, 4), dtype=np.float32))


@pytest.mark.parametrize("bad", [{"mode": "nope"}, {"max_children": 2}, {"knn": 0}])
def test_bad_arguments_are_errors(bad: dict) -> None:
    with pytest.raises(ValueError):
        build_tree(circle(0, 10, 20), **bad)


def vectors(seed: int, n: int, d: int, duplicates: bool) -> np.ndarray:
    """Random normalised vectors, optionally with repeated rows to create exact ties."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    if duplicates and n > 2:
        x[rng.integers(0, n, n // 3)] = x[rng.integers(0, n, n // 3)]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 40),
    d=st.integers(2, 6),
    duplicates=st.booleans(),
)
def test_exact_mode_matches_the_reference(seed: int, n: int, d: int, duplicates: bool) -> None:
    x = vectors(seed, n, d, duplicates)
    mine = build_tree(x, mode="exact", max_children=n + 3)
    assert canonical(mine) == canonical(reference_tree(x))


def test_exact_mode_matches_the_reference_on_clusters() -> None:
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((4, 16))
    x = centres[rng.integers(0, 4, 150)] + 0.4 * rng.standard_normal((150, 16))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    mine = build_tree(x, mode="exact", max_children=1000)
    assert canonical(mine) == canonical(reference_tree(x))


def test_similarities_are_symmetric_and_the_tree_spans() -> None:
    from psirag_kb.tree.pairs import similarity_matrix

    x = vectors(3, 300, 8, duplicates=True)
    sims = similarity_matrix(x)
    assert np.array_equal(sims, sims.T)
    u, v, w = exact_mst(x)
    assert u.shape == (299,) and np.all(u < v) and np.all(np.diff(w) <= 0)


def test_sparse_spanning_forest_equals_kruskal() -> None:
    x = vectors(5, 60, 4, duplicates=True)
    iu, iv = np.triu_indices(60, 1)
    w = (x @ x.T)[iu, iv]
    u, v, _ = spanning_forest(iu, iv, w, 60)
    pu, pv, _ = exact_mst(x)
    assert np.array_equal(u, pu) and np.array_equal(v, pv)

"""The live tree: insertions and removals keep every invariant, without rebuilding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from psirag_kb.tree import build_tree
from psirag_kb.tree.live import LiveTree
from psirag_kb.tree.vectors import normalise
from psirag_kb.tree.view import TreeView

DIM = 8


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    return normalise(rng.normal(size=(n, DIM)).astype(np.float32))


class Model:
    """A live tree plus the leaf vectors it should hold, with a brute-force nearest function."""

    def __init__(self, max_children: int = 4, threshold: float = 0.3,
                 lookup: bool = False) -> None:
        self.vectors: dict[int, np.ndarray] = {}
        self.live = LiveTree(max_children, DIM, lookup=self.lookup if lookup else None)
        self.threshold = threshold
        self.next_chunk = 1
        self.view = TreeView.empty()

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Leaf vectors as the dense index would give them (committed leaves only)."""
        return np.stack([self.committed[i] for i in ids.tolist()])

    def commit(self) -> None:
        """What the store does after a transaction: clear the changes, patch the view."""
        touched, dropped = self.live.changes()
        self.live.clear_changes()
        self.committed = dict(self.vectors)
        self.view = self.view.patched(self.live, touched, dropped)

    def nearest(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.array(sorted(self.vectors))
        matrix = np.stack([self.vectors[i] for i in ids])
        scores = queries @ matrix.T
        best = scores.argmax(axis=1)
        return ids[best], scores[np.arange(len(queries)), best]

    def insert(self, vectors: np.ndarray) -> list[int]:
        ids = list(range(self.next_chunk, self.next_chunk + len(vectors)))
        self.next_chunk += len(vectors)
        self.live.insert(np.array(ids), vectors, self.nearest, self.threshold)
        self.vectors.update(zip(ids, vectors, strict=True))
        return ids

    def remove(self, ids: list[int]) -> None:
        self.live.remove(ids)
        for chunk_id in ids:
            del self.vectors[chunk_id]

    def check_view(self) -> None:
        """The view patched commit by commit equals one made from scratch."""
        full, patched = TreeView.full(self.live), self.view
        assert patched.root == full.root and patched.n_leaves == full.n_leaves
        assert patched.dirty == full.dirty and set(patched.nodes) == set(full.nodes)
        for node, info in full.nodes.items():
            mine = patched.nodes[node]
            assert (mine.parent, mine.layer, mine.children, mine.leaves, mine.dirty) == (
                info.parent, info.layer, info.children, info.leaves, info.dirty)
            assert np.array_equal(mine.vector, info.vector)
        for chunk_id in self.vectors:
            assert patched.has_leaf(chunk_id)
            assert patched.parents_of(np.array([chunk_id]))[0] == full.parents_of(
                np.array([chunk_id]))[0]
        gone = [i for i in range(1, self.next_chunk) if i not in self.vectors]
        assert not any(patched.has_leaf(i) for i in gone)

    def check(self) -> None:
        if not self.vectors:
            assert self.live.root is None
            return
        tree, keys = self.live.to_tree()
        assert tree.problems(self.live.max_children) == []
        assert sorted((-keys[: tree.n_leaves]).tolist()) == sorted(self.vectors)
        assert self.live.n_leaves == len(self.vectors)
        norms = np.linalg.norm(self.live.vectors_of(keys.tolist()), axis=1)
        assert np.allclose(norms, 1.0, atol=1e-4)
        for node, kids in self.live.children.items():
            mean = normalise(self.live.vectors_of(kids).mean(axis=0)[None])[0]
            assert np.allclose(self.live.vectors[node], mean, atol=1e-4), "stale node vector"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 9, 17])
@pytest.mark.parametrize("batch", [1, 2, 7])
def test_insert_into_every_small_shape(size, batch):
    rng = np.random.default_rng(size * 31 + batch)
    model = Model()
    model.insert(unit(rng, size))
    model.check()
    model.insert(unit(rng, batch))
    model.check()
    assert model.live.n_leaves == size + batch


def test_single_chunk_joins_its_nearest_leafs_parent():
    rng = np.random.default_rng(0)
    model = Model(max_children=40)
    base = unit(rng, 30)
    ids = model.insert(base)
    target = ids[7]
    new = normalise((base[7] + 0.01 * unit(rng, 1)[0])[None])
    [new_id] = model.insert(new)
    assert model.live.parent[-new_id] == model.live.parent[-target]
    model.check()


def test_far_batch_goes_in_as_one_subtree():
    rng = np.random.default_rng(1)
    model = Model(max_children=40, threshold=0.5)
    model.insert(normalise(np.abs(unit(rng, 40)) * np.r_[np.ones(4), np.zeros(4)]))
    far = normalise(np.abs(unit(rng, 6)) * np.r_[np.zeros(4), np.ones(4)])
    new = model.insert(far)
    parents = {model.live.parent[-i] for i in new}
    lca_layers = {model.live.layer[p] for p in parents}
    assert lca_layers == {1}
    tops = {model.live.ancestors(-i)[-2] if len(model.live.ancestors(-i)) > 1 else None
            for i in new}
    assert len(tops) == 1  # all new leaves hang below one child of the root
    model.check()


def test_delete_everything_one_by_one():
    rng = np.random.default_rng(2)
    model = Model(max_children=3)
    ids = model.insert(unit(rng, 25))
    order = rng.permutation(ids).tolist()
    for chunk_id in order:
        model.remove([chunk_id])
        model.check()
    assert model.live.root is None and not model.live.children


def test_adopted_tree_matches_a_batch_build():
    rng = np.random.default_rng(3)
    vectors = unit(rng, 50)
    tree = build_tree(vectors, max_children=5)
    live = LiveTree.from_tree(tree, np.arange(1, 51), vectors, 5)
    snap = live.to_tree()[0]
    assert snap.nodes_per_layer() == tree.nodes_per_layer()
    assert snap.problems(5) == []


def test_changes_are_reported_for_persistence():
    rng = np.random.default_rng(4)
    model = Model()
    model.insert(unit(rng, 10))
    touched, dropped = model.live.changes()
    assert len(touched) == len(model.live.children) + model.live.n_leaves and not dropped
    assert model.live.changes()[0] == touched  # kept until the commit clears them
    model.live.clear_changes()
    [new] = model.insert(unit(rng, 1))
    touched, _ = model.live.changes()
    assert -new in touched and model.live.parent[-new] in touched
    model.live.clear_changes()
    model.remove([new])
    _, dropped = model.live.changes()
    assert -new in dropped


class LiveTreeMachine(RuleBasedStateMachine):
    """Random sequences of insertions, removals and edits keep the tree valid."""

    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(0)
        self.model = Model(max_children=4, threshold=0.2, lookup=True)
        self.model.committed = {}

    @rule(n=st.integers(1, 9))
    def insert(self, n):
        self.model.insert(unit(self.rng, n))
        self.model.commit()

    @precondition(lambda self: self.model.vectors)
    @rule(data=st.data())
    def remove(self, data):
        ids = sorted(self.model.vectors)
        chosen = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=6, unique=True))
        self.model.remove(chosen)
        self.model.commit()

    @precondition(lambda self: self.model.vectors)
    @rule(data=st.data(), n=st.integers(1, 4))
    def edit(self, data, n):
        ids = sorted(self.model.vectors)
        chosen = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3, unique=True))
        self.model.remove(chosen)
        self.model.insert(unit(self.rng, n))
        self.model.commit()

    @invariant()
    def valid(self):
        self.model.check()
        self.model.check_view()


TestLiveTreeMachine = LiveTreeMachine.TestCase
TestLiveTreeMachine.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_drift_repair_restores_a_rebuild_quality_subtree():
    from psirag_kb.tree.drift import local_rebuild, neighbour_cost

    rng = np.random.default_rng(5)
    centres = unit(rng, 6)
    model = Model(max_children=6, threshold=-1.0)
    model.insert(normalise(centres[rng.integers(0, 6, 12)] + 0.05 * unit(rng, 12)))
    honest = model.nearest

    def misleading(queries):  # a poor matcher scatters leaves: the tree drifts
        ids, scores = honest(queries)
        return rng.choice(sorted(model.vectors), len(queries)), scores

    model.nearest = misleading
    for _ in range(40):
        model.insert(normalise(centres[rng.integers(0, 6, 1)] + 0.05 * unit(rng, 1)))
    live = model.live
    tree, chunk_ids, vectors = live.subtree(live.root)
    before = neighbour_cost(tree, vectors)
    replacement, ratio = local_rebuild(tree, vectors, 6)
    assert ratio > 1.05
    live.replace_subtree(live.root, replacement, chunk_ids)
    model.check()
    tree, chunk_ids, vectors = live.subtree(live.root)
    assert neighbour_cost(tree, vectors) < before
    assert sorted(chunk_ids.tolist()) == sorted(model.vectors)


def test_neighbour_cost_prefers_grouped_leaves():
    from psirag_kb.tree.drift import neighbour_cost

    rng = np.random.default_rng(6)
    centres = unit(rng, 5)
    vectors = normalise(centres[np.repeat(np.arange(5), 8)] + 0.05 * unit(rng, 40))
    tree = build_tree(vectors, max_children=8)
    shuffled = vectors[rng.permutation(40)]
    assert neighbour_cost(tree, vectors) < neighbour_cost(tree, shuffled)


def test_segment_sum_in_blocks_matches_a_plain_sum(monkeypatch):
    from psirag_kb.tree import vectors as module

    monkeypatch.setattr(module, "SUM_BLOCK", 7)
    rng = np.random.default_rng(7)
    values = rng.normal(size=(50, 3)).astype(np.float16)
    segments = rng.integers(0, 6, 50)
    rows = rng.random(50) > 0.3
    ids, sums = module.segment_sum(values, segments, rows)
    assert ids.tolist() == sorted(set(segments[rows].tolist())) and sums.dtype == np.float32
    for segment, total in zip(ids.tolist(), sums, strict=True):
        expected = values[(segments == segment) & rows].astype(np.float32).sum(axis=0)
        assert np.allclose(total, expected, atol=1e-3)


def test_a_float16_bucketed_build_is_as_good_as_a_float32_one():
    from psirag_kb.tree import dasgupta_cost

    rng = np.random.default_rng(8)
    centres = unit(rng, 12)
    vectors = normalise(centres[rng.integers(0, 12, 3000)] + 0.3 * unit(rng, 3000))
    full = build_tree(vectors, mode="auto", exact_max=500, max_children=10)
    half = build_tree(vectors.astype(np.float16), mode="auto", exact_max=500, max_children=10)
    assert half.problems(10) == [] and full.problems(10) == []
    cost_full = dasgupta_cost(full, vectors, weight="similarity")
    cost_half = dasgupta_cost(half, vectors, weight="similarity")
    assert cost_half <= 1.02 * cost_full

"""A first ingest's interim trees: when one is due, and after one failed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from psirag_kb.tree.bulk import INTERIM_FIRST, INTERIM_GROWTH, FirstIngest


class Ingest(FirstIngest):
    """FirstIngest over a chunk count and a tree of `leaves`, whose build fails on demand."""

    def __init__(self) -> None:
        self.defer_tree = False
        self.tree_state = {"state": "ready"}
        self.chunks = 0
        self.builds = 0
        self.failing = False
        self.store_down = False
        self.store = SimpleNamespace(chunk_count=self.count)  # type: ignore[assignment]
        self.tree_index = SimpleNamespace(  # type: ignore[assignment]
            empty=True, view=SimpleNamespace(n_leaves=0))

    def count(self) -> int:
        if self.store_down:
            raise OSError("the database is gone")
        return self.chunks

    @property
    def tree_missing(self) -> bool:
        return False

    def tree_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(self.chunks), np.zeros((self.chunks, 2))

    def build_tree(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self.builds += 1
        if self.failing:
            raise MemoryError("no room for the tree")
        self.tree_index.empty = False
        self.tree_index.view.n_leaves = len(ids)


def test_interim_trees_come_at_the_first_threshold_then_as_the_chunks_grow() -> None:
    ingest = Ingest()
    assert ingest.begin_bulk()
    ingest.chunks = INTERIM_FIRST - 1
    assert not ingest.interim_tree()
    ingest.chunks = INTERIM_FIRST
    assert ingest.interim_tree() and ingest.interim
    ingest.chunks = INTERIM_GROWTH * INTERIM_FIRST - 1
    assert not ingest.interim_tree()
    ingest.chunks += 1
    assert ingest.interim_tree() and ingest.builds == 2


def test_a_failed_interim_build_waits_for_the_chunks_to_grow_before_another() -> None:
    ingest = Ingest()
    ingest.begin_bulk()
    ingest.failing = True
    ingest.chunks = INTERIM_FIRST + 10
    with pytest.raises(MemoryError):
        ingest.interim_tree()
    assert not ingest.interim_due() and not ingest.interim_tree()
    assert ingest.builds == 1  # not tried again at every look
    ingest.failing = False
    ingest.chunks = INTERIM_GROWTH * (INTERIM_FIRST + 10)
    assert ingest.interim_tree() and ingest.builds == 2


class StoreLostMidBuild(Ingest):
    """A build that fails after its database went away."""

    def tree_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        vectors = super().tree_vectors()
        self.store_down = True
        return vectors


def test_a_build_that_fails_with_its_store_raises_its_own_error() -> None:
    ingest = StoreLostMidBuild()
    ingest.begin_bulk()
    ingest.chunks = INTERIM_FIRST
    ingest.failing = True
    with pytest.raises(MemoryError):  # not the count's OSError
        ingest.interim_tree()
    assert ingest.interim_floor == INTERIM_FIRST

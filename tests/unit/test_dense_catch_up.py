"""A saved dense index that is behind the database catches up instead of being rebuilt."""

from __future__ import annotations

import numpy as np
import pytest

from psirag_kb.storage.dense import DenseIndex
from psirag_kb.tree.vectors import normalise


def test_a_crash_after_unsaved_changes_is_caught_up(tmp_path):
    rng = np.random.default_rng(0)
    table = normalise(rng.normal(size=(121, 16)))  # row i is chunk i's vector
    index = DenseIndex(tmp_path, 16)
    index.rebuild(1, np.arange(1, 101), table[1:101])  # saved at generation 1
    index.apply(2, np.arange(101, 121), table[101:121], np.arange(1, 11), save=False)
    # the process dies here: generation 2 was never saved
    again = DenseIndex(tmp_path, 16)
    assert again.generation == 1 and again.count == 100
    store_ids = np.arange(11, 121)
    added, deleted = again.catch_up(2, store_ids, lambda ids: table[ids])
    assert (added, deleted) == (20, 10)
    assert again.count == 110 and again.generation == 2
    labels, scores = again.search(table[115], 1)
    assert labels.tolist() == [115] and scores[0] == pytest.approx(1.0, abs=1e-5)
    labels, _ = again.search(table[3], 50)
    assert not set(labels.tolist()) & set(range(1, 11))
    reopened = DenseIndex(tmp_path, 16)  # the caught-up state was saved
    assert reopened.generation == 2 and reopened.count == 110


def test_nothing_saved_means_a_rebuild(tmp_path):
    with pytest.raises(ValueError, match="no saved"):
        DenseIndex(tmp_path, 16).catch_up(1, np.arange(1, 5), lambda ids: np.zeros((0, 16)))

"""Equal scores rank by chunk id, so a rebuilt dense index answers exactly as before."""

from __future__ import annotations

import numpy as np
import pytest

from psirag_kb.storage import dense
from psirag_kb.storage.dense import DenseIndex

DIM = 16


def vectors(n: int) -> np.ndarray:
    """n vectors where every pair (2j, 2j+1) is the same vector: n/2 exact ties."""
    rng = np.random.default_rng(7)
    pairs = rng.normal(size=(n // 2, DIM)).astype(np.float32)
    return np.repeat(pairs / np.linalg.norm(pairs, axis=1, keepdims=True), 2, axis=0)


@pytest.mark.parametrize("path", ["exact", "hnsw"])
def test_ties_rank_by_id_whatever_the_insertion_order(tmp_path, monkeypatch, path):
    if path == "hnsw":
        monkeypatch.setattr(dense, "EXACT_LIVE", 0)
    n = 40
    ids = np.arange(1, n + 1, dtype=np.int64)
    data = vectors(n)
    answers = []
    for order_name, order in (("ascending", np.arange(n)), ("descending", np.arange(n)[::-1]),
                              ("shuffled", np.random.default_rng(3).permutation(n))):
        index = DenseIndex(tmp_path / order_name, DIM)
        index.rebuild(1, ids[order], data[order], save=False)
        found, scores = index.search_many(data[::2], k=n)
        answers.append(found.tolist())
        for row, (got, got_scores) in enumerate(zip(found, scores, strict=True)):
            tied = np.flatnonzero(np.isclose(got_scores, got_scores[0], atol=1e-6))
            assert sorted(got[tied].tolist()) == got[tied].tolist(), (order_name, row)
    assert answers[0] == answers[1] == answers[2]

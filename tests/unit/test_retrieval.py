"""Reciprocal rank fusion."""

from __future__ import annotations

import numpy as np
import pytest

from psirag_kb.search.retrieval import rrf
from psirag_kb.storage.records import Ranking


def ranking(*ids: int) -> Ranking:
    return Ranking(np.array(ids, dtype=np.int64), np.ones(len(ids), dtype=np.float32))


def test_rrf_scores_are_sums_of_reciprocal_ranks():
    fused = rrf([ranking(1, 2, 3), ranking(3, 1)], k=60)
    scores = dict(zip(fused.ids.tolist(), fused.scores.tolist(), strict=True))
    assert scores[1] == pytest.approx(1 / 61 + 1 / 62)
    assert scores[3] == pytest.approx(1 / 63 + 1 / 61)
    assert scores[2] == pytest.approx(1 / 62)
    assert fused.ids.tolist() == [1, 3, 2]


def test_rrf_limit_and_ties_prefer_earlier_rank():
    fused = rrf([ranking(5, 6), ranking(7, 8)], k=60, limit=3)
    assert fused.ids.tolist() == [5, 7, 6]


def test_rrf_of_nothing():
    assert len(rrf([Ranking.empty(), Ranking.empty()]).ids) == 0


def test_squad_style_answer_scores():
    from psirag_kb.evaluation import exact_match, f1_score, normalise_answer

    assert normalise_answer("The  Eiffel Tower!") == "eiffel tower"
    assert exact_match("the eiffel tower", ["Eiffel Tower", "Paris"]) == 1.0
    assert exact_match("tower", ["Eiffel Tower"]) == 0.0
    assert f1_score("Eiffel tower in Paris", ["Eiffel Tower"]) == pytest.approx(2 * 0.5 / 1.5)
    assert f1_score("nothing", ["Eiffel Tower"]) == 0.0

"""Ranked lists and their fusion (reciprocal rank fusion)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from psirag_kb.storage.records import Ranking

MODES = ("auto", "hybrid", "tree", "sparse", "dense")
"""Query modes users choose from: auto lets the hop discriminator choose flat dense + BM25 (one
hop) or hybrid (more) for each of its rounds of multi-round retrieval."""
EVAL_MODES = (*MODES, "flat_hybrid", "agent")
"""Modes the evaluation can score: flat_hybrid is the RRF of BM25 and flat dense alone; agent
is the multi-round retrieval of agent mode without an LLM."""


def rrf(rankings: Sequence[Ranking], k: int = 60, limit: int | None = None) -> Ranking:
    """Reciprocal rank fusion: score(d) = sum over lists of 1 / (k + rank), rank from 1."""
    totals: dict[int, float] = {}
    first_seen: dict[int, tuple[int, int]] = {}
    for list_index, ranking in enumerate(rankings):
        for rank, chunk_id in enumerate(ranking.ids.tolist(), start=1):
            totals[chunk_id] = totals.get(chunk_id, 0.0) + 1.0 / (k + rank)
            first_seen.setdefault(chunk_id, (rank, list_index))
    order = sorted(totals, key=lambda i: (-totals[i], first_seen[i]))
    if limit is not None:
        order = order[:limit]
    return Ranking(
        np.array(order, dtype=np.int64), np.array([totals[i] for i in order], dtype=np.float32)
    )

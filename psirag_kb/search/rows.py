"""Result rows: one ranked chunk as the CLI, API, MCP server and agent show it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psirag_kb.storage.records import Ranking


def result_row(hit: Any, chunk_id: int, score: float, rank: int) -> dict[str, Any]:
    """One result as the CLI, API and MCP server show it."""
    lines = [hit.line_first, hit.line_last] if hit.line_first is not None else None
    row = {"rank": rank, "score": float(score), "source": hit.source, "lines": lines,
           "location": hit.location, "text": hit.text, "chunk_id": int(chunk_id),
           "path": hit.path}
    if hit.unavailable is not None:  # its folder vanished: found, but not on disk right now
        row["unavailable"] = hit.unavailable
    return row


def result_rows(ranking: Ranking, hits: Mapping[int, Any]) -> list[dict[str, Any]]:
    """Result rows of a ranking, best first, for the chunks that still exist."""
    rows: list[dict[str, Any]] = []
    for chunk_id, score in zip(ranking.ids.tolist(), ranking.scores.tolist(), strict=True):
        if chunk_id in hits:
            rows.append(result_row(hits[chunk_id], chunk_id, score, len(rows) + 1))
    return rows

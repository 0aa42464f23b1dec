"""The one place ranked lists are fused: reciprocal rank fusion, with BM25's certain hits first.

Reciprocal rank fusion lets two lists that agree on a semantically close neighbour outvote
BM25's one vote for the chunk that holds the very words asked for (a pasted sentence, an error
message, an identifier). So before fusing, BM25 is asked whether it is sure:

- `phrase`: a few chunks (at most CERTAIN_MAX) hold the whole query as one phrase;
- `margin`: BM25's best score is at least `margin` times its runner-up's (or it found one chunk).

Its certain hits go first, then the chunks that name what the query names (`named_hits`: a few
chunks hold an option name or code identifier of it, `phrases.identifiers`; a question about
`--no-overwrite-ignore` is about the few passages that name it), in the fused list's order,
then the rest of the fused list as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from psirag_kb.search.phrases import identifiers
from psirag_kb.search.retrieval import rrf
from psirag_kb.storage.records import Ranking

SIGNALS = ("phrase", "margin")
"""The ways BM25 can be sure, as `[retrieval] certain_first` names them."""
CERTAIN_MAX = 10
"""A phrase held by more chunks than this is not a known item: no certain hit."""

PhraseHits = Callable[[str, int, Sequence[str] | None], tuple[np.ndarray, np.ndarray]]
"""SparseIndex.phrase_hits: (text, k, within paths) -> (ids, scores)."""


def certain_hits(text: str, bm25: Ranking, signals: Sequence[str], margin: float,
                 phrase_hits: PhraseHits, paths: Sequence[str] | None = None) -> np.ndarray:
    """The chunk ids BM25 is sure of for this query (phrase hits first), possibly none."""
    found: list[int] = []
    if "phrase" in signals:
        ids, _ = phrase_hits(text, CERTAIN_MAX + 1, paths)
        if len(ids) <= CERTAIN_MAX:
            found.extend(ids.tolist())
    if "margin" in signals and len(bm25.ids) and (
            len(bm25.ids) == 1 or bm25.scores[0] >= margin * max(float(bm25.scores[1]), 1e-9)):
        found.append(int(bm25.ids[0]))
    return np.array(list(dict.fromkeys(found)), dtype=np.int64)


def named_hits(text: str, phrase_hits: PhraseHits, paths: Sequence[str] | None = None
               ) -> np.ndarray:
    """The chunks holding an identifier of the query, for each one held by at most CERTAIN_MAX
    chunks (none when the query names none; the whole query as a phrase is `certain_hits`')."""
    found: list[int] = []
    for name in identifiers(text):
        if name == text.strip():
            continue
        ids, _ = phrase_hits(name, CERTAIN_MAX + 1, paths)
        if len(ids) <= CERTAIN_MAX:
            found.extend(ids.tolist())
    return np.array(list(dict.fromkeys(found))[:CERTAIN_MAX], dtype=np.int64)


def in_order_of(ids: np.ndarray, ranking: Ranking) -> np.ndarray:
    """`ids` in the ranking's order, those it does not hold after them as they were."""
    position = {chunk: rank for rank, chunk in enumerate(ranking.ids.tolist())}
    return np.array(sorted(ids.tolist(), key=lambda c: position.get(c, len(position))),
                    dtype=np.int64)


def promote(ranking: Ranking, certain: np.ndarray, limit: int | None = None) -> Ranking:
    """The certain ids first (with the list's best score), then the rest of the ranking."""
    if len(certain) == 0:
        return ranking if limit is None else Ranking(ranking.ids[:limit],
                                                     ranking.scores[:limit])
    rest = ~np.isin(ranking.ids, certain)
    best = float(ranking.scores[0]) if len(ranking.scores) else 0.0
    ids = np.concatenate([certain.astype(np.int64), ranking.ids[rest]])
    scores = np.concatenate([np.full(len(certain), best, np.float32),
                             ranking.scores[rest].astype(np.float32)])
    if limit is not None:
        ids, scores = ids[:limit], scores[:limit]
    return Ranking(ids, scores)


def fuse(rankings: Sequence[Ranking], k: int, limit: int | None = None,
         certain: np.ndarray | None = None, named: np.ndarray | None = None) -> Ranking:
    """Reciprocal rank fusion (constant k) of the lists, the certain ids first, then the
    `named` ones in the fused order."""
    fused = rrf(rankings, k) if len(rankings) != 1 else rankings[0]
    first = np.zeros(0, np.int64) if certain is None else certain
    if named is not None and len(named):
        ordered = in_order_of(named, fused)
        first = np.array(list(dict.fromkeys([*first.tolist(), *ordered.tolist()])), np.int64)
    return promote(fused, first, limit)

"""Multi-round retrieval without an LLM: expand the query with what the last round found."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from psirag_kb.errors import KBError
from psirag_kb.search.retrieval import Ranking

log = logging.getLogger(__name__)

DEFAULT_HOPS = 2
"""Rounds used when the hop discriminator cannot judge the question (another embedding model)."""
ROUND_DEPTH = 10
"""Passages each round's hybrid retrieval returns."""
FANOUT = 3
"""Top passages of a round that each seed one expanded query in the next round."""
MAX_TERMS = 4
"""Salient phrases taken from one passage."""
TITLE_CHARS = 120
"""A passage's first line counts as its title when it is at most this long."""
RRF_K = 60

_SPAN = re.compile(
    r"\b[A-Z][\w'’\-]*(?:\.(?=[ \t]+[A-Z]))?"
    r"(?:[ \t]+(?:(?:of|the|de|von|van|der|la|le|and|du|da|for|on|in)[ \t]+)*[A-Z0-9][\w'’\-]*)*"
)
_COMMON = frozenset(
    "a an the in on at of for to from by with and or but as it its he she they his her their "
    "this that these those there here when where who whom whose which what why how is was were "
    "are be been after before during since while however also many most some one two three "
    "first second new old january february march april may june july august september october "
    "november december".split()
)


@dataclass
class MultiRound:
    """The fused results of all rounds and, per query issued, its round and the passages found."""

    ranking: Ranking
    results: list[dict[str, Any]]
    hops: int
    steps: list[dict[str, Any]] = field(default_factory=list)


@lru_cache(maxsize=1)
def _hop_model() -> Any:
    """The shipped hop discriminator, loaded once per process."""
    from psirag_kb.answer.hops import HopDiscriminator

    return HopDiscriminator.load()


def predict_hops(kb: Any, question: str) -> int:
    """The hop discriminator's 1..4 for a question, or DEFAULT_HOPS when it cannot judge it."""
    try:
        model = _hop_model()
        if model.dim != kb.dim:
            return DEFAULT_HOPS
        return int(model.predict(question, kb.embed_query(question)))
    except KBError as exc:
        log.warning("hop discriminator unavailable (%s); using %d rounds", exc, DEFAULT_HOPS)
        return DEFAULT_HOPS


def split_title(text: str) -> tuple[str, str]:
    """(title, body): the first line is a title when short and followed by more lines."""
    text = text.strip()
    first, _, rest = text.partition("\n")
    if rest and len(first.strip()) <= TITLE_CHARS:
        return first.strip(), rest
    return "", text


def capitalised_spans(text: str) -> list[str]:
    """Runs of capitalised words (names, places, works) without leading or trailing filler."""
    spans = []
    for match in _SPAN.finditer(text):
        words = match.group(0).strip(" .'’-").split()
        while words and words[0].lower() in _COMMON:
            words.pop(0)
        while words and words[-1].lower() in _COMMON:
            words.pop()
        span = " ".join(words).strip(" .'’-")
        if span and (len(words) > 1 or len(span) > 2):
            spans.append(span)
    return spans


def salient_phrases(query: str, text: str, limit: int = MAX_TERMS) -> list[str]:
    """A passage's capitalised spans that are neither in the query, its title nor chosen yet.

    The passage's own title is left out: it names what the query already matched, while the
    names in its body point to the next hop (the bridge entity).
    """
    title, body = split_title(text)
    known = f"{query} {title}".lower()
    chosen: list[str] = []
    for phrase in capitalised_spans(body):
        low = phrase.lower()
        if low in known or any(low in c.lower() for c in chosen):
            continue
        chosen.append(phrase)
        if len(chosen) == limit:
            break
    return chosen


def expand(query: str, text: str, limit: int = MAX_TERMS) -> str:
    """The query followed by the passage's salient phrases (just the query when it has none)."""
    return " ".join([query, *salient_phrases(query, text, limit)])


def max_score(lists: list[list[dict[str, Any]]], k: int) -> list[dict[str, Any]]:
    """Fuse ranked lists by each passage's best reciprocal rank, earlier lists winning ties."""
    best: dict[int, tuple[float, int, dict[str, Any]]] = {}
    for index, results in enumerate(lists):
        for rank, result in enumerate(results, start=1):
            chunk = int(result["chunk_id"])
            score = 1.0 / (RRF_K + rank)
            if chunk not in best or score > best[chunk][0]:
                best[chunk] = (score, index, result)
    order = sorted(best.values(), key=lambda item: (-item[0], item[1]))[:k]
    return [{**result, "rank": i, "score": score}
            for i, (score, _, result) in enumerate(order, start=1)]


Retriever = Callable[[str, int], list[dict[str, Any]]]


def multi_round(
    kb: Any,
    question: str,
    k: int,
    rounds: int | None = None,
    fanout: int = FANOUT,
    depth: int = ROUND_DEPTH,
    retrieve: Retriever | None = None,
    within: Any | None = None,
) -> MultiRound:
    """Round 1 is hybrid(q); each next round queries q plus the salient phrases of each of the
    previous round's top `fanout` new passages; all lists are fused into a max-score list.
    With `within` (paths, or the Scope they resolve to), every round searches only there.
    """
    if retrieve is None:
        scoped = {} if within is None else {"within": within}

        def retrieve(text: str, size: int) -> list[dict[str, Any]]:
            return kb.query(text, mode="hybrid", k=size, **scoped)["results"]
    hops = max(1, rounds if rounds is not None else predict_hops(kb, question))
    depth = max(depth, k)
    first = retrieve(question, depth)
    lists = [first]
    steps = [_step(1, question, first)]
    frontier, seen = first, {r["chunk_id"] for r in first}
    for number in range(2, hops + 1):
        found: list[dict[str, Any]] = []
        for seed in frontier[:fanout]:
            text = expand(question, seed["text"])
            if text == question:
                continue
            results = retrieve(text, depth)
            lists.append(results)
            steps.append(_step(number, text, results))
            found.extend(r for r in results if r["chunk_id"] not in seen)
            seen.update(r["chunk_id"] for r in results)
        if not found:
            break
        frontier = found
    results = max_score(lists, k)
    ranking = Ranking(np.array([r["chunk_id"] for r in results], dtype=np.int64),
                      np.array([r["score"] for r in results], dtype=np.float32))
    return MultiRound(ranking, results, hops, steps)


def _step(number: int, query: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    """One query of one round, with the passages it returned."""
    return {"round": number, "query": query,
            "passages": [{"chunk_id": r["chunk_id"], "source": r["source"]} for r in results]}

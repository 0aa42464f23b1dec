"""Multi-round retrieval without an LLM: expand the query with what the last round found.

Built on the query engine (`engine.py`): every function takes it as `engine`, and every round
searches the scope it is given (a person's grants and the paths they asked for).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from psirag_kb.errors import KBError
from psirag_kb.search.mentions import MENTION_SEEDS, MENTION_TERMS, STEP_PREFIX, mention_list
from psirag_kb.search.phrases import required
from psirag_kb.search.rows import result_row
from psirag_kb.storage.records import Ranking
from psirag_kb.storage.titles import SEPARATOR, split_title
from psirag_kb.text import LOWER_WORD

log = logging.getLogger(__name__)

DEFAULT_HOPS = 2
"""Rounds used when the hop discriminator cannot judge the question (another embedding model)."""
ROUND_DEPTH = 10
"""Passages each round's hybrid retrieval returns."""
MAX_ROUNDS = 2
"""Rounds at most, whatever the hop count: a third round's queries carry names two passages
away from the question, and with ten lists fused by best rank their first passages crowd the
question's own out of the top 5 (docs/benchmarks/archive.md: MuSiQue recall@5 0.658 with up to
4 rounds, 0.679 with 2; HotpotQA and PopQA the same)."""
FANOUT = 3
"""Top passages of a round that each seed one expanded query in the next round."""
MAX_TERMS = 4
"""Salient phrases taken from one passage (by default)."""
EXPANSION_TERMS: int | None = None
"""Names of a seed passage in its expanded query: all of them, its header's titles not left
out (docs/benchmarks/default-mode.md, the mention list: MAX_TERMS with the header's titles left
out measured 0.713 / 0.920 on MuSiQue 1-50 / HotpotQA against 0.707 / 0.925, not better on
both)."""
LATER_MODE = "sparse"
"""How a later round ranks its expanded queries: BM25 of the question and the names, no model
pass (docs/benchmarks/default-mode.md, issue 42: recall@5 on HotpotQA 0.85 to 0.915, on PopQA
0.592 to 0.623, on MuSiQue 0.679 to 0.633, a loss, at a quarter of the model's texts; the
question's vector moved toward stored passage vectors measured lower on HotpotQA and PopQA)."""
DENSE_EXPANSIONS = 1
"""A multi-hop question's later round also ranks this many of its expanded queries (the best
seeds' first) by their own vectors, all in ONE batched model call, each dense list fused beside
its BM25 list (docs/benchmarks/default-mode.md: recall@5 on held-out MuSiQue 0.587 to 0.645,
HotpotQA 0.915 to 0.910; all 3 expansions found no more than the first one's, at twice the
texts). A one-hop question's rounds stay BM25-only (the pass for every question cost PopQA 2
points). The price: about 2.5 times the CPU of a multi-hop question, so it is skipped while
other questions wait for the model (BUSY_BACKLOG); 0 restores the question as the only model
text."""
BUSY_BACKLOG = 1
"""Other questions' texts queued for the query model at which a multi-hop question's later
round skips its embedded expansion (BM25 only, as a one-hop question's): the extra pass would
make each of them wait longer. One client always gets the expansion; twenty get round 2 by BM25
(docs/benchmarks/default-mode.md, "Under load": with it 20 clients got 0.60 of hybrid's
throughput, against 0.28, and recall@5 on the 40 MuSiQue questions asked 0.681 under that load,
0.706 alone; a limit of 4 queued texts kept 0.688 at 30.5 CPU ms per question against 22.8)."""
ABBREVIATION = 4
"""A capitalised word with a full stop joins the next name only up to this length ("J.", "Mrs.")."""
RRF_K = 60
SINGLE_HOP_MODE = "flat_hybrid"
"""Each round of a one-hop question: on single-hop sets the tree's list costs recall."""
ONE_HOP_ROUNDS = 2
"""Rounds of a one-hop question too: its best passages name the answer ("born in New York
City"), whose own passage the question's words rarely find; one round of those names finds it
(docs/benchmarks/archive.md: PopQA recall@5 0.512 with one round, 0.592 with two, where each
question's second gold passage is its answer's page; the multi-hop sets the same)."""
MULTI_HOP_MODE = "hybrid"
"""Each round of a multi-hop question."""
MENTION_MODES = (MULTI_HOP_MODE, SINGLE_HOP_MODE)
"""Modes whose second round adds the mention list (`mentions.py`)."""
MENTION_AT = 2
"""Where the mention list goes among the second round's fused lists (earlier lists win ties
of rank): after the first expansion's BM25 list (docs/benchmarks/default-mode.md, issue 42:
first, second, third or last measured 0.702, 0.707, 0.707 and 0.707 on MuSiQue 1-50)."""

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
_DISCOURSE = frozenset(
    "also although because besides consequently even finally furthermore hence however "
    "indeed instead later meanwhile moreover nevertheless nonetheless note otherwise perhaps "
    "similarly still then therefore thus today unlike yet each every all any both such other "
    "see only if not no yes another".split()
)
"""Words that open a clause; never the first word of a name found in a passage."""
_STOP = _COMMON | _DISCOURSE
_OPENERS = re.compile(r"[\s\"'“‘(\[*>#\-–—•]+$")
_BULLET = re.compile(r"(?:^|\n)[ \t]*(?:\d+[.)]|[a-z][.)])$")


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
    from psirag_kb.search.hops import HopDiscriminator

    return HopDiscriminator.load()


def predict_hops(engine: Any, question: str, vector: np.ndarray | None = None) -> int:
    """The hop discriminator's 1..4 for a question, or DEFAULT_HOPS when it cannot judge it."""
    try:
        model = _hop_model()
        if model.dim != engine.dim:
            return DEFAULT_HOPS
        return int(model.predict(question, engine.embed_query(question) if vector is None
                                 else vector))
    except KBError as exc:
        log.warning("hop discriminator unavailable (%s); using %d rounds", exc, DEFAULT_HOPS)
        return DEFAULT_HOPS


def sentence_start(text: str, position: int) -> bool:
    """Whether `position` begins a sentence, a line or a list item (after any opening quote,
    bracket or bullet), where a capital says nothing about a name."""
    before = _OPENERS.sub("", text[max(0, position - 40):position])
    return not before or before[-1] in "\n.!?:;" or _BULLET.search(before) is not None


def capitalised_spans(text: str) -> list[str]:
    """Runs of capitalised words (names, places, works) without leading or trailing filler.

    A capital that only starts a sentence ("Consequently", "Even") is not a name: a single word
    at a sentence start is dropped when it is a clause opener or the text also writes it in
    lower case, unless the text writes it capitalised in the middle of a sentence too; clause
    openers ("However", "Another") never open a name.
    """
    found: list[tuple[list[str], bool]] = []
    inside: set[str] = set()
    for match in _SPAN.finditer(text):
        words = match.group(0).strip(" .'’-").split()
        starts = sentence_start(text, match.start())
        pieces = []
        for cut in range(len(words) - 1, 0, -1):  # "in C. Another", "Uruk. Lilu": two sentences
            end = words[cut - 1]
            if end.endswith(".") and (words[cut].lower() in _STOP or len(end) > ABBREVIATION):
                pieces.append((words[cut:], True))
                words = words[:cut]
        inside.update(words[1:] if starts else words)
        found.extend([(words, starts), *reversed(pieces)])
    lower = set(LOWER_WORD.findall(text))
    spans = []
    for words, starts in found:
        if starts and len(words) == 1 and words[0] not in inside and (
                words[0].lower() in _STOP or words[0].lower() in lower):
            words = []
        while words and words[0].lower() in _STOP:
            words.pop(0)
        while words and words[-1].lower() in _COMMON:
            words.pop()
        span = " ".join(words).strip(" .'’-")
        if span and (len(words) > 1 or len(span) > 2):
            spans.append(span)
    return spans


def header_parts(header: str) -> list[str]:
    """The title and headings of a chunk's context header ("Title > Section > Subsection")."""
    return [part.strip() for part in header.split(SEPARATOR) if part.strip()]


def salient_phrases(query: str, text: str, limit: int | None = MAX_TERMS,
                    header: str = "") -> list[str]:
    """A passage's names (capitalised spans) that are neither in the query, its titles nor
    chosen yet: the first `limit` of them (None: all).

    The passage's own titles (its context header's document title and headings, and a short
    first line) are left out: they name what the query already matched, while the names in its
    body point to the next hop (the bridge entity).
    """
    parts = header_parts(header)
    title, body = split_title(text)
    known = " ".join([query, title, *parts]).lower()
    chosen: list[str] = []
    for phrase in capitalised_spans(body):
        low = phrase.lower()
        if low in known or any(low in c.lower() for c in chosen):
            continue
        chosen.append(phrase)
        if len(chosen) == limit:
            break
    return chosen


def expand(query: str, text: str, limit: int | None = MAX_TERMS, header: str = "") -> str:
    """The query followed by the passage's salient phrases (just the query when it has none)."""
    return " ".join([query, *salient_phrases(query, text, limit, header)])


def max_score(lists: list[np.ndarray], k: int) -> Ranking:
    """Fuse ranked id lists by each id's best reciprocal rank, earlier lists winning ties."""
    best: dict[int, tuple[float, int]] = {}
    for index, ids in enumerate(lists):
        for rank, chunk in enumerate(ids.tolist(), start=1):
            score = 1.0 / (RRF_K + rank)
            if chunk not in best or score > best[chunk][0]:
                best[chunk] = (score, index)
    order = sorted(best.items(), key=lambda item: (-item[1][0], item[1][1]))[:k]
    return Ranking(np.array([c for c, _ in order], dtype=np.int64),
                   np.array([v[0] for _, v in order], dtype=np.float32))


def multi_round(
    engine: Any,
    question: str,
    k: int,
    rounds: int | None = None,
    fanout: int = FANOUT,
    depth: int = ROUND_DEPTH,
    within: Any | None = None,
    mode: str = "hybrid",
    vector: np.ndarray | None = None,
    detail: bool = True,
) -> MultiRound:
    """Round 1 ranks q; each next round ranks q plus the salient phrases of each of the
    previous round's top `fanout` new passages; all lists are fused into a max-score list.

    The question goes through the model once (the hop discriminator and round 1 share its
    vector): a later round ranks its expanded queries in LATER_MODE (BM25: the names are
    found where names are found best), the question's vector standing in while BM25 is
    rebuilt. In MULTI_HOP_MODE the round's first DENSE_EXPANSIONS expanded queries also go
    through the model in one batched call, and each one's dense list joins the fusion, unless
    the model is busy with BUSY_BACKLOG other texts. In MENTION_MODES the second round also
    fuses the mention list: the passages of the documents titled by the names in round 1's
    first passage (`mentions.py`, a lookup, no model pass). With `within` (paths, or the Scope
    they resolve to), every round searches only there. Without `detail`, only the ranking is
    made: no result rows, no steps (mode auto's ranking reads its rows once, later).
    """
    scope = None if within is None else engine.scope_of(within)
    vector = engine.embed_query(question) if vector is None else vector
    hops = max(1, rounds if rounds is not None else predict_hops(engine, question, vector))
    depth = max(depth, k)
    phrases = required(question)
    first = engine.rank(question, mode, depth, scope, vector=vector, phrases=phrases).ids
    lists, queries, steps = [first], [(1, question)], [first]
    frontier, seen = first, set(first.tolist())
    for number in range(2, min(hops, MAX_ROUNDS) + 1):
        seeds = frontier[:fanout].tolist()
        found_texts = engine.store.texts(seeds)
        texts = [expand(question, found_texts[i][0], EXPANSION_TERMS)
                 for i in seeds if i in found_texts]
        texts = [t for t in dict.fromkeys(texts) if t != question]
        if not texts:
            break
        found: list[int] = []
        start = len(lists)
        for text, ranked in zip(texts, _later(engine, texts, mode, depth, scope, vector, phrases),
                                strict=True):
            lists.extend(ranked)
            ids = np.array(list(dict.fromkeys(np.concatenate(ranked).tolist())), dtype=np.int64)
            queries.append((number, text))
            steps.append(ids)
            found.extend(i for i in ids.tolist() if i not in seen)
            seen.update(ids.tolist())
        if number == 2 and mode in MENTION_MODES:
            names, mentioned = _mentions(engine, question, frontier[:MENTION_SEEDS].tolist(),
                                         found_texts, depth, scope)
            if mentioned.size:
                lists.insert(min(start + MENTION_AT - 1, len(lists)), mentioned)
                queries.append((number, names))
                steps.append(mentioned)
                found.extend(i for i in mentioned.tolist() if i not in seen)
                seen.update(mentioned.tolist())
        if not found:
            break
        frontier = np.array(list(dict.fromkeys(found)), dtype=np.int64)
    ranking = max_score(lists, k)
    if not detail:  # the ranking alone: no rows read for the passages each query found
        return MultiRound(ranking, [], hops)
    return _hydrated(engine, ranking, lists, queries, steps, hops)


def _mentions(engine: Any, question: str, seeds: list[int], texts: dict[int, tuple[str, str]],
              depth: int, scope: Any) -> tuple[str, np.ndarray]:
    """The names in the seed passages (as `salient_phrases` picks them; `texts` holds at least
    the round's seeds) and the passages of the documents they title (`mentions.py`)."""
    missing = [i for i in seeds if i not in texts]
    texts = {**texts, **engine.store.texts(missing)} if missing else texts
    names = list(dict.fromkeys(name for i in seeds if i in texts for name in salient_phrases(
        question, texts[i][0], MENTION_TERMS, texts[i][1])))
    return STEP_PREFIX + "; ".join(names), mention_list(engine, names, question, depth, scope)


def _later(engine: Any, texts: list[str], mode: str, depth: int, scope: Any,
           vector: np.ndarray, phrases: list[str]) -> list[list[np.ndarray]]:
    """Each expanded query's ranked lists: BM25's, then (a multi-hop question's first
    DENSE_EXPANSIONS) the dense list of its own vector, those vectors from one batched model
    call. The question's quotes hold in every list."""
    embedded = DENSE_EXPANSIONS if mode == MULTI_HOP_MODE and not _busy(engine) else 0
    vectors = list(engine.embed_queries(texts[:embedded])) if embedded else []
    ranked = []
    for number, text in enumerate(texts):
        lists = [engine.rank(text, LATER_MODE, depth, scope, vector=vector, phrases=phrases).ids]
        if number < len(vectors):
            lists.append(engine.rank(text, "dense", depth, scope, vector=vectors[number],
                                     phrases=phrases).ids)
        ranked.append(lists)
    return ranked


def _busy(engine: Any) -> bool:
    """Whether the query model has BUSY_BACKLOG other texts queued (an engine that cannot
    tell is never busy)."""
    backlog = getattr(engine, "model_backlog", None)
    return backlog is not None and backlog() >= BUSY_BACKLOG


def auto_rank(engine: Any, question: str, k: int, scope: Any = None,
              vector: np.ndarray | None = None) -> Ranking:
    """Mode auto: a question the hop discriminator judges one-hop gets ONE_HOP_ROUNDS rounds
    of flat dense + BM25; one needing more gets its rounds (up to MAX_ROUNDS) of hybrid."""
    vector = engine.embed_query(question) if vector is None else vector
    hops = predict_hops(engine, question, vector)
    if hops <= 1:
        return multi_round(engine, question, k, rounds=ONE_HOP_ROUNDS, within=scope,
                           mode=SINGLE_HOP_MODE, vector=vector, detail=False).ranking
    return multi_round(engine, question, k, rounds=hops, within=scope, mode=MULTI_HOP_MODE,
                       vector=vector, detail=False).ranking


def _hydrated(engine: Any, ranking: Ranking, lists: list[np.ndarray],
              queries: list[tuple[int, str]], found: list[np.ndarray], hops: int) -> MultiRound:
    """The fused results as result rows and each query's step (the passages its lists
    `found`), from one row lookup."""
    hits = engine.store.hits(set(np.concatenate([ranking.ids, *lists]).tolist()))
    pairs = zip(ranking.ids.tolist(), ranking.scores.tolist(), strict=True)
    results = [result_row(hits[i], i, score, 0) for i, score in pairs if i in hits]
    for number, row in enumerate(results, start=1):
        row["rank"] = number
    kept = np.array([r["chunk_id"] for r in results], dtype=np.int64)
    scores = np.array([r["score"] for r in results], dtype=np.float32)
    steps = [{"round": number, "query": text,
              "passages": [{"chunk_id": i, "source": hits[i].source}
                           for i in ids.tolist() if i in hits]}
             for (number, text), ids in zip(queries, found, strict=True)]
    return MultiRound(Ranking(kept, scores), results, hops, steps)

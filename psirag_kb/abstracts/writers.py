"""Keyword and summative abstracts of tree nodes: an offline phrase extractor and the LLM path."""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from psirag_kb.errors import ConfigError, LLMError, Ungrounded
from psirag_kb.ingest.embedding import Embedder, normalise
from psirag_kb.llm.client import OllamaLLM
from psirag_kb.llm.grounding import check_abstract
from psirag_kb.text import LETTER_WORD, STOP_WORDS

if TYPE_CHECKING:
    from psirag_kb.llm.hosts import LLMPool

log = logging.getLogger(__name__)

MAX_KEYWORDS = 20
MAX_CANDIDATES = 60
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 8
MAX_ROUNDS = 6

NAME_JOINERS = frozenset("of for the de del la le von van der du da".split())
"""Lower-case words allowed inside a name, between capitalised words ("Bank of America")."""
MAX_UNITS = 3
"""Words or whole names in one phrase."""
MAX_WORDS = 3
"""Words in a phrase of several units."""
MAX_NAME_WORDS = 6
"""Words in one name, kept whole ("United Kingdom of Great Britain")."""

_TOKEN = re.compile(r"[^\W_]+(?:['’.&-][^\W_]+)*")
_NUMBER = re.compile(r"[\d.,:/'’-]+(?:st|nd|rd|th|s)?")


def _units(run: list[str]) -> list[tuple[int, int] | None]:
    """A run's words grouped into phrase units: whole names ("Kingdom of Great Britain"),
    single content words, and None for each word that ends a phrase (a stop word)."""
    low = [w.lower() for w in run]
    content = [w not in STOP_WORDS and w not in NAME_JOINERS and not _DOTTED.search(w)
               and (len(w) > 2 or (len(w) == 2 and raw.isupper()))
               for w, raw in zip(low, run, strict=True)]
    for i in _shouted(run):
        content[i] = False
    capital = [ok and w[:1].isupper() for ok, w in zip(content, run, strict=True)]
    units: list[tuple[int, int] | None] = []
    i = 0
    while i < len(run):
        if not content[i]:
            units.append(None)
            i += 1
            continue
        end = i + 1
        while capital[i] and end < len(run):
            if capital[end]:
                end += 1
                continue
            join = end
            while join < len(run) and join - end < 2 and run[join] in NAME_JOINERS:
                join += 1  # lower-case joiners only: "OF" in shouted text ends the name
            if join == end or join >= len(run) or not capital[join]:
                break
            end = join + 1
        units.append((i, end))
        i = end
    return units


def _shouted(run: list[str]) -> Iterator[int]:
    """Positions of words in upper-case stretches (two or more words in capitals, one of them
    long: the shouting of licences and disclaimers, not names or acronyms)."""
    caps = [len(w) > 1 and w.isupper() for w in run]
    i = 0
    while i < len(run):
        end = i
        while end < len(run) and caps[end]:
            end += 1
        if end - i >= 2 and any(len(run[j]) >= 5 for j in range(i, end)):
            yield from range(i, end)
        i = max(end, i + 1)


def _ngrams(run: list[str]) -> Iterator[str]:
    """Phrases of 1-3 units (at most 3 words, or one name of up to 6) from one punctuation-free
    run: names are never cut, stop words never sit at either edge, and not all numbers."""
    units = _units(run)
    numeric = [bool(_NUMBER.fullmatch(w)) for w in run]
    for i, first in enumerate(units):
        if first is None:
            continue
        for last in units[i:i + MAX_UNITS]:
            if last is None:
                break
            start, end = first[0], last[1]
            if end - start > (MAX_NAME_WORDS if last is first else MAX_WORDS):
                break
            if numeric[start] and (last is not first or all(numeric[start:end])):
                break  # no "1998 WIDE Project": a number opens no phrase of several units
            yield " ".join(run[start:end])


_CODE_CHARS = re.compile(r"[=;{}()\[\]<>]")
_CODE_START = re.compile(r"(?:\t| {4}|>>> |\.\.\. |\$ )")
_DOTTED = re.compile(r"[^\W\d_]{2,}\.[^\W\d_]")
"""A dotted name (self.data, README.md): code or a file, not a topic."""


def _is_code(line: str) -> bool:
    """True for a line that reads as code: indented, a prompt, or dense in brackets and
    operators."""
    marks = len(_CODE_CHARS.findall(line))
    return bool(_CODE_START.match(line)) or (marks >= 2 and marks * 10 >= len(line.strip()))


def candidate_phrases(text: str) -> list[str]:
    """Noun-phrase-like n-grams of a text's prose lines, each a literal substring of it (with
    repeats); lines of code give none."""
    out: list[str] = []
    for line in text.splitlines():
        if line.strip() and not _is_code(line):
            out.extend(_line_phrases(line))
    return out


def _line_phrases(text: str) -> list[str]:
    """The candidate phrases of one line, from its runs of words between punctuation."""
    out: list[str] = []
    run: list[str] = []
    last_end = -1
    for match in _TOKEN.finditer(text):
        if run and text[last_end:match.start()] != " ":
            out.extend(_ngrams(run))
            run = []
        run.append(match.group())
        last_end = match.end()
    if run:
        out.extend(_ngrams(run))
    return out


def _is_keyword_list(text: str) -> bool:
    """True for a text shaped like a keyword abstract: short phrases joined by ", "."""
    items = text.split(", ")
    return len(items) >= 2 and all(
        0 < len(item.split()) <= 6 and not re.search(r"[\n;:!?]|\.\s", item) for item in items
    )


def child_phrases(text: str, abstract: bool | None = None) -> Counter[str]:
    """Candidate phrases of one child: a keyword abstract's own phrases, else its n-grams.

    `abstract` says whether the child is an abstract (None: a text shaped like a keyword
    list is taken for one); a passage's text is never read as a list of keywords.
    """
    if abstract is not False and _is_keyword_list(text):
        items = [item.strip() for item in text.split(", ") if re.search(r"[^\W_]", item)]
        ranked: Counter[str] = Counter()
        for position, item in enumerate(items):  # a list's first third counts 3, its last 1
            ranked[item] += 3 - (3 * position) // len(items)
        return ranked
    return Counter(candidate_phrases(text))


class KeywordAbstractor:
    """Offline keyword abstracts: candidate phrases scored against the node, diversified by MMR."""

    def __init__(
        self,
        embedder: Embedder,
        max_keywords: int = MAX_KEYWORDS,
        diversity: float = 0.5,
        max_candidates: int = MAX_CANDIDATES,
        cache_limit: int = 100_000,
    ) -> None:
        if not 0.0 <= diversity <= 1.0:
            raise ConfigError(f"diversity must be between 0 and 1, not {diversity}")
        self.embedder = embedder
        self.max_keywords = max_keywords
        self.diversity = diversity
        self.max_candidates = max_candidates
        self.cache_limit = cache_limit
        self._vectors: dict[str, np.ndarray] = {}

    def abstract(self, texts: list[str], vectors: np.ndarray | None = None) -> str:
        """The keyword abstract of one group of child texts."""
        return self.abstract_many([texts], None if vectors is None else [vectors])[0]

    def abstract_many(
        self, groups: list[list[str]], vectors: Sequence[np.ndarray] | None = None,
        idf: dict[str, float] | None = None, abstracts: bool | None = None,
        lexical: bool = False, counts: list[list[Counter[str]]] | None = None,
    ) -> list[str]:
        """One abstract per group of child texts; `vectors` are the children's embeddings if known.

        Without `vectors` each child is represented by its candidates' weighted phrase vectors, so
        the children themselves are never re-embedded. A group without any words gets "".
        Phrase rarity is measured over these groups, or given as `idf` (see `idf_of`).
        `abstracts` says whether the children are abstracts or passages (see `child_phrases`).
        `lexical` picks phrases by weight and coverage of the children and embeds none: the
        abstract job's way, since embedding the candidates cost about as much as embedding the
        new chunks on a small change (docs/benchmarks/archive.md, "Abstracts as part of indexing").
        `counts` are the groups' `phrases_of`, when the caller has them already.
        """
        if vectors is not None and len(vectors) != len(groups):
            raise ValueError("vectors must hold one array per group")
        if counts is None:
            counts = self.phrases_of(groups, abstracts)
        idf = self._idf(counts) if idf is None else idf
        pools = [self._candidates(group, idf) for group in counts]
        if not lexical:
            self._embed_missing([s for cands in pools for s in cands[0]])
        out = []
        for number, (cands, weights, occurs, spare) in enumerate(pools):
            if not cands:
                out.append("")
            elif lexical:
                out.append(self._select_lexical(cands, weights, occurs, spare))
            else:
                child_vectors = (None if vectors is None
                                 else np.asarray(vectors[number], np.float32))
                out.append(self._select(cands, weights, occurs, child_vectors, spare))
        return out

    @staticmethod
    def phrases_of(groups: list[list[str]],
                   abstracts: bool | None = None) -> list[list[Counter[str]]]:
        """The candidate phrases of every child of `groups` (see `child_phrases`)."""
        return [[child_phrases(t, abstracts) for t in group] for group in groups]

    def idf_of(self, groups: list[list[str]], abstracts: bool | None = None,
               counts: list[list[Counter[str]]] | None = None) -> dict[str, float]:
        """Phrase rarity over every child of `groups` (or of their `phrases_of`, `counts`),
        for abstracting them in several calls."""
        return self._idf(self.phrases_of(groups, abstracts) if counts is None else counts)

    @staticmethod
    def _idf(counts: list[list[Counter[str]]]) -> dict[str, float]:
        """Inverse document frequency of lower-cased phrases over every child of every group."""
        df: Counter[str] = Counter()
        n_docs = 0
        for group in counts:
            for child in group:
                df.update({s.lower() for s in child})
                n_docs += 1
        return {k: math.log((n_docs + 1) / (v + 1)) + 1.0 for k, v in df.items()}

    def _candidates(
        self, children: list[Counter[str]], idf: dict[str, float]
    ) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
        """Candidates to score (surface forms, weights, child occurrences) and spare phrases.

        Phrases are ranked by a tf-idf-like weight, the best few of each child first. Only
        3 per child (at least 8, at most `max_candidates`) may need embedding; phrases whose
        vectors are cached already (the children's own keywords on upper layers) join for free.
        The next unembedded phrases, in rank order, are spares that fill a short abstract.
        """
        surfaces: dict[str, Counter[str]] = {}
        child_tf: list[Counter[str]] = []
        for child in children:
            tf: Counter[str] = Counter()
            for surface, count in child.items():
                key = surface.lower()
                tf[key] += count
                surfaces.setdefault(key, Counter())[surface] += count
            child_tf.append(tf)
        if not surfaces:
            return [], np.zeros(0, np.float32), np.zeros((0, len(children)), bool), []
        form = {k: c.most_common(1)[0][0] for k, c in surfaces.items()}
        group_tf: Counter[str] = Counter()
        for tf in child_tf:
            group_tf.update(tf)

        def weight(key: str, count: int) -> float:
            words = key.count(" ") + 1
            capital = any(w[:1].isupper() for w in form[key].split())
            bonus = (1.0 + 0.3 * (min(words, 3) - 1)) * (1.25 if capital else 1.0)
            return (1.0 + math.log(count)) * idf[key] * bonus

        score = {k: weight(k, c) for k, c in group_tf.items()}
        ranked: dict[str, None] = {}
        per_child = max(1, self.max_candidates // (2 * len(children)))
        # ties keep the children's own order (a keyword list's first phrases come first)
        best = [_best(tf, weight, per_child) for tf in child_tf]
        for rank in range(per_child):  # round robin: every child's best phrase, then second...
            ranked.update(dict.fromkeys(local[rank] for local in best if rank < len(local)))
        ranked.update(dict.fromkeys(sorted(score, key=lambda k: -score[k])))
        budget = min(self.max_candidates, max(8, 3 * len(children)))
        keys: list[str] = []
        spare: list[str] = []
        for key in ranked:
            if form[key] in self._vectors:
                if len(keys) < 10 * self.max_candidates:
                    keys.append(key)
            elif budget > 0:
                keys.append(key)
                budget -= 1
            elif len(spare) < self.max_keywords:
                spare.append(form[key])
        cands = [form[k] for k in keys]
        weights = np.array([score[k] for k in keys], dtype=np.float32)
        occurs = np.array([[k in tf for tf in child_tf] for k in keys], dtype=bool)
        return cands, weights, occurs, spare

    def _embed_missing(self, phrases: list[str]) -> None:
        """Embed every phrase not cached yet, in one call."""
        missing = [p for p in dict.fromkeys(phrases) if p not in self._vectors]
        if not missing:
            return
        if len(self._vectors) + len(missing) > self.cache_limit:
            self._vectors.clear()
        fresh = self.embedder.embed(missing)
        self._vectors.update(zip(missing, fresh, strict=True))

    def _select(
        self,
        cands: list[str],
        weights: np.ndarray,
        occurs: np.ndarray,
        child_vectors: np.ndarray | None,
        spare: list[str],
    ) -> str:
        """Pick up to max_keywords candidates by MMR, favouring children not yet covered."""
        p = np.stack([self._vectors[c] for c in cands]).astype(np.float32)
        if child_vectors is None or child_vectors.shape[0] != occurs.shape[1]:
            child_vectors = normalise(occurs.T.astype(np.float32) @ (weights[:, None] * p))
        centre = normalise(child_vectors.mean(axis=0, keepdims=True))[0]
        to_child = p @ child_vectors.T
        own = np.where(occurs, to_child, -1.0).max(axis=1)
        relevance = 0.5 * (p @ centre) + 0.3 * own + 0.2 * (weights / weights.max())
        similarity = p @ p.T
        lam = 1.0 - self.diversity
        redundancy = np.zeros(len(cands), dtype=np.float32)
        covered = np.zeros(occurs.shape[1], dtype=bool)
        open_ = np.ones(len(cands), dtype=bool)
        padded = [f" {c.lower()} " for c in cands]
        picked: list[int] = []
        while len(picked) < self.max_keywords and open_.any():
            fresh = occurs[:, ~covered].any(axis=1)
            score = lam * relevance - (1.0 - lam) * redundancy + 0.15 * fresh
            best = int(np.argmax(np.where(open_, score, -np.inf)))
            picked.append(best)
            covered |= occurs[best]
            redundancy = np.maximum(redundancy, similarity[:, best])
            open_[best] = False
            for i in np.flatnonzero(open_):
                if padded[i] in padded[best] or padded[best] in padded[i]:
                    open_[i] = False
        return self._fill([cands[i] for i in picked], spare)

    def _select_lexical(
        self, cands: list[str], weights: np.ndarray, occurs: np.ndarray, spare: list[str]
    ) -> str:
        """Pick up to max_keywords candidates by weight, favouring children not yet covered."""
        relevance = weights / weights.max()
        covered = np.zeros(occurs.shape[1], dtype=bool)
        open_ = np.ones(len(cands), dtype=bool)
        padded = [f" {c.lower()} " for c in cands]
        picked: list[int] = []
        while len(picked) < self.max_keywords and open_.any():
            score = relevance + 0.5 * occurs[:, ~covered].any(axis=1)
            best = int(np.argmax(np.where(open_, score, -np.inf)))
            picked.append(best)
            covered |= occurs[best]
            open_[best] = False
            for i in np.flatnonzero(open_):
                if padded[i] in padded[best] or padded[best] in padded[i]:
                    open_[i] = False
        return self._fill([cands[i] for i in picked], spare)

    def _fill(self, chosen: list[str], spare: list[str]) -> str:
        """The chosen phrases, topped up from the spares that do not overlap them, joined."""
        taken = [f" {c.lower()} " for c in chosen]
        for phrase in spare:
            if len(chosen) >= self.max_keywords:
                break
            pad = f" {phrase.lower()} "
            if not any(pad in t or t in pad for t in taken):
                chosen.append(phrase)
                taken.append(pad)
        return ", ".join(chosen)


# -- the LLM path ---------------------------------------------------------------------------------

_EXAMPLE_INPUT = """Hotel Tallcorn
The Hotel Tallcorn stands in Marshalltown, Iowa...

The Oberoi Group
The Oberoi Group is a hotel company whose head office is in Delhi...

Hotel Bond
Hotel Bond is a historic hotel that was built in two phases, in 1913 and 1921...

Mohan Singh Oberoi
Rai Bahadur Mohan Singh Oberoi (15 August 1898 - 3 May 2002) was an Indian hotelier...

Ritz-Carlton Jakarta
The Ritz-Carlton Jakarta is a hotel and skyscraper in Jakarta..."""

_EXAMPLE_SUMMARY = (
    "Summary: The Hotel Tallcorn in Marshalltown, Iowa, opened in 1928 and now serves as an "
    "apartment building; in 1956 it was part of one of the largest hotel sales in U.S. history. "
    "Hotel Bond in Hartford, Connecticut, was built in two phases and, facing competition, passed "
    "through several owners and bankruptcies before becoming a Homewood Suites by Hilton; its "
    "ballroom reopened in 2001. The Oberoi Group, a luxury hotel company based in Delhi and "
    "founded in 1934 by Mohan Singh Oberoi, runs more than 30 hotels and two cruise ships. The "
    "Ritz-Carlton Jakarta, a skyscraper hotel in Indonesia opened in 2005, has one tower for the "
    "hotel and one for apartments, next to the JW Marriott Hotel."
)

_EXAMPLE_KEYWORDS = (
    "historic hotels, hotel companies, bankruptcies and renovations, hotel brands, Indian "
    "hospitality industry, skyscraper hotels, hotel locations, construction dates, hotel "
    "architecture, hotel founders, changes of ownership, Marshalltown Iowa, Hotel Tallcorn, "
    "Sheraton sale, The Oberoi Group, Mohan Singh Oberoi, Hotel Bond, Hartford Connecticut, "
    "Bond Ballroom, Ritz-Carlton Jakarta"
)

_SUMMARY_PROMPT = """You are a capable assistant for summarising documents. Summarise the list of \
documents you are given, keeping as many of their key details and of the relationships between \
them as you can.
(1) Begin your answer with "Summary:". Write the summary itself and nothing else: no filler such \
as "Here is a summary of the documents".
(2) Stay faithful to the documents. Do not paraphrase without need, and do not add anything the \
documents do not say.
(3) Use no more than {words} words. A longer summary is not necessarily a better one.
An example of the task follows."""

_KEYWORD_PROMPT = """You are a capable assistant for summarising documents. Condense the list of \
text paragraphs you are given into key phrases or words of three kinds, in this order:
- key phrases giving an overview of the kinds of information the text covers;
- key phrases naming the themes the paragraphs share;
- key phrases setting apart the particular content of each paragraph.
Rules:
(1) Write every key phrase on one single line, separated by commas, exactly as Python's \
",".join(keywords) would print them.
(2) Each key phrase must differ from all the others.
(3) Write the list and nothing else: no lead-in such as "Here are the key phrases:" and no \
group labels such as "Theme key phrases:".
(4) Give no more than {count} key phrases.
An example of the task follows."""

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_LEAD_LINE = re.compile(
    r"^\s*(?:here (?:is|are)|below (?:is|are)|sure\b|certainly\b)(?:[^\n:]*|[^\n]*:)\s*\n+", re.I
)
_LEAD_COLON = re.compile(r"^\s*(?:here (?:is|are)|below (?:is|are))[^:\n]*:\s*", re.I)
_PREFIX = re.compile(
    r"^\s*[*_#>\s]*(?:summary|abstract|keywords?|key ?phrases?|key words)\s*[*_]*\s*:\s*[*_]*\s*",
    re.I,
)
_LABEL = re.compile(r"^[\w '-]{0,40}(?:key ?phrases?|keywords?|themes?|information)\s*:\s*", re.I)
_BULLET = re.compile(r"^\s*(?:[-*•·▪–]|\d+[.)])\s+", re.M)
_QUOTES = "\"'“”‘’`*_ \t\n"
_ERRORISH = re.compile(
    r"^(?:error\b|exception\b|traceback\b|internal server error|i'?m sorry|i am sorry|"
    r"i cannot|i can'?t|as an ai)",
    re.I,
)


def _strip_preamble(text: str) -> str:
    """Remove thinking blocks, a "Here are ..." lead-in and a "Summary:"-style prefix."""
    text = _THINK.sub("", text).strip()
    text = _LEAD_LINE.sub("", text, count=1) if "\n" in text.strip() else text
    text = _LEAD_COLON.sub("", text, count=1)
    text = text.strip(_QUOTES)
    return _PREFIX.sub("", text, count=1).strip()


def clean_summary(text: str) -> str:
    """A summary reply without prefixes, quotes, bullets or extra spaces ("" if nothing is left)."""
    text = _BULLET.sub("", _strip_preamble(text))
    return " ".join(text.split()).strip(_QUOTES)


def clean_keywords(text: str, max_keywords: int) -> str:
    """A keyword reply as at most `max_keywords` distinct phrases joined by ", "."""
    seen: dict[str, str] = {}
    for raw in re.split(r"[,;\n]", _strip_preamble(text)):
        item = _LABEL.sub("", _BULLET.sub("", raw.strip())).strip(_QUOTES).rstrip(".").strip()
        item = " ".join(item.split())
        if not re.search(r"[^\W_]", item) or len(item.split()) > 10 or item.endswith(":"):
            continue  # wordless, a sentence, or a lead-in ("The key phrases in the text are:")
        seen.setdefault(item.casefold(), item)
        if len(seen) == max_keywords:
            break
    return ", ".join(seen.values())


def looks_like_junk(text: str) -> bool:
    """True for a cleaned reply that must not be stored: empty, wordless or an error message."""
    letters = sum(ch.isalnum() for ch in text)
    return letters < 2 or bool(_ERRORISH.match(text.strip()))


_GENERIC = frozenset("hotel hotels group summary indian august suites ballroom".split())
"""Capitalised words of the example that are not names of its own."""
_ABSTRACT_WORDS = frozenset("""
architecture becoming brands building built changes companies company competition construction
dates facing founders group historic history industry largest locations luxury next owners
ownership part passed phases runs sale sales serves summary tower
""".split())
"""Words of the example's replies that any abstract may use."""


def _words(text: str) -> set[str]:
    """The distinct lower-cased words of a text."""
    return {w.lower() for w in LETTER_WORD.findall(text)}


def _example_names() -> frozenset[str]:
    """Distinctive names of the one-shot example (Tallcorn, Marshalltown, Oberoi, ...)."""
    text = " ".join((_EXAMPLE_INPUT, _EXAMPLE_SUMMARY, _EXAMPLE_KEYWORDS))
    return frozenset(w.lower() for w in LETTER_WORD.findall(text)
                     if w[:1].isupper() and len(w) >= 4 and w.lower() not in STOP_WORDS
                     and w.lower() not in _GENERIC)


def _example_words() -> frozenset[str]:
    """Particular words of the example's replies (hotels, bankruptcies, Tallcorn, ...)."""
    return frozenset(w for w in _words(_EXAMPLE_SUMMARY + " " + _EXAMPLE_KEYWORDS)
                     if len(w) >= 4 and w not in STOP_WORDS and w not in _ABSTRACT_WORDS)


_EXAMPLE_NAMES = _example_names()
_EXAMPLE_WORDS = _example_words()
EXAMPLE_VOCABULARY = _EXAMPLE_NAMES | _EXAMPLE_WORDS
"""Words of the one-shot example an abstract may use only when its children do."""
_EXAMPLE_MARKERS = frozenset({"tallcorn", "marshalltown", "oberoi", "bahadur", "ritz-carlton"})
"""Names so particular to the example that one of them, absent from the input, is a copy."""
_EXAMPLE_PHRASES = tuple(" ".join(LETTER_WORD.findall(p.lower()))
                         for p in _EXAMPLE_KEYWORDS.split(", "))
"""The example's key phrases, as lower-case words."""


def copies_example(text: str, sources: Sequence[str]) -> bool:
    """True for an abstract that repeats the prompt's one-shot example instead of its input:
    one of its most particular names, two of its names or key phrases, or mostly its words,
    that the input never uses."""
    own = _words(text)
    given = _words(" ".join(sources))
    names = (own & _EXAMPLE_NAMES) - given
    if len(names) >= 2 or names & _EXAMPLE_MARKERS:
        return True
    flat = f" {' '.join(LETTER_WORD.findall(text.lower()))} "
    phrases = [p for p in _EXAMPLE_PHRASES if f" {p} " in flat and not set(p.split()) <= given]
    if len(phrases) >= 2:
        return True
    content = {w for w in own if len(w) >= 4 and w not in STOP_WORDS}
    borrowed = (content & _EXAMPLE_WORDS) - given
    return len(borrowed) >= 3 and 2 * len(borrowed) >= len(content)


def estimate_tokens(text: str) -> int:
    """A rough token count (~4 characters a token)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def messages_tokens(messages: list[dict[str, Any]]) -> int:
    """Estimated prompt tokens of a chat."""
    return sum(estimate_tokens(str(m["content"])) + MESSAGE_OVERHEAD_TOKENS for m in messages)


class LLMAbstractor:
    """Abstracts written by an Ollama model with the paper's prompts, split to fit the context."""

    def __init__(
        self,
        llm: OllamaLLM | LLMPool,
        model: str,
        kind: str = "keyword",
        max_keywords: int = MAX_KEYWORDS,
        summary_words: int = 100,
        num_ctx: int = 8192,
        grounding: bool = True,
    ) -> None:
        self.grounding = grounding
        """Refuse a final abstract its children do not support (Ungrounded)."""
        if kind not in ("keyword", "summative"):
            raise ConfigError(f"abstract kind must be keyword or summative, not {kind!r}")
        self.llm, self.model, self.kind = llm, model, kind
        self.max_keywords, self.summary_words, self.num_ctx = max_keywords, summary_words, num_ctx
        if kind == "keyword":
            system, example = _KEYWORD_PROMPT.format(count=max_keywords), _EXAMPLE_KEYWORDS
            self.reply_tokens = 8 * max_keywords + 64
        else:
            system, example = _SUMMARY_PROMPT.format(words=summary_words), _EXAMPLE_SUMMARY
            self.reply_tokens = 2 * summary_words + 64
        self._preamble = [
            {"role": "system", "content": system},
            {"role": "user", "content": _EXAMPLE_INPUT},
            {"role": "assistant", "content": example},
        ]
        margin = num_ctx // 20
        self.input_budget = (num_ctx - self.reply_tokens - margin
                             - messages_tokens(self._preamble) - MESSAGE_OVERHEAD_TOKENS)
        if self.input_budget < 3 * self.reply_tokens:
            raise ConfigError(
                f"num_ctx {num_ctx} is too small for {kind} abstracts: use at least "
                f"{num_ctx - self.input_budget + 3 * self.reply_tokens}"
            )

    def messages(self, texts: list[str]) -> list[dict[str, Any]]:
        """The chat for one group of children: instructions, the example, then the children."""
        return [*self._preamble, {"role": "user", "content": "\n\n".join(texts)}]

    def abstract(self, texts: list[str], context: Sequence[str] = ()) -> str:
        """The abstract of a node's children, summarised in parts when they do not fit;
        Ungrounded when the final reply is not supported by the children's text (and their
        `context`: file names, headings)."""
        parts = [t.strip() for t in texts if t and t.strip()]
        if not parts:
            raise LLMError("cannot abstract a node whose children hold no text")
        sources = [*parts, *context]
        for _ in range(MAX_ROUNDS):
            if estimate_tokens("\n\n".join(parts)) <= self.input_budget:
                text = self._ask(parts)
                verdict = check_abstract(text, sources, EXAMPLE_VOCABULARY)
                if self.grounding and not verdict:
                    raise Ungrounded(f"model {self.model} wrote an abstract its children do "
                                     f"not support ({verdict.reason}): {text[:80]!r}")
                return text
            groups = self._pack(parts)
            if len(groups) >= len(parts) and len(parts) > 1:
                raise LLMError("abstracts do not shrink enough to fit num_ctx: raise num_ctx")
            log.info("abstracting %d children in %d parts", len(parts), len(groups))
            parts = [self._ask(group) for group in groups]
        raise LLMError(f"children did not fit num_ctx {self.num_ctx} after {MAX_ROUNDS} rounds")

    def _pack(self, texts: list[str]) -> list[list[str]]:
        """Split children, in order, into groups that each fit the input budget."""
        limit = self.input_budget * CHARS_PER_TOKEN
        groups: list[list[str]] = [[]]
        size = 0
        for text in texts:
            for piece in _split_long(text, limit):
                if groups[-1] and size + 2 + len(piece) > limit:
                    groups.append([])
                    size = 0
                size += len(piece) + (2 if groups[-1] else 0)
                groups[-1].append(piece)
        return groups

    def _ask(self, texts: list[str]) -> str:
        """One chat for children that fit; the cleaned reply, or LLMError for junk."""
        reply = self.llm.chat(
            self.model, self.messages(texts), num_ctx=self.num_ctx, num_predict=self.reply_tokens
        )
        if self.kind == "keyword":
            cleaned = clean_keywords(reply, self.max_keywords)
        else:
            cleaned = clean_summary(reply)
        if looks_like_junk(cleaned):
            raise LLMError(
                f"model {self.model} returned an unusable {self.kind} abstract: {reply[:80]!r}"
            )
        if copies_example(cleaned, texts):
            raise Ungrounded(f"model {self.model} returned an unusable {self.kind} abstract that "
                           f"copies the prompt's example: {reply[:80]!r}")
        return cleaned


def _split_long(text: str, limit: int) -> list[str]:
    """Cut a text longer than `limit` characters into pieces at spaces (nothing is dropped)."""
    pieces = []
    while len(text) > limit:
        cut = text.rfind(" ", limit // 2, limit)
        cut = cut if cut > 0 else limit
        pieces.append(text[:cut].strip())
        text = text[cut:].strip()
    if text:
        pieces.append(text)
    return pieces


def _best(tf: Counter[str], weight: Callable[[str, int], float], limit: int) -> list[str]:
    """A child's `limit` best phrases by weight; ties keep the child's own order."""
    return sorted(tf, key=lambda k: -weight(k, tf[k]))[:limit]

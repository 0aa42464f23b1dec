"""Topic labels: a few heading-like noun phrases saying what sets a node apart from its siblings.

A node's profile is the weighted phrases of what it holds: for a node over passages, the noun
phrases of their prose and of their headers (code, inline code and identifiers give none); for a
higher node, its children's long lists, each weighted by rank and by the child's size. The long
list (the node's best PROFILE_SIZE phrases) is its offline abstract, kept for search and as its
parent's input. A label is chosen among siblings, class-based-TF-IDF style: a phrase scores by
its share of the child times how much more the child holds of it than the siblings on average
(a phrase every sibling holds scores nothing), and no two siblings share a phrase or a word
sequence of one. Everything is computed from one node's children: O(children) per dirty node.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from psirag_kb.abstracts.writers import _is_keyword_list, candidate_phrases
from psirag_kb.text import STOP_WORDS

PROFILE_SIZE = 30
"""Phrases in a node's long list (its offline abstract)."""
LABEL_MIN = 3
LABEL_MAX = 5
"""Phrases in a display label (fewer only when the node has fewer distinct phrases)."""
SMOOTHING = 0.01
"""Added to phrase shares before comparing siblings' (a 30-phrase list's shares are ~0.01-0.1)."""
MIN_LIFT = math.log(1.5)
"""A label phrase is at least 1.5 times as much its node's as any sibling's (smoothed shares)."""
ROOT_EXPAND = 0.8
"""The root's label takes a longer phrase for one it holds when it weighs this share of it."""
NAME_BONUS = 1.25
"""A phrase mostly written capitalised (a name or a title) counts this much more for the root."""
ROOT_STOP = 0.1
KIND_BONUS = 0.25
KIND_CAP = 3
"""A word ending n of the root's phrases (a kind: "License", "dataset") counts 1 + KIND_BONUS x n
times (n at most KIND_CAP) for the root, and is never lengthened to one of them."""
"""The root's label stops at a phrase answering less than this share of the leaves."""
EXPAND = 0.5
"""A longer phrase replaces the label phrase it holds when it scores this share of it or more."""
HEADING_WEIGHT = 3.0
"""A heading's phrases count this many times a prose occurrence."""
CONTEXT_WEIGHT = 0.5
"""A chunk header's phrases (document title, heading path) count this much per chunk."""

LABEL_RULES = 2
"""The revision of the offline labellers' rules: raise it with a change that labels branches
differently, and a tree stored by an earlier release is labelled again once (`AbstractJob.
relabel`); a tree stored before the revision was recorded counts as earlier."""

GENERIC = frozenset("""
example examples value values default defaults following number numbers way ways case cases use
uses time times information see note notes thing things part parts kind kinds lot end start
result results order section sections item items list lists line lines name names type types
set sets version versions term terms form forms text page pages data point points content
contents place level levels first second third new old same different various other following
above below true false none null yes given run runs call calls set get see also etc copy
chapter file files code work works section case first next last top left right
shall hereby thereof therein whereas detail details support extra internal lib https http www
com org net html github readme
limit limits option options argument arguments parameter parameters method methods
function functions class classes object objects module modules variable variables instance
step steps user users thing problem problems question questions issue issues key keys
return returns self import imports def elif lambda str dict len args kwargs init int char void
const struct pub impl let var println printf malloc
january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday
yeah yep yup okay um uh uhm hmm mhm gonna wanna kinda sorta alright know think guess basically
actually really stuff maybe want come going something cuz dunno
""".split())
"""Words too common in any document to name a topic on their own (a month or a weekday is a
date's, in every biography and changelog: "August" named a branch of artists' lives; the words
of speech are a transcript's: "Yeah" and "know" named a branch of meetings)."""

_LINK = re.compile(r"\b(?:https?://|www\.|mailto:)\S+|\S+@\S+\.\w+|\S*/\S+")
"""A URL, an e-mail address or a path: no topic's name."""
_MARKER = re.compile(r"(?<![\w\\])\{\w+\}")
"""A word alone in braces: a transcript's annotation ({vocalsound}) or a template's placeholder
({name}), not what the text says (a LaTeX argument, \\emph{word}, is kept)."""
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_UNDERLINE = re.compile(r"^\s*(=+|-+|~+|\^+|\*+)\s*$")
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z]{2,}[a-z]{2,}")
_MIXED_DIGITS = re.compile(r"[^\W\d_]\d|\d[^\W\d_]")
_PLURAL = re.compile(r"(?<=[^s'’])s$")
_DIGIT_LEAD = re.compile(r"^[\d.,:/'’-]")


@functools.lru_cache(maxsize=1 << 16)
def phrase_key(phrase: str) -> str:
    """A phrase's comparison form: lower case, the last word's plural 's' dropped."""
    words = phrase.lower().split()
    if words and len(words[-1]) > 3 and not words[-1].endswith(("ss", "us", "is")):
        words[-1] = _PLURAL.sub("", words[-1])
    return " ".join(words)


@functools.lru_cache(maxsize=1 << 16)
def is_heading_like(phrase: str) -> bool:
    """True for a phrase a person could use as a heading: no identifier (camelCase, letters and
    digits mixed), not led by a number, not all generic words, no adverb at either edge."""
    words = phrase.split()
    if not words or _DIGIT_LEAD.match(words[0]):
        return False
    for word in words:
        if _CAMEL.search(word) or _MIXED_DIGITS.search(word):
            return False
    lowered = [w.lower() for w in words]
    if all(w in GENERIC or w in STOP_WORDS for w in lowered):
        return False
    if lowered[0].endswith("ly") or lowered[-1].endswith("ly"):
        return False
    return not (len(words) == 1 and len(words[0]) < 3)


def prose_lines(text: str) -> list[tuple[str, bool]]:
    """A passage's lines outside fenced code blocks, inline code blanked, each with whether it is
    a heading (Markdown '#' or a line underlined with '=', '-', ...)."""
    out: list[tuple[str, bool]] = []
    fenced = False
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or _UNDERLINE.match(line):
            continue
        line = unsaid(_INLINE_CODE.sub(" ; ", line))
        heading = _HEADING.match(line)
        if heading:
            out.append((heading.group(1), True))
            continue
        following = lines[number + 1] if number + 1 < len(lines) else ""
        underlined = bool(line.strip()) and bool(_UNDERLINE.match(following)) and len(
            following.strip()) >= 3
        out.append((line, underlined))
    return out


def unsaid(text: str) -> str:
    """Text with what names no topic blanked: links, paths, addresses and markers in braces."""
    return _LINK.sub(" ; ", _MARKER.sub(" ; ", text))


class Weights(dict[str, float]):
    """Weights by phrase; a phrase not seen weighs 0 (and is not added by reading it)."""

    def __missing__(self, key: str) -> float:
        return 0.0


@dataclass
class Profile:
    """Weighted phrases of one node, by `phrase_key`, with their most frequent written forms."""

    weights: Weights = field(default_factory=lambda: Weights())
    forms: dict[str, Weights] = field(default_factory=dict)

    def add(self, phrase: str, weight: float) -> None:
        """Count a heading-like phrase `weight` times (others are ignored)."""
        if weight <= 0 or not is_heading_like(phrase):
            return
        key = phrase_key(phrase)
        self.weights[key] += weight
        self.forms.setdefault(key, Weights())[phrase] += weight

    def form(self, key: str) -> str:
        """The written form of a phrase key (its commonest; capitalised forms win ties)."""
        forms = self.forms[key]
        return max(forms, key=lambda f: (forms[f], f[:1].isupper()))

    def merge(self, other: Profile, scale: float = 1.0) -> None:
        """Add another profile's weights, times `scale`."""
        for key, weight in other.weights.items():
            self.weights[key] += weight * scale
            mine = self.forms.setdefault(key, Weights())
            for form, count in other.forms[key].items():
                mine[form] += count * scale

    def ranked(self, limit: int = PROFILE_SIZE) -> list[str]:
        """The best `limit` phrases (weight, a little more for phrases of several words), in
        written form."""
        order = sorted(self.weights, key=lambda k: (-_quality(k) * self.weights[k], k))
        return [self.form(key) for key in order[:limit]]


def _quality(key: str) -> float:
    """A phrase's prior as a label: names of two or three words read best."""
    words = key.count(" ") + 1
    return 1.0 + 0.2 * (min(words, 3) - 1)


def passage_profile(texts: Sequence[str], contexts: Sequence[str] = ()) -> Profile:
    """The profile of a node over passages: their prose's phrases, headings counted
    HEADING_WEIGHT times, each chunk header's phrases CONTEXT_WEIGHT times."""
    counts = Weights()  # by written form first: each form is checked once
    for text in texts:
        for line, heading in prose_lines(text):
            weight = HEADING_WEIGHT if heading else 1.0
            for phrase in candidate_phrases(line):
                counts[phrase] += weight
    for context in contexts:
        for part in context.split(" > "):
            for phrase in dict.fromkeys(candidate_phrases(part)):
                counts[phrase] += CONTEXT_WEIGHT
    profile = Profile()
    for phrase, weight in counts.items():
        profile.add(phrase, weight)
    return profile


def list_profile(texts: Sequence[str], sizes: Sequence[int] | None = None) -> Profile:
    """The profile of a node over abstract nodes: each child's long list weighted by rank
    (the first phrase most) times log2(1 + the child's leaves); a child written as prose (an
    LLM summary) adds its phrases' counts instead."""
    profile = Profile()
    for number, text in enumerate(texts):
        scale = math.log2(1 + (sizes[number] if sizes else 1))
        profile.merge(child_profile(text), scale)
    return profile


def child_profile(text: str) -> Profile:
    """One abstract node's profile from its abstract: a keyword list by rank, else prose."""
    profile = Profile()
    if _is_keyword_list(text):
        items = [item.strip() for item in text.split(", ") if item.strip()]
        for rank, item in enumerate(items):
            profile.add(item, 1.0 / (1.0 + 0.2 * rank))
        return profile
    return passage_profile([text])


def _shares(profiles: Sequence[Profile]) -> list[dict[str, float]]:
    """Each profile's phrase weights as shares of its total (quality-weighted)."""
    out = []
    for profile in profiles:
        total = sum(profile.weights.values()) or 1.0
        out.append({k: w / total for k, w in profile.weights.items()})
    return out


def distinctive(profiles: Sequence[Profile]) -> list[list[tuple[float, str]]]:
    """Per sibling, its phrase keys by distinctiveness, best first: share x log(share over the
    largest share any other sibling has of it, both smoothed by SMOOTHING); a phrase another
    sibling holds as much of, or every sibling holds, scores nothing and is left out."""
    shares = _shares(profiles)
    common = _common(profiles)
    best: dict[str, list[float]] = {}
    for number, share in enumerate(shares):
        for key, value in share.items():
            top = best.setdefault(key, [0.0, 0.0, -1])
            if value > top[0]:
                top[:] = [value, top[0], number]
            elif value > top[1]:
                top[1] = value
    out = []
    for number, share in enumerate(shares):
        scored = []
        for key, value in share.items():
            if key in common:
                continue
            first, second, owner = best[key]
            other = second if owner == number else first
            lift = math.log((value + SMOOTHING) / (other + SMOOTHING)) if len(shares) > 1 else 1.0
            if lift > MIN_LIFT:
                scored.append((value * lift, key))
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        out.append(scored)
    return out


def sibling_labels(profiles: Sequence[Profile], limit: int = LABEL_MAX) -> list[list[str]]:
    """Display labels of siblings: up to `limit` distinctive phrases each, chosen in rounds
    (each sibling its best still free phrase per round, the higher score first when two want
    one); a phrase, or one whose words hold or are held by it, goes to one sibling only. Names
    and titles (capitalised) are listed first, the label read left to right and cut when long."""
    ranked = distinctive(profiles)
    chosen: list[list[str]] = [[] for _ in profiles]
    words_taken: list[tuple[set[str], int]] = []
    cursor = [0] * len(profiles)
    for _ in range(limit):
        wants = []
        for number, scored in enumerate(ranked):
            pick = _next_free(scored, cursor, number, words_taken)
            if pick is not None:
                wants.append((pick[0], number, pick[1]))
        if not wants:
            break
        for _score, number, key in sorted(wants, key=lambda w: -w[0]):
            words = set(key.split())
            if _clashes(words, words_taken, number):
                continue  # a better sibling took it this round: try again next round
            words_taken.append((words, number))
            chosen[number].append(profiles[number].form(key))
    common = _common(profiles)
    for number, profile in enumerate(profiles):  # too little sets it apart: its best phrases
        if len(chosen[number]) < LABEL_MIN:  # that no sibling's label has, nor every sibling
            keys = {phrase_key(p) for other in chosen for p in other} | common
            spare = [p for p in profile.ranked(limit) if phrase_key(p) not in keys]
            chosen[number] += spare[:LABEL_MIN - len(chosen[number])]
    return [sorted(label, key=lambda p: not p[:1].isupper()) for label in chosen]


def _common(profiles: Sequence[Profile]) -> set[str]:
    """Phrases every one of two or more siblings holds: boilerplate, or their parent's theme."""
    if len(profiles) < 2:
        return set()
    return set.intersection(*(set(p.weights) for p in profiles))


def _next_free(scored: list[tuple[float, str]], cursor: list[int], number: int,
               taken: list[tuple[set[str], int]]) -> tuple[float, str] | None:
    """A sibling's best phrase not clashing with what is taken, moving its cursor past it; a
    longer phrase holding its words replaces it when that scores at least EXPAND times as much
    ("garbage collection" rather than "garbage")."""
    while cursor[number] < len(scored):
        score, key = scored[cursor[number]]
        cursor[number] += 1
        words = set(key.split())
        if _clashes(words, taken, number):
            continue
        longer = [(s, k) for s, k in scored if s >= EXPAND * score and len(k) > len(key)
                  and words < set(k.split()) and not _clashes(set(k.split()), taken, number)]
        return max(longer, default=(score, key))
    return None


def _clashes(words: set[str], taken: list[tuple[set[str], int]], owner: int) -> bool:
    """Whether a phrase's words repeat a taken phrase: anyone's same words, a sibling's words
    holding or held by them, or the owner's own phrase within or around it."""
    for other, who in taken:
        if words == other or words <= other or other <= words:
            return True
        if who != owner and len(words & other) * 2 > min(len(words), len(other)) and len(
                words) > 1 and len(other) > 1:
            return True
    return False


def root_label(profiles: Sequence[Profile], sizes: Sequence[int], own: Profile,
               limit: int = LABEL_MAX) -> list[str]:
    """The root's label, one line saying what the folder holds: each child asks to be named,
    and a phrase answers a child by the square of its weight in the child's list (1 for its
    first phrase, 0.44 for its fourth), a kind word ending several phrases more (KIND_BONUS);
    in turn, the phrase answering the most leaves' worth of what is still asked (a name or
    title, mostly written capitalised, NAME_BONUS times) is taken, a longer phrase holding its
    words instead when it answers no fewer children and weighs ROOT_EXPAND of it in the root's
    list, never one holding or held by a taken one's words; until a turn would answer less
    than ROOT_STOP of the leaves, then the root's own best phrases up to LABEL_MIN."""
    asked = [1.0] * len(profiles)
    ends = Counter(k.rsplit(" ", 1)[-1] for k in own.weights if " " in k)
    names = {k: (NAME_BONUS if own.form(k)[:1].isupper() else 1.0)
             * (1.0 + KIND_BONUS * min(ends[k], KIND_CAP)) for k in own.weights}
    total = sum(sizes) or 1
    out: list[str] = []
    taken: list[tuple[set[str], int]] = []
    while len(out) < limit:
        gains: dict[str, float] = {}
        for i, profile in enumerate(profiles):
            if asked[i] <= 0:
                continue
            for key, weight in profile.weights.items():
                if key in names:
                    gains[key] = gains.get(key, 0.0) + sizes[i] * min(weight ** 2, asked[i])
        gains = {k: g * names[k] for k, g in gains.items()
                 if not _clashes(set(k.split()), taken, 0)}
        best = max(gains, key=lambda k: (gains[k], -len(k), k), default="")
        if not best or gains[best] < ROOT_STOP * total:
            break
        answered = {i for i, p in enumerate(profiles) if asked[i] > 0 and best in p.weights}
        longer = [k for k in gains if len(k) > len(best) and ends[best] < 2
                  and own.weights[k] >= ROOT_EXPAND * own.weights[best]
                  and set(best.split()) < set(k.split())
                  and answered <= {i for i, p in enumerate(profiles) if k in p.weights}]
        best = max(longer, key=lambda k: (gains[k], k), default=best)
        taken.append((set(best.split()), 0))
        out.append(own.form(best))
        for i, profile in enumerate(profiles):
            asked[i] -= profile.weights.get(best, 0.0) ** 2
    if len(out) < LABEL_MIN:
        keys = {phrase_key(p) for p in out}
        out += [p for p in own.ranked(limit) if phrase_key(p) not in keys
                and not _clashes(set(phrase_key(p).split()), taken, 0)][:LABEL_MIN - len(out)]
    return out


def own_label(profile: Profile, limit: int = LABEL_MAX) -> list[str]:
    """A label for a node without siblings: its best phrases."""
    return profile.ranked(limit)


@dataclass
class Work:
    """Same-layer dirty nodes read for one batch of abstracts and labels."""

    nodes: list[int]
    groups: list[list[str]]
    """Per node, its children's texts: passages on layer 1, abstracts above."""
    shapes: dict[int, tuple[int, ...]]
    """Each node's children when read (a node that changed meanwhile is not written)."""
    keep_dirty: set[int]
    """Nodes that stay dirty after their offline abstract (the LLM is down)."""
    layer: int
    contexts: list[list[str]]
    """Per node on layer 1, its chunks' headers, aligned with `groups`."""
    kids: list[list[int]]
    """Per node above layer 1, the children of `groups`."""
    sizes: list[list[int]]
    """Per node above layer 1, the leaves under each of `kids`."""
    root: int | None
    samples: list[list[list[int]]] = field(default_factory=list)
    """Per node above layer 1, chunk ids sampled under each of `kids` (coverage labels)."""


def node_profile(work: Work, number: int) -> Profile:
    """The profile of one node of a batch."""
    if work.layer == 1:
        contexts = work.contexts[number] if work.contexts else ()
        return passage_profile(work.groups[number], contexts)
    return list_profile(work.groups[number], work.sizes[number] if work.sizes else None)


def offline_abstracts(work: Work, part: slice = slice(None)) -> list[str]:
    """The long list of each node of `part` of a batch: its best PROFILE_SIZE phrases."""
    return [", ".join(node_profile(work, i).ranked())
            for i in range(len(work.nodes))[part]]


def label_batch(work: Work) -> dict[int, dict[int, str]]:
    """Per node, the labels its abstract brings: its children's (chosen among them, above
    layer 1) and, for the root, its own."""
    out: dict[int, dict[int, str]] = {}
    for number, node in enumerate(work.nodes):
        labels: dict[int, str] = {}
        child_labels: list[list[str]] = []
        profiles: list[Profile] = []
        if work.layer > 1 and work.kids[number]:
            profiles = [child_profile(text) for text in work.groups[number]]
            child_labels = sibling_labels(profiles)
            labels.update((kid, ", ".join(label)) for kid, label in zip(
                work.kids[number], child_labels, strict=True) if label)
        if node == work.root:
            own = node_profile(work, number)
            mine = (root_label(profiles, work.sizes[number], own)
                    if child_labels else own_label(own))
            if mine:
                labels[node] = ", ".join(mine)
        out[node] = labels
    return out

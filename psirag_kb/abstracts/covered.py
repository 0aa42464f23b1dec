"""Labels checked against the text: two to five words found in most of a branch's passages and
in fewer of each sibling's.

A parent's children are labelled together from a sample of each child's passages (SAMPLE
spread over its subtree, found by walking down it: O(children x SAMPLE) per dirty node, never
the collection). A word may label a child when at least MIN_COVER of the child's sampled
passages hold it and it is more the child's than any sibling's (its share of passages holding
it is larger); so a phrase of a passage or two never labels a branch of hundreds, and a word
every sibling holds (a licence's boilerplate, the names in a changelog's entries, which recur
in each release's branch) labels none. Among those, words are taken greedily: each time the word
holding most of the child's passages not yet covered, plus OVERLAP of all it holds, less PENALTY
times the largest share a sibling holds of it; a phrase of the child's abstract made only of
such words may stand for them ("garbage collection"). The leading word is what the child holds
most distinctively, so siblings never share it. The words come from the child's abstract first
(an LLM's, when one wrote it) and from its passages; an abstract's phrase whose words are not in
the passages is never a label.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from psirag_kb.abstracts import labels as contrast
from psirag_kb.abstracts.labels import (
    GENERIC,
    Profile,
    Work,
    child_profile,
    is_heading_like,
    node_profile,
    phrase_key,
)
from psirag_kb.text import ALNUM_RUN, STOP_WORDS

SAMPLE = 48
"""Passages read per child (fewer when a parent has many children: NODE_SAMPLE in all)."""
NODE_SAMPLE = 1024
SAMPLE_MIN = 8
MIN_COVER = 0.2
"""A label word is in at least this share of its branch's sampled passages."""
ROOT_COVER = 0.1
"""The root's label words are each in at least this share of the collection's passages."""
WORDS_MIN = 2
WORDS_MAX = 5
OVERLAP = 0.25
"""What a word's passages already covered by the label count for (more shared words route a
passage more surely)."""
PENALTY = 1.0
"""What the largest share of a sibling's passages holding a word costs it."""
STOP = 0.1
"""A label takes no more words once the best would score less than this (after WORDS_MIN)."""
ABSTRACT_BONUS = 0.05
PHRASE_BONUS = 0.02
"""A phrase of the abstract counts this much more per word beyond its first (it reads better)."""
"""A word of the child's abstract counts this much more (its phrases read as a topic)."""

Read = Callable[[Iterable[int]], dict[int, str]]
"""Texts of chunk ids, by id (unknown ids left out)."""


def sample_size(children: int) -> int:
    """Passages sampled per child of a parent with this many children."""
    return max(SAMPLE_MIN, min(SAMPLE, NODE_SAMPLE // max(children, 1)))


def words_of(text: str) -> list[tuple[str, str]]:
    """(key, written form) of a text's words, stop words left out: keys as routing compares
    them (lower case, a plural 's' dropped)."""
    out = []
    for form in ALNUM_RUN.findall(text):
        lower = form.lower()
        if lower not in STOP_WORDS:
            out.append((phrase_key(lower), form))
    return out


@dataclass
class Sample:
    """One child's sampled passages: the word keys of each, and each key's written forms."""

    sets: list[frozenset[str]] = field(default_factory=list)
    forms: dict[str, Counter[str]] = field(default_factory=dict)
    df: Counter[str] = field(default_factory=Counter)
    """Passages holding each key."""

    @classmethod
    def of(cls, texts: Iterable[str]) -> Sample:
        """The sample of these passages."""
        sample = cls()
        for text in texts:
            keys = set()
            for key, form in words_of(text):
                keys.add(key)
                sample.forms.setdefault(key, Counter())[form] += 1
            sample.sets.append(frozenset(keys))
            sample.df.update(keys)
        return sample

    @property
    def size(self) -> int:
        """Passages in the sample."""
        return len(self.sets)

    def cover(self, key: str) -> float:
        """Share of the sampled passages holding a key."""
        return self.df[key] / self.size if self.sets else 0.0

    def form(self, key: str) -> str:
        """A key's commonest written form (capitalised forms win ties)."""
        forms = self.forms.get(key)
        if not forms:
            return key
        return max(forms, key=lambda f: (forms[f], f[:1].isupper()))


def candidate(key: str, form: str) -> bool:
    """Whether a word may name a topic: letters only, three or more, not generic, heading-like."""
    return (key.isalpha() and len(key) >= 3 and key not in GENERIC and key not in STOP_WORDS
            and is_heading_like(form))


@dataclass
class _Unit:
    """A label item: a word, or a phrase of the abstract made of label words."""

    keys: tuple[str, ...]
    text: str


def sibling_labels(samples: Sequence[Sample], profiles: Sequence[Profile]) -> list[list[str]]:
    """Display labels of siblings, each a list of items of WORDS_MIN to WORDS_MAX words in all,
    the leading item never another sibling's."""
    labels = [_label(i, samples, profiles[i]) for i in range(len(samples))]
    leading: set[str] = set()
    for number in sorted(range(len(labels)), key=lambda i: -samples[i].size):
        label = labels[number]
        while label and phrase_key(label[0].lower()) in leading:
            label.pop(0)  # only a fallback label can repeat a sibling's lead
        if label:
            leading.add(phrase_key(label[0].lower()))
    return labels


def _label(number: int, samples: Sequence[Sample], profile: Profile) -> list[str]:
    """One child's label against its siblings' samples."""
    own = samples[number]
    others = [s for i, s in enumerate(samples) if i != number and s.sets]
    if not own.sets:
        return _fallback(profile)
    abstract_words = {w for key in profile.weights for w in key.split()}

    def other(key: str) -> float:
        return max((s.cover(key) for s in others), default=0.0)

    eligible = {key: own.cover(key) for key in own.df
                if own.cover(key) >= MIN_COVER and own.cover(key) > other(key)
                and candidate(key, own.form(key))}
    if not eligible:
        return _fallback(profile, own)
    masks = {key: 0 for key in eligible}
    for bit, keys in enumerate(own.sets):
        for key in keys & eligible.keys():
            masks[key] |= 1 << bit
    units = _units(eligible, profile, own)
    covered = 0
    words: list[str] = []
    chosen: list[str] = []
    while len(words) < WORDS_MAX:
        best, gain = None, -math.inf
        for unit in units:
            if any(k in words for k in unit.keys) or len(words) + len(unit.keys) > WORDS_MAX:
                continue
            mask = 0
            for key in unit.keys:
                mask |= masks[key]
            new = (mask & ~covered).bit_count() / own.size
            score = (new + OVERLAP * min(eligible[k] for k in unit.keys)
                     - PENALTY * max(other(k) for k in unit.keys)
                     + ABSTRACT_BONUS * all(k in abstract_words for k in unit.keys)
                     + PHRASE_BONUS * (len(unit.keys) - 1))
            if score > gain:
                best, gain = unit, score
        if best is None or (gain < STOP and len(words) >= WORDS_MIN):
            break
        for key in best.keys:
            covered |= masks[key]
        words += best.keys
        chosen.append(best.text)
    return chosen


def _units(eligible: dict[str, float], profile: Profile, own: Sample) -> list[_Unit]:
    """The eligible words, and the abstract's phrases of two or three words all eligible."""
    units = [_Unit((key,), own.form(key)) for key in sorted(eligible)]
    for key in profile.weights:
        parts = tuple(key.split())
        if 2 <= len(parts) <= 3 and all(p in eligible for p in parts) and len(set(parts)) == len(
                parts):
            units.append(_Unit(parts, profile.form(key)))
    return units


def _fallback(profile: Profile, own: Sample | None = None) -> list[str]:
    """Too little sets a child apart: its abstract's best phrases that its passages hold."""
    out: list[str] = []
    count = 0
    for phrase in profile.ranked():
        keys = phrase_key(phrase.lower()).split()
        if own is not None and own.sets and min(own.cover(k) for k in keys) < MIN_COVER:
            continue
        if count + len(keys) > WORDS_MAX:
            continue
        out.append(phrase)
        count += len(keys)
        if count >= WORDS_MIN + 1:
            break
    return out


def root_label(samples: Sequence[Sample], sizes: Sequence[int], profile: Profile) -> list[str]:
    """The root's label: words held by the most passages not yet named, each child's sample
    weighing its leaves, each word in at least ROOT_COVER of the collection."""
    weights = [size / s.size if s.size else 0.0 for s, size in zip(samples, sizes, strict=True)]
    total = sum(size for s, size in zip(samples, sizes, strict=True) if s.size) or 1
    forms: dict[str, Counter[str]] = {}
    cover: Counter[str] = Counter()
    for sample, weight in zip(samples, weights, strict=True):
        for key, count in sample.df.items():
            cover[key] += count * weight
            forms.setdefault(key, Counter()).update(sample.forms[key])
    sample_all = Sample(forms=forms)
    eligible = [k for k, c in cover.items() if c >= ROOT_COVER * total
                and candidate(k, sample_all.form(k))]
    abstract_words = {w for key in profile.weights for w in key.split()}
    named = [[False] * s.size for s in samples]
    out: list[str] = []
    while len(out) < WORDS_MAX:
        gains: Counter[str] = Counter()
        for sample, weight, done in zip(samples, weights, named, strict=True):
            for bit, keys in enumerate(sample.sets):
                if not done[bit]:
                    for key in keys.intersection(eligible):
                        gains[key] += weight
        gains = Counter({k: g * (1 + ABSTRACT_BONUS * (k in abstract_words))
                         for k, g in gains.items() if k not in out})
        if not gains:
            break
        best, gain = max(gains.items(), key=lambda pair: (pair[1], pair[0]))
        if gain < ROOT_COVER * total / 2 and len(out) >= WORDS_MIN:
            break
        out.append(best)
        for sample, done in zip(samples, named, strict=True):
            for bit, keys in enumerate(sample.sets):
                done[bit] = done[bit] or best in keys
    if not out:
        return _fallback(profile)
    return [sample_all.form(key) for key in out]


def label_children(abstracts: Sequence[str], texts: Sequence[Sequence[str]]) -> list[list[str]]:
    """Labels of siblings from their abstracts and their sampled passages' texts."""
    return sibling_labels([Sample.of(t) for t in texts], [child_profile(a) for a in abstracts])


def label_batch(work: Work, read: Read) -> dict[int, dict[int, str]]:
    """Per node, the labels its abstract brings: its children's (above layer 1, from their
    abstracts and sampled passages) and, for the root, its own; a node without samples is
    labelled among its siblings by its abstract alone (labels.label_batch)."""
    if work.layer == 1 or not work.samples:
        return contrast.label_batch(work)
    wanted = [cid for node in work.samples for row in node for cid in row]
    found = read(wanted)
    out: dict[int, dict[int, str]] = {}
    for number, node in enumerate(work.nodes):
        kids = work.kids[number]
        samples = [Sample.of(found[c] for c in row if c in found) for row in work.samples[number]]
        profiles = [child_profile(text) for text in work.groups[number]]
        labels: dict[int, str] = {}
        if kids:
            made = sibling_labels(samples, profiles)
            labels.update((kid, ", ".join(label)) for kid, label in zip(kids, made, strict=True)
                          if label)
        if node == work.root:
            mine = (root_label(samples, work.sizes[number], node_profile(work, number))
                    if kids else _fallback(node_profile(work, number)))
            if mine:
                labels[node] = ", ".join(mine)
        out[node] = labels
    return out

"""Labels checked against the text: two to five words that most of a branch's passages hold
and that route them to it.

A parent's children are labelled together from a sample of each child's passages (SAMPLE
spread over its subtree, found by walking down it: O(children x SAMPLE) per dirty node, never
the collection). A word may label a child when at least MIN_COVER of the child's sampled
passages hold it and a larger share of them than of any sibling's: so a phrase of a passage or
two never labels a branch of hundreds, and a word every sibling holds (a licence's boilerplate,
the names that recur in each release's changelog entries) labels none. The children then take
words in rounds, the largest child first: each the word of its own that sends the most sampled
passages to the child holding them when routed by the labels (label BM25, as
abstracts/routing.py measures it), each child's passages counting alike; a word goes to one
child only, so siblings never share their leading word. A phrase of the child's abstract made
of its chosen words stands for them ("garbage collection"). The words come from the passages,
so a label made from an LLM's abstract is checked against the text the same way: its phrases
name the label only where their words qualify.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from psirag_kb.abstracts import labels as contrast
from psirag_kb.abstracts.labels import (
    _CAMEL,
    GENERIC,
    Profile,
    Work,
    child_profile,
    node_profile,
    phrase_key,
    unsaid,
)
from psirag_kb.text import ALNUM_RUN, STOP_WORDS

SAMPLE = 48
"""Passages read per child (fewer when a parent has many children: NODE_SAMPLE in all)."""
NODE_SAMPLE = 1024
SAMPLE_MIN = 8
MIN_COVER = 0.1
"""A label word is in at least this share of its branch's sampled passages."""
ROOT_COVER = 0.05
"""The root's label phrases are each in at least this share of the collection's passages."""
WORDS_MIN = 2
WORDS_MAX = 5
CANDIDATES = 24
"""Words per child weighed in the joint choice (its best by coverage less the siblings')."""
ABSTRACT_BONUS = 0.05
"""A word of the node's abstract ranks this much higher (its phrases read as a topic)."""
OFF_ABSTRACT = 0.25
"""What a word in no abstract of the root or its children counts for the root's label (a word
of links or of a data file's keys, not of the prose)."""
PRIOR = 0.3
"""What a word's coverage less the largest sibling's adds to its gain (a sampled passage or two
more is noise)."""
MIN_GAIN = 1e-9
"""After WORDS_MIN, a child takes another word only when it routes more sampled passages right
(a longer label weighs each of its words less in label BM25)."""
SHOUTED = 0.25
"""An all-capitals form (shouted licence text) counts this much when choosing a written form."""

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
            keys = {key for key, _ in words_of(text)}  # as routing reads a passage
            for key, form in words_of(unsaid(text)):  # a link or a marker names no topic
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
        return max(forms, key=lambda f: (forms[f] * (SHOUTED if f.isupper() and len(f) > 3
                                                     else 1.0), f[:1].isupper()))


TOPICAL = frozenset("""
function functions object objects module modules class classes method methods variable variables
instance argument arguments parameter parameters option options file files code data type types
copy user users page pages text key keys version versions problem problems question questions
""".split())
"""Words too common to name a topic in a phrase, yet a branch's subject on their own."""
GENERIC_WORDS = GENERIC - TOPICAL


def candidate(key: str, form: str) -> bool:
    """Whether a word may name a topic: letters only, three or more, not generic, heading-like."""
    return (key.isalpha() and len(key) >= 3 and key not in GENERIC_WORDS
            and key not in STOP_WORDS and not key.endswith("ly") and not _CAMEL.search(form))


def sibling_labels(samples: Sequence[Sample], profiles: Sequence[Profile]) -> list[list[str]]:
    """Display labels of siblings, each a list of items of WORDS_MIN to WORDS_MAX words in all,
    the leading item never another sibling's."""
    return distinct_leads(_joint(samples, profiles), samples)


def distinct_leads(labels: list[list[str]], samples: Sequence[Sample]) -> list[list[str]]:
    """The labels with no leading item another sibling's (the largest sibling keeps its own);
    one left with fewer than WORDS_MIN words takes the words its passages hold most that lead
    no sibling's, those its siblings hold as much last."""
    leading: set[str] = set()
    for number in sorted(range(len(labels)), key=lambda i: -samples[i].size):
        label = labels[number]
        while label and phrase_key(label[0].lower()) in leading:
            label.pop(0)  # only a fallback label can repeat a sibling's lead
        have = [k for item in label for k in phrase_key(item.lower()).split()]
        if len(have) < WORDS_MIN:  # one word of its own, or every item led a sibling's
            own = samples[number]
            more = [k for k in _held(own, shared(number, samples), have, WORDS_MAX)
                    if k not in leading]
            label.extend(own.form(k) for k in more[: WORDS_MIN - len(have)])
        if label:
            leading.add(phrase_key(label[0].lower()))
    return labels


def _eligible(number: int, samples: Sequence[Sample]) -> dict[str, float]:
    """A child's words that may label it, by coverage less the largest sibling's share."""
    own = samples[number]
    out = {}
    for key, count in own.df.items():
        cover = count / own.size
        if cover < MIN_COVER:
            continue
        other = _rival(key, number, samples)
        if cover > other and key in own.forms and candidate(key, own.form(key)):
            out[key] = cover - other
    return out


def _rival(key: str, number: int, samples: Sequence[Sample]) -> float:
    """The largest share of a sibling's sampled passages that hold a word key."""
    return max((s.cover(key) for i, s in enumerate(samples) if i != number), default=0.0)


def kin(one: str, other: str) -> bool:
    """Whether two word keys are forms of one word: the longer is the shorter and up to two
    letters more ("class", "classe"), or its "y" made "ie" ("city", "citie" of "cities")."""
    short, long = sorted((one, other), key=len)
    if len(short) < 4:
        return False
    return ((long.startswith(short) and len(long) - len(short) <= 2)
            or (short.endswith("y") and long == short[:-1] + "ie"))


def _joint(samples: Sequence[Sample], profiles: Sequence[Profile]) -> list[list[str]]:
    """Siblings' label words chosen together, in rounds (the largest child first): each
    child takes the word of its own that routes the most sampled passages of all siblings to
    the child holding them (a passage goes to the sibling whose label has most of its words),
    its best by coverage when none gains; a word goes to one child only, and never with
    another form of one of its words ("city", "cities")."""
    pooled = [(i, keys) for i, s in enumerate(samples) for keys in s.sets]
    weight = [1.0 / samples[i].size for i, _ in pooled]  # each child counts the same
    postings: dict[str, list[int]] = {}
    candidates = []
    ranks: list[dict[str, float]] = []
    for number in range(len(samples)):
        eligible = _eligible(number, samples)
        words = {w for k in profiles[number].weights for w in k.split()}
        ranks.append({k: v + ABSTRACT_BONUS * (k in words) for k, v in eligible.items()})
        best = sorted(ranks[-1], key=lambda k: (-ranks[-1][k], k))[:CANDIDATES]
        candidates.append(best)
        for key in best:
            postings.setdefault(key, [])
    for p, (_, keys) in enumerate(pooled):
        for key in keys.intersection(postings):
            postings[key].append(p)
    scores = [[0] * len(samples) for _ in pooled]
    held: list[set[int]] = [set() for _ in samples]
    """Per child, the pooled passages holding a word of its label."""
    chosen: list[list[str]] = [[] for _ in samples]
    taken: set[str] = set()
    order = sorted(range(len(samples)), key=lambda i: -samples[i].size)
    for rounds in range(WORDS_MAX):
        for number in order:
            lengths = [len(c) for c in chosen]
            gains = {k: _gain(number, postings[k], held[number], pooled, scores, lengths,
                              weight) for k in candidates[number] if k not in taken
                     and not any(kin(k, mine) for mine in chosen[number])}
            if not gains:
                continue
            rank = ranks[number]
            key = max(gains, key=lambda k: (round(gains[k] + PRIOR * rank[k], 9), rank[k], k))
            if gains[key] < MIN_GAIN and rounds >= WORDS_MIN:
                continue
            taken.add(key)
            chosen[number].append(key)
            for p in postings[key]:
                scores[p][number] += 1
            held[number].update(postings[key])
    return [finished(keys, samples[i], profiles[i], taken) for i, keys in enumerate(chosen)]


def _gain(number: int, passages: list[int], held: set[int],
          pooled: list[tuple[int, frozenset[str]]], scores: list[list[int]],
          lengths: list[int], weight: list[float]) -> float:
    """Sampled passages routed right once child `number` takes a word held by `passages`,
    less before, each weighing 1/its child's sample (and a little more for covering its own).
    Routing is label BM25's with every word in one label: a label's words weigh alike, less
    the longer the label."""
    before = _weights(lengths)
    lengths = list(lengths)
    lengths[number] += 1
    after = _weights(lengths)
    gain = 0.0
    for p in held.union(passages):
        home, row = pooled[p][0], scores[p]
        was = _right(row, home, before)
        hit = p in passages
        row[number] += hit
        now = _right(row, home, after)
        row[number] -= hit
        gain += (now - was) * weight[p] + (hit and home == number) * weight[p] * 1e-3
    return gain


def _weights(lengths: list[int]) -> list[float]:
    """What one matching word of each label scores in label BM25 (k1 1.2, b 0.75)."""
    average = (sum(lengths) / len(lengths)) or 1.0
    return [2.2 / (1.0 + 1.2 * (0.25 + 0.75 * max(n, 1) / average)) for n in lengths]


def _right(row: list[int], home: int, weights: list[float]) -> bool:
    """Whether a passage with these per-child label word counts routes to its home child."""
    own = row[home] * weights[home]
    return own > 0 and all(v * weights[i] < own for i, v in enumerate(row) if i != home)


def _render(keys: list[str], own: Sample, profile: Profile) -> list[str]:
    """Chosen words as the label reads: an abstract's phrase of two or three of them stands
    for them, in the place of its first."""
    items: list[str] = []
    done: set[str] = set()
    phrases = [k for k in profile.weights if 2 <= len(k.split()) <= 3
               and set(k.split()) <= set(keys) and len(set(k.split())) == len(k.split())]
    for key in keys:
        if key in done:
            continue
        phrase = next((p for p in phrases if key in p.split() and not done & set(p.split())),
                      None)
        if phrase:
            items.append(profile.form(phrase))
            done.update(phrase.split())
        else:
            items.append(own.form(key))
            done.add(key)
    return items


def finished(keys: list[str], own: Sample, profile: Profile,
             taken: Collection[str]) -> list[str]:
    """A child's label from the words chosen for it; none at all, `_fallback`."""
    return _render(keys, own, profile) if keys else _fallback(profile, own, taken)


def shared(number: int, samples: Sequence[Sample]) -> set[str]:
    """Child `number`'s words that a sibling's sampled passages hold as large a share of."""
    own = samples[number]
    return {k for k in own.df if _rival(k, number, samples) >= own.cover(k)}


def _held(own: Sample | None, last: Collection[str] = (), kept: Sequence[str] = (),
          most: int = WORDS_MIN + 1) -> list[str]:
    """Up to `most` of a child's words that may name a topic and that MIN_COVER of its sampled
    passages hold, the most held first and those in `last` after the rest; none another form
    of a word of `kept` or of one listed before it."""
    if own is None or not own.sets:
        return []
    held = [k for k, n in own.df.items() if n >= MIN_COVER * own.size and k in own.forms
            and k not in kept and candidate(k, own.form(k))]
    out: list[str] = []
    for key in sorted(held, key=lambda k: (k in last, -own.df[k], k)):
        if not any(kin(key, k) for k in [*kept, *out]):
            out.append(key)
        if len(out) == most:
            break
    return out


def _fallback(profile: Profile, own: Sample | None = None,
              taken: Collection[str] = ()) -> list[str]:
    """Too little sets a child apart: its abstract's best phrases that its passages hold, none
    with a word of a sibling's label (`taken`) while such phrases are left; else the words its
    passages hold most, the siblings' last; else its abstract's first phrases (a label of at
    most WORDS_MAX words, never the whole abstract)."""
    found = ((_phrases(profile, own, taken) if taken else []) or _phrases(profile, own, ()))
    if found:
        return found
    words = _held(own, taken)
    if words and own is not None:
        return [own.form(k) for k in words]
    return _phrases(profile, None, ())


def _phrases(profile: Profile, own: Sample | None, taken: Collection[str]) -> list[str]:
    """`_fallback`'s phrases, those holding a word of `taken` left out."""
    out: list[str] = []
    count = 0
    for phrase in profile.ranked():
        keys = phrase_key(phrase.lower()).split()
        if any(k in taken for k in keys):
            continue
        if own is not None and own.sets and min(own.cover(k) for k in keys) < MIN_COVER:
            continue
        if count + len(keys) > WORDS_MAX:
            continue
        out.append(phrase)
        count += len(keys)
        if count >= WORDS_MIN + 1:
            break
    return out


def root_label(samples: Sequence[Sample], sizes: Sequence[int], profile: Profile,
               profiles: Sequence[Profile] = ()) -> list[str]:
    """The root's label: the phrases naming groups of children (labels.root_label) that are
    held, all their words in one passage, by at least ROOT_COVER of the collection's sampled
    passages (each child's sample weighing its leaves), up to WORDS_MAX words; when fewer than
    WORDS_MIN words are left, the words of the abstracts held by the most passages instead."""
    weights = [size / s.size if s.size else 0.0 for s, size in zip(samples, sizes, strict=True)]
    total = sum(size for s, size in zip(samples, sizes, strict=True) if s.size) or 1

    def held(keys: set[str]) -> float:
        return sum(w for s, w in zip(samples, weights, strict=True)
                   for found in s.sets if keys <= found) / total

    out: list[str] = []
    count = 0
    for phrase in contrast.root_label(profiles, sizes, profile) if profiles else []:
        keys = {key for key, _ in words_of(phrase)}
        if keys and count + len(keys) <= WORDS_MAX and held(keys) >= ROOT_COVER:
            out.append(phrase)
            count += len(keys)
    if count >= WORDS_MIN:
        return out
    return _root_words(samples, weights, total, profile, profiles)


def _root_words(samples: Sequence[Sample], weights: list[float], total: int, profile: Profile,
                profiles: Sequence[Profile]) -> list[str]:
    """Words of the root's or its children's abstracts held by the most passages not yet
    named, each in at least ROOT_COVER of the collection."""
    forms: dict[str, Counter[str]] = {}
    cover: dict[str, float] = {}
    for sample, weight in zip(samples, weights, strict=True):
        for key, count in sample.df.items():
            cover[key] = cover.get(key, 0.0) + count * weight
            forms.setdefault(key, Counter()).update(sample.forms.get(key, {}))
    sample_all = Sample(forms=forms)
    abstract_words = {w for p in [profile, *profiles] for key in p.weights for w in key.split()}
    eligible = [k for k, c in cover.items() if c >= ROOT_COVER * total and forms.get(k)
                and candidate(k, sample_all.form(k))]
    named = [[False] * s.size for s in samples]
    out: list[str] = []
    while len(out) < WORDS_MAX:
        gains: dict[str, float] = {}
        for sample, weight, done in zip(samples, weights, named, strict=True):
            for bit, keys in enumerate(sample.sets):
                if not done[bit]:
                    for key in keys.intersection(eligible):
                        gains[key] = gains.get(key, 0.0) + weight
        gains = {k: g * (1.0 if k in abstract_words else OFF_ABSTRACT)
                 for k, g in gains.items() if k not in out}
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


Siblings = Callable[[int, list[Sample], list[Profile]], list[list[str]]]
"""siblings(node's number in the batch, its children's samples, their profiles) -> labels."""


def label_batch(work: Work, read: Read, siblings: Siblings | None = None
                ) -> dict[int, dict[int, str]]:
    """Per node, the labels its abstract brings: its children's (above layer 1, from their
    abstracts and sampled passages, by `siblings` or else `sibling_labels`) and, for the root,
    its own; a node without samples is labelled among its siblings by its abstract alone
    (labels.label_batch)."""
    if work.layer == 1 or not work.samples:
        return contrast.label_batch(work)
    out: dict[int, dict[int, str]] = {}
    for number, node in enumerate(work.nodes):  # one node's samples in memory at a time
        kids = work.kids[number]
        found = read([cid for row in work.samples[number] for cid in row])
        samples = [Sample.of(found[c] for c in row if c in found) for row in work.samples[number]]
        profiles = [child_profile(text) for text in work.groups[number]]
        labels: dict[int, str] = {}
        if kids:
            made = (siblings(number, samples, profiles) if siblings
                    else sibling_labels(samples, profiles))
            labels.update((kid, ", ".join(label)) for kid, label in zip(kids, made, strict=True)
                          if label)
        if node == work.root:
            mine = (root_label(samples, work.sizes[number], node_profile(work, number),
                               profiles)
                    if kids else _fallback(node_profile(work, number)))
            if mine:
                labels[node] = ", ".join(mine)
        out[node] = labels
    return out

"""Labels chosen by meaning: the covered labeller's words (two to five, each held by a tenth of
the branch's sampled passages and by more of them than of any sibling's), picked so that the
label's embedding lies nearest the branch's sampled passages among its siblings' labels.

A person reads a label by what it means, not by which of its words a passage repeats; so of the
words a branch may take, the children take in rounds (the largest first) the word that sends the
most sampled passage vectors (stored with the chunks) to the child holding them when each goes
to the label of highest cosine. A label's vector is taken as the normalised sum of its words'
(each word embedded once: one batch of at most children x WORDS short texts per parent, fewer
for the words a recent node embedded), so the
cost is O(children x sample) per dirty node, as for the covered labeller.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from psirag_kb.abstracts import covered
from psirag_kb.abstracts.covered import (
    ABSTRACT_BONUS,
    PRIOR,
    WORDS_MAX,
    Sample,
)
from psirag_kb.abstracts.labels import Profile, Work

Embed = Callable[[list[str]], np.ndarray]
"""Unit vectors of texts (the knowledge base's embedder)."""
WORDS = 12
"""Words per child weighed (its best by coverage less the siblings'): each is embedded."""
CACHED = 8192
"""Embedded words kept for the next nodes (a word recurs in a branch and its children)."""
SEPARATION = 0.5
"""What a word's cosine to its child's sampled passages less its best sibling's adds to its gain
(it decides the first words, when every passage still goes to the only label there is)."""


def sibling_labels(samples: Sequence[Sample], profiles: Sequence[Profile],
                   vectors: Sequence[np.ndarray], embed: Embed) -> list[list[str]]:
    """Display labels of siblings chosen by meaning (see the module), each WORDS_MIN to
    WORDS_MAX words, the leading item never another sibling's; a child with no sampled vectors
    or no word of its own gets the covered labeller's fallback."""
    n = len(samples)
    candidates: list[list[str]] = []
    ranks: list[dict[str, float]] = []
    for number in range(n):
        eligible = covered._eligible(number, samples)
        words = {w for k in profiles[number].weights for w in k.split()}
        rank = {k: v + ABSTRACT_BONUS * (k in words) for k, v in eligible.items()}
        ranks.append(rank)
        candidates.append(sorted(rank, key=lambda k: (-rank[k], k))[:WORDS])
    texts = [samples[i].form(k) for i in range(n) for k in candidates[i]]
    if not texts or any(len(v) == 0 for v in vectors):
        return covered.sibling_labels(samples, profiles)
    embedded = _unit(np.asarray(embed(texts), np.float64))
    rows: list[np.ndarray] = []
    start = 0
    for keys in candidates:
        rows.append(embedded[start:start + len(keys)])
        start += len(keys)
    chosen = _choose(candidates, rows, ranks, [_unit(np.asarray(v, np.float64))
                                               for v in vectors])
    taken = {key for keys in chosen for key in keys}
    labels = [covered.finished(keys, samples[i], profiles[i], taken)
              for i, keys in enumerate(chosen)]
    return covered.distinct_leads(labels, samples)


class WordVectors:
    """An embedder of short texts that keeps the last CACHED texts' vectors."""

    def __init__(self, embed: Embed, limit: int = CACHED) -> None:
        self.embed, self.limit = embed, limit
        self.kept: OrderedDict[str, np.ndarray] = OrderedDict()

    def __call__(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of the texts, embedding only those not kept."""
        fresh = [t for t in dict.fromkeys(texts) if t not in self.kept]
        if fresh:
            self.kept.update(zip(fresh, np.asarray(self.embed(fresh)), strict=True))
        out = np.stack([self.kept[t] for t in texts])
        for text in texts:
            self.kept.move_to_end(text)
        while len(self.kept) > self.limit:
            self.kept.popitem(last=False)
        return out


def _unit(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (zero rows stay zero)."""
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def _choose(candidates: list[list[str]], embedded: list[np.ndarray],
            ranks: list[dict[str, float]], vectors: list[np.ndarray]) -> list[list[str]]:
    """Per child, its label's word keys: in rounds, the largest child first, each child takes
    the word of its own that routes the most sampled passages right by cosine (each child's
    passages weighing alike), plus SEPARATION times the word's separation and PRIOR times its
    coverage margin; a word goes to one child only, and a child takes words while it has any
    left, up to WORDS_MAX (a word that routes no more sampled passages still brings its
    meaning: stopping there made labels of two words that routed fewer passages)."""
    n = len(candidates)
    pooled = np.concatenate(vectors)
    home = np.concatenate([np.full(len(v), i) for i, v in enumerate(vectors)])
    weight = np.concatenate([np.full(len(v), 1.0 / len(v)) for v in vectors])
    centroids = _unit(np.stack([v.mean(axis=0) for v in vectors]))
    separation = []
    for i, rows in enumerate(embedded):
        near = rows @ centroids.T if len(rows) else np.zeros((0, n))
        others = np.delete(near, i, axis=1).max(axis=1) if n > 1 else np.zeros(len(rows))
        separation.append(near[:, i] - others if len(rows) else near[:, 0])
    sums = np.zeros((n, pooled.shape[1]))
    sims = np.full((len(pooled), n), -np.inf)
    chosen: list[list[str]] = [[] for _ in range(n)]
    taken: set[str] = set()
    order = sorted(range(n), key=lambda i: -len(vectors[i]))
    for _ in range(WORDS_MAX):
        for i in order:
            free = [c for c, key in enumerate(candidates[i]) if key not in taken
                    and not any(covered.kin(key, mine) for mine in chosen[i])]
            if not free:
                continue
            gains = _gains(i, sums[i] + embedded[i][free], pooled, home, weight, sims)
            score = [gains[j] + SEPARATION * separation[i][c] + PRIOR * ranks[i][candidates[i][c]]
                     for j, c in enumerate(free)]
            c = free[int(np.argmax(score))]
            taken.add(candidates[i][c])
            chosen[i].append(candidates[i][c])
            sums[i] += embedded[i][c]
            sims[:, i] = pooled @ _unit(sums[i])
    return chosen


def _gains(i: int, labels: np.ndarray, pooled: np.ndarray, home: np.ndarray,
           weight: np.ndarray, sims: np.ndarray) -> np.ndarray:
    """Per candidate label of child i (rows of summed word vectors), the weighted passages
    routed right by cosine with it, less with child i's label as it is."""
    fresh = pooled @ _unit(labels).T  # passages x candidates
    others = sims.copy()
    others[:, i] = -np.inf
    own = sims[np.arange(len(home)), home]
    rest = others.copy()
    rest[np.arange(len(home)), home] = -np.inf
    best_rest = rest.max(axis=1)  # the best label neither child i's nor the passage's own
    mine = home == i
    now = np.where(mine, own > others.max(axis=1), (own > best_rest) & (own > sims[:, i]))
    after = np.where(mine[:, None], fresh > others.max(axis=1)[:, None],
                     ((own > best_rest) & (own > -np.inf))[:, None] & (own[:, None] > fresh))
    return np.asarray(weight @ after - weight @ now)


Vectors = Callable[[list[int]], dict[int, np.ndarray]]
"""Stored vectors of chunk ids, by id (unknown ids left out)."""


def label_batch(work: Work, read: covered.Read, vectors: Vectors, embed: Embed
                ) -> dict[int, dict[int, str]]:
    """The covered labeller's batch (covered.label_batch) with siblings chosen by meaning:
    each node's sampled passages' vectors are read with their texts."""
    def siblings(number: int, samples: list[Sample], profiles: list[Profile]
                 ) -> list[list[str]]:
        rows = work.samples[number]
        found = vectors([cid for row in rows for cid in row])
        dim = next((len(v) for v in found.values()), 0)
        stacked = [np.stack([found[c] for c in row if c in found]) if any(c in found for c in row)
                   else np.zeros((0, dim)) for row in rows]
        return sibling_labels(samples, profiles, stacked, embed)
    return covered.label_batch(work, read, siblings)

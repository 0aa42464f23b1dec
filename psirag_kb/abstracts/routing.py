"""Label routing: a measure of topic labels that needs no person.

Each passage (or question) under a node is routed to one of the node's children by the
children's labels alone, and counts when it lands in a child holding it (a question: a child
holding one of its gold passages). Three routers read the labels: BM25 of the item's words
against the labels' words, the nearest label by meaning (the cosine of the item's vector and the
embedded label's), and the nearest of the labels the map draws in each child's area. One reads
none, as a bound: the child holding the item's best passages. A tie or no match at all counts
as a miss.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from psirag_kb.abstracts.labels import phrase_key
from psirag_kb.text import ALNUM_RUN, STOP_WORDS
from psirag_kb.tree.view import TreeView

Shown = Callable[[int], str]
"""What routing reads of an abstract node: shown(node) -> its label."""
Choose = Callable[[Sequence[int], Sequence[int]], list[int | None]]
"""choose(children, items) -> per item (a chunk id, or a question's number), the index of the
child it is routed to (None: a miss)."""
Texts = Callable[[Iterable[int]], dict[int, str]]
"""Texts of chunk ids, by id."""


def terms(text: str) -> list[str]:
    """Lower-cased words without stop words, a plural 's' dropped (as label phrases compare)."""
    return [phrase_key(w) for w in ALNUM_RUN.findall(text.lower()) if w not in STOP_WORDS]


class LabelBM25:
    """BM25 over a handful of short documents: the children's labels."""

    def __init__(self, labels: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.tfs = [Counter(terms(label)) for label in labels]
        self.lengths = [sum(tf.values()) for tf in self.tfs]
        self.average = (sum(self.lengths) / max(len(labels), 1)) or 1.0
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(labels)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b = k1, b

    def best(self, text: str) -> int | None:
        """The label scoring highest for the text's distinct words (None: a tie or no match)."""
        words = set(terms(text)) & self.idf.keys()
        scores = []
        for tf, length in zip(self.tfs, self.lengths, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / self.average)
            scores.append(sum(self.idf[w] * tf[w] * (self.k1 + 1) / (tf[w] + norm)
                              for w in words if w in tf))
        top = max(scores, default=0.0)
        if top <= 0 or scores.count(top) > 1:
            return None
        return scores.index(top)


def by_words(shown: Shown, texts: Callable[[Sequence[int]], list[str]]) -> Choose:
    """The router by BM25 of each item's text against the children's labels."""
    def choose(kids: Sequence[int], items: Sequence[int]) -> list[int | None]:
        bm25 = LabelBM25([shown(k) for k in kids])
        return [bm25.best(text) for text in texts(items)]
    return choose


def by_meaning(targets: Callable[[Sequence[int]], np.ndarray],
               vectors: Callable[[Sequence[int]], np.ndarray]) -> Choose:
    """The router to the child whose vector (`targets`: its embedded label, or its centroid) is
    nearest the item's vector by cosine."""
    def choose(kids: Sequence[int], items: Sequence[int]) -> list[int | None]:
        if not items:
            return []
        return nearest(targets(kids), vectors(items))
    return choose


def by_areas(areas: Callable[[Sequence[int]], list[np.ndarray]],
             vectors: Callable[[Sequence[int]], np.ndarray]) -> Choose:
    """The router to the child whose area on the map holds the label nearest the item's vector
    by cosine: `areas(kids)` gives each child's embedded labels (its own and those drawn inside
    its area), one row each."""
    def choose(kids: Sequence[int], items: Sequence[int]) -> list[int | None]:
        if not items:
            return []
        rows = areas(kids)
        owner = np.concatenate([np.full(len(r), i) for i, r in enumerate(rows)])
        found = nearest(np.concatenate(rows), vectors(items))
        return [None if f is None else int(owner[f]) for f in found]
    return choose


def by_passages(ranked: Callable[[int], Sequence[int]], view: TreeView, most: int = 10
                ) -> Choose:
    """The router that reads no label: the child holding the most of the item's best passages
    (`ranked(item)`: chunk ids best first, as a search ranks them), the n-th counting 1/n; the
    first `most` are read. A bound for routers that read labels, which stand for a branch's
    passages in a few words."""
    def choose(kids: Sequence[int], items: Sequence[int]) -> list[int | None]:
        index = {k: i for i, k in enumerate(kids)}
        out: list[int | None] = []
        for item in items:
            votes = np.zeros(len(kids))
            for rank, chunk in enumerate(list(ranked(item))[:most]):
                for node in lineage(view, int(chunk)):
                    if node in index:
                        votes[index[node]] += 1.0 / (1 + rank)
            top = votes.max(initial=0.0)
            out.append(int(votes.argmax()) if top > 0 and (votes == top).sum() == 1 else None)
        return out
    return choose


def nearest(targets: np.ndarray, vectors: np.ndarray) -> list[int | None]:
    """Per vector, the row of the target of highest cosine (None for a tie or no target)."""
    if len(targets) == 0:
        return [None] * len(vectors)
    norms = np.linalg.norm(targets, axis=1, keepdims=True)
    sims = np.asarray(vectors, np.float64) @ (targets / np.where(norms > 0, norms, 1.0)).T
    best = sims.argmax(axis=1)
    ties = (sims == sims[np.arange(len(sims)), best][:, None]).sum(axis=1) > 1
    return [None if tie else int(b) for b, tie in zip(best, ties, strict=True)]


def kids_of(view: TreeView, node: int) -> list[int]:
    """A node's abstract children (leaves left out)."""
    return [k for k in view.nodes[node].children if k > 0]


def tally(kids: Sequence[int], items: Sequence[int], homes: Sequence[set[int]],
          sizes: Sequence[int], choose: Choose) -> tuple[int, int, int]:
    """(items routed to one of their homes, items, items whose homes hold the largest child)
    for items routed among `kids` (homes are indices of kids; sizes their leaves)."""
    if len(kids) < 2 or not items:
        return 0, 0, 0
    largest = max(range(len(kids)), key=lambda i: (sizes[i], -i))
    chosen = choose(kids, items)
    right = sum(c is not None and c in home for c, home in zip(chosen, homes, strict=True))
    return right, len(items), sum(largest in home for home in homes)


def route(view: TreeView, node: int, choose: Choose) -> tuple[int, int, int]:
    """(passages routed to the child holding them, passages, the largest child's passages) for
    one node whose children are abstract nodes (0, 0, 0 for fewer than two)."""
    kids = kids_of(view, node)
    items: list[int] = []
    homes: list[set[int]] = []
    for number, kid in enumerate(kids):
        ids = view.leaves_under(kid)
        items += ids
        homes += [{number}] * len(ids)
    return tally(kids, items, homes, [view.nodes[k].leaves for k in kids], choose)


def _shares(root: tuple[int, int, int], down: Sequence[int], unit: str) -> dict[str, float | int]:
    """Accuracy and the largest child's share at the root and one layer down."""
    return {"root": root[0] / max(root[1], 1), "root_majority": root[2] / max(root[1], 1),
            f"root_{unit}": root[1], "down": down[0] / max(down[1], 1),
            "down_majority": down[2] / max(down[1], 1), f"down_{unit}": down[1]}


def routing_by(view: TreeView, choose: Choose) -> dict[str, float | int]:
    """Passage routing accuracy at the root and one layer down (over every child of the root
    with abstract children), with the share of the largest child as the no-label baseline."""
    if view.root is None or view.root < 0:
        return {}
    sums = [0, 0, 0]
    for kid in kids_of(view, view.root):
        if view.nodes[kid].layer > 1:
            for i, value in enumerate(route(view, kid, choose)):
                sums[i] += value
    return _shares(route(view, view.root, choose), sums, "passages")


def routing(view: TreeView, shown: Shown, texts: Texts) -> dict[str, float | int]:
    """Passage routing by label BM25 (`routing_by` with `by_words`)."""
    def read(ids: Sequence[int]) -> list[str]:
        found = texts(ids)
        return [found.get(i, "") for i in ids]
    return routing_by(view, by_words(shown, read))


def lineage(view: TreeView, chunk_id: int) -> list[int]:
    """The abstract nodes above a leaf, the root first (empty for a chunk not in the tree)."""
    parents = view.parents_of(np.asarray([chunk_id]))
    node: int | None = int(parents[0])
    out: list[int] = []
    while node and node in view.nodes:
        out.append(node)
        node = view.nodes[node].parent
    return out[::-1] if out and out[-1] == view.root else []


def question_routing(view: TreeView, golds: Sequence[Iterable[int]],
                     choose: Choose) -> dict[str, float | int]:
    """Question routing at the root and one layer down: question `n` (its gold passages' chunk
    ids in golds[n]) is routed among the root's children, and within each child of the root
    holding one of its gold passages among that child's children; it counts when it lands in a
    child holding one. "split" counts the questions whose gold passages lie under several of the
    root's children (any of them is right), "unplaced" those with no gold chunk in the tree."""
    if view.root is None or view.root < 0:
        return {}
    kids = kids_of(view, view.root)
    index = {k: i for i, k in enumerate(kids)}
    paths = [[lineage(view, c) for c in gold] for gold in golds]
    placed = [n for n, p in enumerate(paths) if any(len(line) > 1 for line in p)]
    homes = [{index[line[1]] for line in paths[n] if len(line) > 1} for n in placed]
    root = tally(kids, placed, homes, [view.nodes[k].leaves for k in kids], choose)
    sums = [0, 0, 0]
    for number, kid in enumerate(kids):
        grand = kids_of(view, kid)
        if view.nodes[kid].layer < 2 or len(grand) < 2:
            continue
        where = {g: i for i, g in enumerate(grand)}
        asked = [n for n, home in zip(placed, homes, strict=True) if number in home]
        below = [{where[line[2]] for line in paths[n] if len(line) > 2 and line[1] == kid}
                 for n in asked]
        for i, value in enumerate(tally(grand, asked, below,
                                        [view.nodes[g].leaves for g in grand], choose)):
            sums[i] += value
    return _shares(root, sums, "questions") | {
        "split": sum(len(h) > 1 for h in homes), "unplaced": len(golds) - len(placed)}
def coverage(view: TreeView, shown: Shown,
             texts: Callable[[Iterable[int]], dict[int, str]]) -> dict[str, float | int]:
    """How much of its branch a label's words cover, over the children of the root and their
    children, each branch weighing its passages: "any" is the share of passages holding one of
    their label's words at least, "word" the share holding a label word (averaged over the
    words), "weakest" the share holding the label's least-held word."""
    if view.root is None or view.root < 0:
        return {}
    kids = [k for k in view.nodes[view.root].children if k > 0]
    nodes = kids + [g for k in kids if view.nodes[k].layer > 1
                    for g in view.nodes[k].children if g > 0]
    sums = [0.0, 0.0, 0.0]
    total = 0
    for node in nodes:
        words = set(terms(shown(node)))
        ids = view.leaves_under(node)
        found = texts(ids)
        held: Counter[str] = Counter()
        some = 0
        for chunk_id in ids:
            present = words.intersection(terms(found.get(chunk_id, "")))
            held.update(present)
            some += bool(present)
        total += len(ids)
        sums[0] += some
        if words:
            sums[1] += sum(held[w] for w in words) / len(words)
            sums[2] += min(held[w] for w in words)
    return {"any": sums[0] / max(total, 1), "word": sums[1] / max(total, 1),
            "weakest": sums[2] / max(total, 1), "branches": len(nodes)}

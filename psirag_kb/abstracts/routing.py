"""Label routing: a measure of topic labels that needs no person.

Each passage under a node is routed to one of the node's children by BM25 of the passage's text
against the children's labels alone; a label set is good when passages land in the child that
holds them. A tie or no match at all counts as a miss.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable

from psirag_kb.abstracts.labels import phrase_key
from psirag_kb.text import ALNUM_RUN, STOP_WORDS
from psirag_kb.tree.view import TreeView

Shown = Callable[[int], str]
"""What routing reads of an abstract node: shown(node) -> its label."""


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


def route(view: TreeView, node: int, shown: Shown,
          texts: Callable[[Iterable[int]], dict[int, str]]) -> tuple[int, int, int]:
    """(passages routed to the child holding them, passages, the largest child's passages) for
    one node whose children are abstract nodes (0, 0, 0 for fewer than two)."""
    kids = [k for k in view.nodes[node].children if k > 0]
    if len(kids) < 2:
        return 0, 0, 0
    bm25 = LabelBM25([shown(k) for k in kids])
    right = total = largest = 0
    for number, kid in enumerate(kids):
        ids = view.leaves_under(kid)
        largest = max(largest, len(ids))
        found = texts(ids)
        for chunk_id in ids:
            total += 1
            right += bm25.best(found.get(chunk_id, "")) == number
    return right, total, largest


def routing(view: TreeView, shown: Shown,
            texts: Callable[[Iterable[int]], dict[int, str]]) -> dict[str, float | int]:
    """Routing accuracy at the root and one layer down (over every child of the root with
    abstract children), with the share of the largest child as the no-label baseline."""
    out: dict[str, float | int] = {}
    if view.root is None or view.root < 0:
        return out
    right, total, largest = route(view, view.root, shown, texts)
    out |= {"root": right / max(total, 1), "root_majority": largest / max(total, 1),
            "root_passages": total}
    sums = [0, 0, 0]
    for kid in view.nodes[view.root].children:
        if kid > 0 and view.nodes[kid].layer > 1:
            for i, value in enumerate(route(view, kid, shown, texts)):
                sums[i] += value
    out |= {"down": sums[0] / max(sums[1], 1), "down_majority": sums[2] / max(sums[1], 1),
            "down_passages": sums[1]}
    return out


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

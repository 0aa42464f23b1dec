"""Label routing: passages and questions routed among a node's children by their labels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from psirag_kb.abstracts.routing import (
    by_areas,
    by_meaning,
    by_passages,
    by_words,
    lineage,
    nearest,
    question_routing,
    routing_by,
)
from psirag_kb.tree.view import NodeInfo, TreeView

# root 1 -> 2 (garbage collection: 4, 5), 3 (web: 6, 7); leaves are chunks 1-6
TEXTS = {1: "garbage collection frees memory", 2: "the collector tracks generations",
         3: "reference counting frees objects", 4: "URL routing maps requests",
         5: "HTTP caching headers", 6: "templates render HTML pages"}
LABELS = {2: "memory management", 3: "web requests", 4: "garbage collection",
          5: "reference counting", 6: "URL routing", 7: "HTML templates"}
PLACES = {1: 4, 2: 4, 3: 5, 4: 6, 5: 6, 6: 7}


def tree() -> TreeView:
    """The small tree above, with one-hot centroids per layer-1 node."""
    kids = {1: (2, 3), 2: (4, 5), 3: (6, 7), 4: (-1, -2), 5: (-3,), 6: (-4, -5), 7: (-6,)}
    parents = {2: 1, 3: 1, 4: 2, 5: 2, 6: 3, 7: 3}
    layers = {1: 3, 2: 2, 3: 2, 4: 1, 5: 1, 6: 1, 7: 1}
    leaves = {1: 6, 2: 3, 3: 3, 4: 2, 5: 1, 6: 2, 7: 1}
    nodes = {n: NodeInfo(parents.get(n), layers[n], kids[n], np.eye(8, dtype=np.float32)[n],
                         np.zeros(8, np.float32), "", False, leaves[n], LABELS.get(n, ""))
             for n in kids}
    leaf_parent = np.zeros(7, np.int64)
    for chunk, node in PLACES.items():
        leaf_parent[chunk] = node
    return TreeView(1, nodes, leaf_parent, 6, 0)


def texts_of(items: Sequence[int]) -> list[str]:
    return [TEXTS[i] for i in items]


def test_the_nearest_target_wins_and_a_tie_is_a_miss() -> None:
    targets = np.array([[1.0, 0.0], [0.0, 2.0]])
    found = nearest(targets, np.array([[0.9, 0.1], [0.1, 0.9], [0.5, 0.5]]))
    assert found == [0, 1, None]
    assert nearest(np.zeros((0, 2)), np.ones((2, 2))) == [None, None]


def test_a_leaf_s_lineage_runs_from_the_root_down() -> None:
    view = tree()
    assert lineage(view, 3) == [1, 2, 5]
    assert lineage(view, 6) == [1, 3, 7]
    assert lineage(view, 99) == []


def test_passages_routed_by_words_count_where_their_words_match() -> None:
    view = tree()
    found = routing_by(view, by_words(lambda n: view.nodes[n].label, texts_of))
    # root: "memory" (1) and "routing"/"requests" (4) match; the others hold no label word
    assert found["root"] == 2 / 6 and found["root_passages"] == 6
    assert found["root_majority"] == 3 / 6  # the first of two equal children
    # down: "garbage collection" (1), "reference counting" (3), "URL routing" (4), "HTML" (6)
    assert found["down"] == 4 / 6 and found["down_majority"] == 4 / 6


def test_passages_routed_by_meaning_go_to_the_nearest_label_vector() -> None:
    view = tree()

    def centroids(kids: Sequence[int]) -> np.ndarray:
        return np.stack([view.nodes[k].vector for k in kids])

    def wrong(kids: Sequence[int]) -> np.ndarray:  # every passage nearest its sibling
        return centroids(kids)[::-1]

    def passages(ids: Sequence[int]) -> np.ndarray:  # a passage's vector: its layer-1 node's
        return np.stack([np.eye(8)[PLACES[i]] + np.eye(8)[view.nodes[PLACES[i]].parent or 0]
                         for i in ids])

    assert routing_by(view, by_meaning(centroids, passages))["down"] == 1.0
    assert routing_by(view, by_meaning(centroids, passages))["root"] == 1.0
    assert routing_by(view, by_meaning(wrong, passages))["down"] == 0.0


def test_a_question_counts_when_routed_to_a_child_holding_a_gold_passage() -> None:
    view = tree()
    questions = ["which collector frees memory", "how is a URL routing done",
                 "what renders HTML and frees memory", "nothing matches here"]
    golds = [{1}, {4}, {6, 3}, {999}]  # the third's golds lie under both children of the root

    def ask(kids: Sequence[int], items: Sequence[int]) -> list[int | None]:
        return by_words(lambda n: view.nodes[n].label, lambda qs: [questions[q] for q in qs])(
            kids, items)

    found = question_routing(view, golds, ask)
    assert found["unplaced"] == 1 and found["root_questions"] == 3 and found["split"] == 1
    # root: q0 -> memory (right), q1 -> no label word of "web requests": a miss, q2 -> memory
    assert found["root"] == 2 / 3
    # down: q0 under 2 (garbage collection? no word: "collector" != "collection") is a miss,
    # q1 under 3 -> URL routing (right), q2 under 2 (gold 3: reference counting, not matched)
    # and under 3 (gold 6: HTML templates, right)
    assert found["down_questions"] == 4
    assert found["down"] == 2 / 4


def test_a_question_goes_to_the_area_holding_the_nearest_label_drawn_in_it() -> None:
    # each child's area: its own label's vector, then its children's (one-hot by node id)
    drawn = {2: [2, 4, 5], 3: [3, 6, 7]}

    def areas(kids: Sequence[int]) -> list[np.ndarray]:
        return [np.eye(8)[drawn.get(k, [k])] for k in kids]

    asked = np.eye(8)[[5, 7, 3, 0]]  # near node 5's label, node 7's, node 3's, none at all
    found = by_areas(areas, lambda qs: asked[list(qs)])([2, 3], [0, 1, 2, 3])
    assert found == [0, 1, 1, None]  # a question equally far from every label is a miss


def test_the_passage_bound_counts_the_best_passages_by_rank() -> None:
    view = tree()
    ranked = {0: [1, 4, 5], 1: [4, 1, 2], 2: [99], 3: []}
    choose = by_passages(lambda q: ranked[q], view)
    # q0: chunk 1 under 2 (1) against chunks 4, 5 under 3 (1/2 + 1/3): 2 wins
    # q1: 4 under 3 (1) against 1, 2 under 2 (1/2 + 1/3): 3 wins; q2's passage is in no
    # branch and q3 found none: misses
    assert choose([2, 3], [0, 1, 2, 3]) == [0, 1, None, None]
    # q4: 4 under 3 (1) against 1, 2, 3 under 2 (1/2 + 1/3 + 1/4): 2 wins, unless only the
    # first passage is read
    ranked[4] = [4, 1, 2, 3]
    assert choose([2, 3], [4]) == [0]
    assert by_passages(lambda q: ranked[q], view, most=1)([2, 3], [4]) == [1]
    # one layer down, among node 2's children: chunk 1 lies under 4, chunk 3 under 5
    assert choose([4, 5], [0]) == [0]

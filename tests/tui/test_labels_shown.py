"""The TUI shows a node's label where it has one: the first screen, the tree, the path."""

from __future__ import annotations

from tui.format import overview_text, tree_path
from tui.screens.tree import node_label

LONG = ("garbage collection, reference counting, memory blocks, weak references, allocators, "
        "finalizers, generations")
ROOT = {"id": 9, "layer": 2, "leaves": 30, "label": "Python memory, Web servers, Licences",
        "abstract": LONG, "dirty": False, "children": [
            {"id": 1, "kind": "node", "leaves": 20, "label": "Python memory, garbage collection",
             "abstract": LONG, "dirty": False},
            {"id": 2, "kind": "node", "leaves": 10, "label": "", "abstract": "http, servers",
             "dirty": False}]}


def test_the_first_screen_shows_each_topics_label_not_its_long_list() -> None:
    shown = overview_text(ROOT).plain
    assert "Python memory, garbage collection" in shown
    assert "finalizers" not in shown  # the long list stays out of the overview
    assert "http, servers" in shown  # no label yet: the abstract stands in


def test_the_tree_and_the_path_show_labels() -> None:
    assert node_label(ROOT["children"][0]).plain.startswith("Python memory, garbage collection")
    path = tree_path([{"id": 9, "layer": 2, "label": ROOT["label"], "abstract": LONG,
                       "dirty": False}]).plain
    assert ROOT["label"] in path and "finalizers" not in path

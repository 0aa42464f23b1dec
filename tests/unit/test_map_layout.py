"""The topic map's layout, sampling and drawing (pure logic over a tree made by hand)."""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest

from psirag_kb.search.topicmap import topic_map
from psirag_kb.tree.view import NodeInfo, TreeView
from psirag_kb.web.mapdraw import Drawing, age_of, fitted, folder_of
from psirag_kb.web.treemap import Box, squarify

ZERO = np.zeros(1, np.float32)


def made_tree(shape: dict[int, list[int]], labels: dict[int, str]) -> TreeView:
    """A view of a tree given as node -> children (negative: chunk ids as leaves)."""
    parent = {kid: node for node, kids in shape.items() for kid in kids}
    nodes: dict[int, NodeInfo] = {}

    def layer(node: int) -> int:
        return 1 if shape[node][0] < 0 else layer(shape[node][0]) + 1

    for node in sorted(shape, key=layer):
        kids = tuple(shape[node])
        leaves = sum(1 if k < 0 else nodes[k].leaves for k in kids)
        nodes[node] = NodeInfo(parent.get(node), layer(node), kids, ZERO, ZERO,
                               f"abstract of {node}", False, leaves, labels.get(node, ""))
    root = next(n for n in shape if n not in parent)
    ids = [-k for kids in shape.values() for k in kids if k < 0]
    leaf_parent = np.zeros(max(ids) + 1, np.int64)
    for node, kids in shape.items():
        for k in kids:
            if k < 0:
                leaf_parent[-k] = node
    return TreeView(root, nodes, leaf_parent, len(ids), 0)


# root 7 over 5 (6 passages: 4 and 3) and 6 (2 passages, one node 1)
SHAPE = {1: [-1, -2], 2: [-3, -4, -5, -6], 3: [-7, -8], 4: [-9], 5: [2, 3], 6: [1, 4], 7: [5, 6]}
PATHS = {i: (f"/docs/{'a' if i <= 8 else 'b'}/file{i % 3}.md", 1000.0 + i) for i in range(1, 10)}


def files_of(ids: Iterable[int]) -> dict[int, tuple[str, float]]:
    return {i: PATHS[i] for i in ids if i in PATHS}


def no_hits(ids: Iterable[int]) -> dict[int, Any]:
    return {}


class Only:
    """A person who may read chunks 1-8 only (not 9, under node 4)."""

    def node(self, key: int) -> bool:
        return -key <= 8 if key < 0 else key in (1, 2, 3, 5)

    def tops(self) -> list[int]:
        return [5, 1]


def test_squarify_tiles_the_box_in_proportion() -> None:
    rng = random.Random(7)
    for sizes in ([6, 6, 4, 3, 2, 2, 1], [1], [5, 0, 5], [rng.randint(1, 900) for _ in range(40)]):
        box = Box(10, 20, 600, 400)
        boxes = squarify(sizes, box)
        total = sum(sizes)
        for size, got in zip(sizes, boxes, strict=True):
            assert got.w * got.h == pytest.approx(box.w * box.h * size / total, rel=1e-6, abs=1e-6)
            assert box.x - 1e-6 <= got.x and got.x + got.w <= box.x + box.w + 1e-6
            assert box.y - 1e-6 <= got.y and got.y + got.h <= box.y + box.h + 1e-6
        for a, b in itertools.combinations([g for g in boxes if g.w * g.h > 0], 2):
            overlap_w = min(a.x + a.w, b.x + b.w) - max(a.x, b.x)
            overlap_h = min(a.y + a.h, b.y + b.h) - max(a.y, b.y)
            assert overlap_w <= 1e-6 or overlap_h <= 1e-6
    squares = squarify([1] * 16, Box(0, 0, 400, 400))
    assert max(max(b.w / b.h, b.h / b.w) for b in squares) < 1.5  # squarified, not strips


def test_the_map_data_samples_files_and_follows_visibility() -> None:
    view = made_tree(SHAPE, {5: "Apples", 6: "Bananas"})
    top = topic_map(view, None, no_hits, files_of)
    assert [c["id"] for c in top["children"]] == [5, 6]
    assert [g["id"] for g in top["children"][0]["children"]] == [2, 3]
    assert top["children"][1]["children"][1]["files"] == [{"path": "/docs/b/file0.md",
                                                           "passages": 1}]
    assert top["leaves"] == 9 and top["trail"] == []
    assert top["children"][0]["path"].startswith("/docs/a/")
    assert top["children"][0]["changed"] == 1008.0
    down = topic_map(view, 2, no_hits, files_of)
    assert [t["id"] for t in down["trail"]] == [7, 5]
    seen = topic_map(view, None, no_hits, files_of, Only())
    assert seen["id"] == 0 and [c["id"] for c in seen["children"]] == [5, 1]
    assert all("/b/" not in f["path"] for c in seen["children"] for f in c["files"])
    small = topic_map(view, None, no_hits, files_of, budget=2)
    assert all(len(a["files"]) <= 1 for a in small["children"][0]["children"])


def test_the_svg_escapes_labels_and_links_one_layer_down() -> None:
    view = made_tree(SHAPE, {5: "<script>alert(1)</script> & apples", 6: "x" * 300})
    top = topic_map(view, None, no_hits, files_of)
    top["children"][0]["abstract"] = '"><img src=x onerror=alert(2)>'
    svg = str(Drawing(top, "folder", ["/docs"], on_path=[5, 2], now=2000.0).svg(600, 400))
    assert "<script" not in svg and "<img" not in svg
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; apples" in svg
    links = re.findall(r'<a href="([^"]+)" class="(area[^"]*)" data-node="(\d+)"', svg)
    assert [(h, n) for h, _, n in links] == [("/map?node=5", "5"), ("/map?node=2", "2"),
                                             ("/map?node=3", "3"), ("/map?node=6", "6"),
                                             ("/map?node=1", "1"), ("/map?node=4", "4")]
    assert {n for _, c, n in links if "on-path" in c} == {"5", "2"}
    rects = {n: tuple(map(float, m)) for n, *m in re.findall(
        r'data-node="(\d+)".*?<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" '
        r'height="([\d.]+)"', svg)}
    assert rects["5"][2] * rects["5"][3] / (600 * 400) == pytest.approx(6 / 9, abs=0.01)
    texts = re.findall(r"<text [^>]*>([^<]*)</text>", svg)
    assert "x" * 161 not in svg and any(re.fullmatch("x+…", t) for t in texts)  # cut to fit
    lowest = topic_map(view, 1, no_hits, files_of)  # a layer-1 node: its passages drawn
    marked = str(Drawing(lowest, on_path=[7, 6, 1], passage=2).svg())
    assert re.findall(r'class="area on-path" data-node="(\w+)"', marked) == ["p2"]
    assert '<a href="/source/1" class="area" data-node="p1"' in marked
    kept = Drawing(top, "changed", keep={"colour": "changed", "chunk": "3"})
    assert kept.href(top["children"][0]) == "/map?node=5&colour=changed&chunk=3"
    assert kept.link(None, colour="") == "/map?chunk=3"


def test_folders_ages_and_fitting() -> None:
    assert folder_of("/docs/team-a/x/y.md", ["/docs"]) == "/docs/team-a"
    assert folder_of("/docs/y.md", ["/docs"]) == "/docs"
    assert folder_of("/w/a/b.md", ["/docs"]) == "/w/a"
    assert age_of(0, 100.0)[0] == "not known"
    assert age_of(95.0, 100.0)[0] == "the last hour"
    assert age_of(1e9 - 400 * 86400, 1e9)[0] == "longer ago"
    assert fitted("apples and pears", 1000, 12) == "apples and pears"
    assert fitted("apples and pears", 50, 12) == "apples…"
    assert fitted("apples", 10, 12) == ""

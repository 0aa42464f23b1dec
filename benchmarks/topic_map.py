"""The topic map of a million-passage tree: its top three layers sampled, laid out and drawn.

    PYTHONPATH=. .venv/bin/python benchmarks/topic_map.py --leaves 1000000 --fanout 40 --runs 5

The tree is made by hand in the shape the builder's `max_children` allows at its widest: a root
of `fanout` children with `fanout` children each (the map's three layers: 1 + 40 + 1,600
areas), and below each of those, nodes of `fanout`-or-fewer leaves down to the passages. The
file lookup is DuckDB's (the store's `files_of` query over in-memory tables of `--leaves`
chunks in files of 50, with their primary keys); every area's label and abstract is 8 and 40
words. Prints one JSON line per step (median over the runs): the sampling and file lookup
(`search/topicmap.py`), the squarified layout and SVG (`web/mapdraw.py`), and the whole page
(`map.html` with the list below the map).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
from jinja2 import Environment, FileSystemLoader, select_autoescape

from psirag_kb.search.topicmap import topic_map
from psirag_kb.tree.view import NodeInfo, TreeView
from psirag_kb.web import mapdraw
from psirag_kb.web.render import file_name, title, where

ZERO = np.zeros(1, np.float32)
WORDS = "orchard ledger merger crate valgrind branch rebase commit pears plums".split()


def wide_tree(leaves: int, fanout: int) -> TreeView:
    """A root of `fanout` children of `fanout` children each, each of those holding an equal
    share of `leaves` passages in layer-1 nodes of at most `fanout` leaves."""
    nodes: dict[int, NodeInfo] = {}
    leaf_parent = np.zeros(leaves + 1, np.int64)
    next_id = [1]
    chunk = [1]

    def text(n: int, words: int) -> str:
        return " ".join(WORDS[(n + i) % len(WORDS)] for i in range(words))

    def add(parent: int | None, layer: int, kids: tuple[int, ...], count: int) -> int:
        key = next_id[0]
        next_id[0] += 1
        nodes[key] = NodeInfo(parent, layer, kids, ZERO, ZERO, text(key, 40), False, count,
                              text(key, 8))
        return key

    def build(count: int, layer: int) -> tuple[int, ...]:
        """Keys of the layer-`layer` nodes holding `count` passages (parents set later)."""
        if layer == 1:
            out = []
            for start in range(0, count, fanout):
                n = min(fanout, count - start)
                ids = tuple(-(chunk[0] + i) for i in range(n))
                key = add(None, 1, ids, n)
                leaf_parent[chunk[0]: chunk[0] + n] = key
                chunk[0] += n
                out.append(key)
            return tuple(out)
        below = build(count, layer - 1)
        out = []
        for start in range(0, len(below), fanout):
            kids = below[start: start + fanout]
            out.append(add(None, layer, kids, sum(nodes[k].leaves for k in kids)))
        return tuple(out)

    per_grandchild = leaves // (fanout * fanout)
    depth = 1
    while fanout ** depth < per_grandchild:
        depth += 1
    grandchildren = []
    for _ in range(fanout * fanout):
        grandchildren.append(_one(build(per_grandchild, depth), nodes, add, depth + 1))
    children = [_one(tuple(grandchildren[i: i + fanout]), nodes, add, depth + 1)
                for i in range(0, len(grandchildren), fanout)]
    root = _one(tuple(children), nodes, add, depth + 2)
    for key, info in list(nodes.items()):
        for kid in info.children:
            if kid > 0:
                nodes[kid] = NodeInfo(key, *_rest(nodes[kid]))
    return TreeView(root, nodes, leaf_parent, chunk[0] - 1, 0)


def _one(kids: tuple[int, ...], nodes: dict[int, NodeInfo], add: Any, layer: int) -> int:
    """One node over these keys (a single key is kept as it is)."""
    if len(kids) == 1:
        return kids[0]
    return int(add(None, layer, kids, sum(nodes[k].leaves for k in kids)))


def _rest(info: NodeInfo) -> tuple[Any, ...]:
    """A node's fields after its parent."""
    return (info.layer, info.children, info.vector, info.guided, info.abstract, info.dirty,
            info.leaves, info.label)


def file_lookup(leaves: int) -> Any:
    """The store's `files_of` over in-memory DuckDB tables of this many chunks."""
    db = duckdb.connect()
    db.execute("CREATE TABLE files (id BIGINT PRIMARY KEY, path VARCHAR, mtime DOUBLE)")
    db.execute("CREATE TABLE chunks (id BIGINT PRIMARY KEY, file_id BIGINT)")
    db.execute("INSERT INTO files SELECT range, '/docs/team-' || (range % 7) || '/file' || "
               f"range || '.md', 1.7e9 + range FROM range({leaves // 50 + 1})")
    db.execute(f"INSERT INTO chunks SELECT range, range // 50 FROM range(1, {leaves + 1})")

    def files_of(ids: Any) -> dict[int, tuple[str, float]]:
        rows = db.execute("""SELECT c.id, f.path, coalesce(f.mtime, 0) FROM chunks c JOIN files f
                             ON c.file_id = f.id WHERE c.id = ANY(?::BIGINT[])""",
                          [[int(i) for i in ids]]).fetchall()
        return {int(c): (str(p), float(m)) for c, p, m in rows}

    return files_of


def templates() -> Environment:
    """The page's templates, with the globals `map.html` uses."""
    here = Path(mapdraw.__file__).parent / "templates"
    env = Environment(loader=FileSystemLoader(here), autoescape=select_autoescape(default=True))
    env.globals.update(where=where, file_name=file_name, title=title)
    env.filters["flat"] = lambda text: " ".join(str(text).split())
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=1_000_000)
    parser.add_argument("--fanout", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    started = time.perf_counter()
    view = wide_tree(args.leaves, args.fanout)
    files_of = file_lookup(args.leaves)
    print(json.dumps({"built_s": round(time.perf_counter() - started, 1),
                      "leaves": view.n_leaves, "nodes": len(view.nodes)}), flush=True)
    page = templates().get_template("map.html")
    steps: dict[str, list[float]] = {"sample_and_files": [], "layout_and_svg": [], "page": []}
    for _ in range(args.runs):
        t0 = time.perf_counter()
        top = topic_map(view, None, lambda ids: {}, files_of)
        t1 = time.perf_counter()
        drawing = mapdraw.Drawing(top, "folder", ["/docs"])
        svg = drawing.svg()
        t2 = time.perf_counter()
        html = page.render(top=top, path=[], chunk_id=None, drawing=drawing, colouring="folder",
                           keep={}, at_top=True, label_of=mapdraw.label_of, area_id=mapdraw.area_id,
                           short=mapdraw.short, session=None, modes=())
        t3 = time.perf_counter()
        for name, seconds in zip(steps, (t1 - t0, t2 - t1, t3 - t0), strict=True):
            steps[name].append(seconds)
    areas = len(top["children"]) + sum(len(c.get("children") or []) for c in top["children"])
    print(json.dumps({name: round(statistics.median(values), 3) for name, values in
                      steps.items()} | {"areas": areas, "svg_bytes": len(svg),
                                        "page_bytes": len(html)}))


if __name__ == "__main__":
    main()

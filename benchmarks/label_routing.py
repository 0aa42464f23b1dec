"""Label routing: do a node's children's labels say where its passages and questions are?

    .venv/bin/python benchmarks/label_routing.py examples/docs $HELDOUT \
        --devset $DATA/popqa_dev500 --work $WORK --methods covered meaning

Each folder (a dev set's corpus.jsonl becomes one Markdown file per title, as in
benchmarks/chunk_context.py) is indexed once with the real model in a data directory under
`--work` (a second run reuses it). For each offline label method (`[tree] offline_labels`:
"keywords" is the earlier picker, "contrast" the sibling-contrastive labeller, "covered" the
labeller checked against the passages, "meaning" its words chosen by embedding) every node is
marked dirty and given its abstract and label again. Then every chunk under the root is routed
to one of the root's children, and every chunk under each child of the root to one of that
child's children; a chunk counts when it lands in the child that holds it (a tie or no match
counts as a miss; see psirag_kb/abstracts/routing.py). Four routers: "label", BM25 of the
chunk's text against the children's labels alone; "meaning", the child whose embedded label
(the knowledge base's embedder) is nearest the chunk's stored vector by cosine; "map", the child
whose area on the map (its label and its children's labels, drawn inside it) holds the nearest
embedded label; "centroid", the child whose centroid is nearest (no label read: what the tree
itself knows). A dev set's questions (questions.jsonl, `supporting_ids`) are routed the same
way, the question's text by "label" and its embedding by "meaning", "map" and "centroid", and by
a bound that reads no label, "search": the child holding most of the question's best 10
passages by hybrid search (the n-th counting 1/n). Questions are routed at the root among the
root's children, one layer down among the children of each child of the root holding a gold
passage (a gold passage is the chunks whose lines cover its line); a question counts when it
lands in a child holding one of its gold passages ("split": those whose gold passages lie under
several of the root's children). Labels are what people see: the display label, or for
"keywords" (which has none) the first LABEL_MAX phrases of the abstract; "list" routes by the
whole abstract.
"majority" is the largest child's share. Beside it, the labels' coverage over the same branches
(the root's children and theirs, each weighing its passages): "any", the share of passages
holding one of their label's words; "weakest", the share holding its least-held word. Prints
one JSON line per folder and method, with the root's children's labels, and two tables.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from psirag_kb.abstracts.labels import LABEL_MAX
from psirag_kb.abstracts.routing import (
    by_areas,
    by_meaning,
    by_passages,
    by_words,
    coverage,
    kids_of,
    question_routing,
    routing,
    routing_by,
)
from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.tree import rows as tree_rows
from psirag_kb.tree.view import TreeView

sys.path.insert(0, str(Path(__file__).parent))
from chunk_context import Place, read_jsonl, write_articles  # noqa: E402

METHODS = ("keywords", "contrast", "covered", "meaning")
COLUMNS = [f"{who}{layer}_{how}" for who in ("", "q_") for layer in ("root", "down")
           for how in ("label", "meaning", "map", "centroid", "search", "majority")
           if who or how != "search"]
"""The second table's columns: passages, then questions ("label" is label BM25)."""
SEARCH_K = 10
"""How many of a question's best passages (hybrid search) the "search" bound reads."""


def shown(view: TreeView, method: str, whole: bool) -> Callable[[int], str]:
    """What routing reads of a node: its display label, or its abstract (`whole`); "keywords"
    has no label: its abstract's first LABEL_MAX phrases are what people see first."""
    def read(node: int) -> str:
        info = view.nodes[node]
        if whole:
            return info.abstract
        if method != "keywords" and info.label:
            return info.label
        return ", ".join(info.abstract.split(", ")[:LABEL_MAX])
    return read


def relabel(kb: KnowledgeBase, method: str) -> float:
    """Mark every node dirty and write its abstract and label with one method; seconds."""
    kb.config = kb.config.replace("tree", offline_labels=method)
    kb.abstract_job.config = kb.config
    stores = kb.stores

    def dirty_all() -> None:
        with stores.tree_edit():
            live = stores.tree_index.live
            live.dirty.update(live.children)
            live.touched.update(live.children)
            live.labels.clear()
            with stores.store.transaction():
                tree_rows.write_tree(stores.store, live)

    stores.writer.call(dirty_all)
    started = time.perf_counter()
    kb.regenerate_abstracts(offline=True)
    return time.perf_counter() - started


Questions = tuple[list[str], list[set[int]]]
"""A dev set's questions and, per question, the chunk ids of its gold passages."""


def gold_chunks(kb: KnowledgeBase, places: dict[str, Place],
                items: list[dict[str, Any]]) -> Questions:
    """Each question's gold passages as the chunks whose lines cover the passage's line."""
    ids = kb.stores.store.chunk_ids()
    spans: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for start in range(0, len(ids), 2000):
        for hit in kb.stores.store.hits(ids[start:start + 2000]).values():
            if hit.line_first is not None:
                spans[hit.path].append((hit.line_first, hit.line_last or hit.line_first, hit.id))

    def chunks(place: Place) -> set[int]:
        path, line = place
        return {cid for first, last, cid in spans.get(path, []) if first <= line <= last}

    return ([item["question"] for item in items],
            [set().union(*(chunks(places[g]) for g in item["supporting_ids"] if g in places))
             for item in items])


def by_vectors(kb: KnowledgeBase, view: TreeView, read: Callable[[int], str],
               questions: Questions | None) -> dict[str, Any]:
    """Passage and question routing by the nearest embedded label ("meaning"), by the nearest
    centroid ("centroid": the tree's own vectors, no label read) and, for questions, by label
    BM25 of the question ("label")."""
    embedded: dict[str, np.ndarray] = {}

    def labels(kids: Sequence[int]) -> np.ndarray:
        fresh = [t for t in dict.fromkeys(read(k) for k in kids) if t not in embedded]
        if fresh:
            embedded.update(zip(fresh, kb.embedder.embed(fresh), strict=True))
        return np.stack([embedded[read(k)] for k in kids])

    def centroids(kids: Sequence[int]) -> np.ndarray:
        return np.stack([view.nodes[k].vector for k in kids]).astype(np.float32)

    def passages(ids: Sequence[int]) -> np.ndarray:
        return kb.stores.store.vectors(np.asarray(ids, np.int64))

    def areas(kids: Sequence[int]) -> list[np.ndarray]:
        return [labels([kid, *kids_of(view, kid)]) for kid in kids]

    out: dict[str, Any] = {}
    for name, choose in (("meaning", by_meaning(labels, passages)),
                         ("centroid", by_meaning(centroids, passages)),
                         ("map", by_areas(areas, passages))):
        found = routing_by(view, choose)
        out |= {f"root_{name}": round(found["root"], 4), f"down_{name}": round(found["down"], 4)}
    if questions is None:
        return out
    texts, golds = questions
    asked = kb.embed_queries(texts)
    best = [kb.rank(text, "hybrid", SEARCH_K).ids.tolist() for text in texts]
    routers = {"label": by_words(read, lambda items: [texts[n] for n in items]),
               "map": by_areas(areas, lambda items: asked[list(items)]),
               "search": by_passages(lambda n: best[n], view, SEARCH_K)}
    for name, targets in (("meaning", labels), ("centroid", centroids)):
        routers[name] = by_meaning(targets, lambda items: asked[list(items)])
    for name, choose in routers.items():
        found = question_routing(view, golds, choose)
        out |= {f"q_root_{name}": round(found["root"], 4),
                f"q_down_{name}": round(found["down"], 4)}
    return out | {f"q_{k}": (round(v, 4) if isinstance(v, float) else v)
                  for k, v in found.items() if k not in ("root", "down")}


def measure(kb: KnowledgeBase, method: str, questions: Questions | None = None
            ) -> dict[str, Any]:
    """Routing accuracy at the root and one layer down, by label and by whole abstract."""
    view = kb.stores.tree_index.view

    def texts(ids: Iterable[int]) -> dict[int, str]:
        return {cid: text for cid, (text, _) in kb.stores.store.texts(ids).items()}

    out: dict[str, Any] = {}
    for whole in (False, True):
        name = "list" if whole else "label"
        found = routing(view, shown(view, method, whole), texts)
        out |= {f"root_{name}": round(found["root"], 4), f"down_{name}": round(found["down"], 4),
                "root_majority": round(found["root_majority"], 4),
                "down_majority": round(found["down_majority"], 4),
                "down_passages": found["down_passages"]}
    read = shown(view, method, False)
    out |= by_vectors(kb, view, read, questions)
    covered = coverage(view, read, texts)
    out |= {f"cover_{k}": round(v, 4) for k, v in covered.items()}
    out["root"] = read(view.root)
    out["children"] = [read(k) for k in view.nodes[view.root].children if k > 0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="folders of documents")
    parser.add_argument("--devset", nargs="*", type=Path, default=[],
                        help="dev set folders with corpus.jsonl (written as Markdown files)")
    parser.add_argument("--work", type=Path, required=True, help="files and data directories")
    parser.add_argument("--methods", nargs="+", default=["contrast", "covered"], choices=METHODS)
    args = parser.parse_args()
    folders = [f.resolve() for f in args.folders]
    asked: dict[Path, tuple[dict[str, Place], list[dict[str, Any]]]] = {}
    for devset in args.devset:
        out = args.work / "files"  # a rerun leaves files holding the same lines unchanged
        places = write_articles(devset.name, read_jsonl(devset / "corpus.jsonl"), out)
        folders.append((out / devset.name).resolve())
        asked[folders[-1]] = (places, read_jsonl(devset / "questions.jsonl"))
    print(json.dumps({"machine": f"{platform.machine()}, {platform.processor() or '?'}, "
                      f"python {platform.python_version()}"}), flush=True)
    table = []
    if len({f.name for f in folders}) < len(folders):
        raise SystemExit("two folders share a name: each gets the data directory data-NAME")
    for folder in folders:
        data = args.work / f"data-{folder.name}"
        mark = data / "label-routing-folder.txt"
        if mark.exists() and mark.read_text() != str(folder):
            raise SystemExit(f"{data} holds {mark.read_text()}, not {folder}: use another --work")
        data.mkdir(parents=True, exist_ok=True)
        mark.write_text(str(folder))
        config = Config().with_data_dir(data)
        with KnowledgeBase(config) as kb:
            kb.ingest([folder])
            questions = gold_chunks(kb, *asked[folder]) if folder in asked else None
            for method in args.methods:
                seconds = relabel(kb, method)
                row = {"folder": folder.name, "method": method,
                       "chunks": kb.stores.store.chunk_count(), "label_s": round(seconds, 2)}
                row |= measure(kb, method, questions)
                print(json.dumps(row), flush=True)
                table.append(row)
    print(f"\n{'folder':<16} {'method':<9} {'root label':>10} {'root list':>9} "
          f"{'root maj':>8} {'down label':>10} {'down list':>9} {'down maj':>8} "
          f"{'cover any':>9} {'weakest':>7}")
    for row in table:
        print(f"{row['folder']:<16} {row['method']:<9} {row['root_label']:>10.3f} "
              f"{row['root_list']:>9.3f} {row['root_majority']:>8.3f} {row['down_label']:>10.3f} "
              f"{row['down_list']:>9.3f} {row['down_majority']:>8.3f} "
              f"{row.get('cover_any', 0):>9.3f} {row.get('cover_weakest', 0):>7.3f}")
    print(f"\n{'folder':<16} {'method':<9} " + " ".join(f"{c:>8}" for c in COLUMNS))
    for row in table:
        print(f"{row['folder']:<16} {row['method']:<9} "
              + " ".join(f"{row[c]:>8.3f}" if c in row else f"{'':>8}" for c in COLUMNS))


if __name__ == "__main__":
    main()

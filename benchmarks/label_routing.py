"""Label routing: do a node's children's labels say where its passages are? (issue 27)

    .venv/bin/python benchmarks/label_routing.py examples/docs /tmp/heldout \
        --devset $D/popqa_dev500 --work /tmp/label-routing

Each folder (a dev set's corpus.jsonl becomes one Markdown file per title, as in
benchmarks/chunk_context.py) is indexed once with the real model in a data directory under
`--work` (a second run reuses it). For each offline label method (`[tree] offline_labels`:
"keywords" is the earlier picker, "contrast" the sibling-contrastive labeller) every node is
marked dirty and given its abstract and label again. Then every chunk under the root is routed
to one of the root's children by BM25 of the chunk's text against the children's labels alone,
and every chunk under each child of the root to one of that child's children; a chunk counts
when it lands in the child that holds it (a tie or no match counts as a miss). Labels are what
people see: the display label, or for "keywords" (which has none) the first LABEL_MAX phrases
of the abstract; "list" routes by the whole abstract. Prints one JSON line per folder and method,
with the root's children's labels, and a table.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from psirag_kb.abstracts.labels import LABEL_MAX, phrase_key
from psirag_kb.abstracts.writers import STOP_WORDS
from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.search.treeview import TreeView

sys.path.insert(0, str(Path(__file__).parent))
from chunk_context import read_jsonl, write_articles  # noqa: E402

METHODS = ("keywords", "contrast")
_WORD = re.compile(r"[^\W_]+")


def terms(text: str) -> list[str]:
    """Lower-cased words without stop words, plural 's' dropped (as label phrases compare)."""
    return [phrase_key(w) for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


class TinyBM25:
    """BM25 over a handful of short documents (the children's labels)."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.tfs = [Counter(terms(d)) for d in docs]
        self.lengths = [sum(tf.values()) for tf in self.tfs]
        self.avg = (sum(self.lengths) / len(docs)) or 1.0
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b = k1, b

    def best(self, query: str) -> int | None:
        """The document scoring highest for the query's distinct terms (None: a tie or none)."""
        words = set(terms(query)) & self.idf.keys()
        scores = []
        for tf, length in zip(self.tfs, self.lengths, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / self.avg)
            scores.append(sum(self.idf[w] * tf[w] * (self.k1 + 1) / (tf[w] + norm)
                              for w in words if w in tf))
        top = max(scores, default=0.0)
        if top <= 0 or scores.count(top) > 1:
            return None
        return scores.index(top)


def leaves_under(view: TreeView, node: int) -> list[int]:
    """Chunk ids below a node of the view."""
    out, stack = [], [node]
    while stack:
        current = stack.pop()
        if current < 0:
            out.append(-current)
        else:
            stack.extend(view.nodes[current].children)
    return out


def shown(view: TreeView, node: int, method: str, whole: bool) -> str:
    """What routing reads of a node: its display label, or its abstract (`whole`)."""
    info = view.nodes[node]
    if whole:
        return info.abstract
    if method == "contrast" and info.label:
        return info.label
    return ", ".join(info.abstract.split(", ")[:LABEL_MAX])


def route(kb: KnowledgeBase, node: int, method: str, whole: bool,
          texts: dict[int, str]) -> tuple[int, int, int]:
    """(chunks routed right, chunks, largest child's chunks) for one node's children."""
    view = kb.tree_index.view
    kids = [k for k in view.nodes[node].children if k > 0]
    if len(kids) < 2:
        return 0, 0, 0
    bm25 = TinyBM25([shown(view, k, method, whole) for k in kids])
    right = total = largest = 0
    for number, kid in enumerate(kids):
        ids = leaves_under(view, kid)
        largest = max(largest, len(ids))
        for chunk_id in ids:
            total += 1
            right += bm25.best(texts[chunk_id]) == number
    return right, total, largest


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
                stores.store.write_tree(live)

    stores.writer.call(dirty_all)
    started = time.perf_counter()
    kb.regenerate_abstracts(offline=True)
    return time.perf_counter() - started


def measure(kb: KnowledgeBase, method: str) -> dict[str, Any]:
    """Routing accuracy at the root and one layer down, by label and by whole abstract."""
    view = kb.tree_index.view
    root = view.root
    texts = {cid: text for cid, (text, _) in kb.store.texts(leaves_under(view, root)).items()}
    out: dict[str, Any] = {}
    for whole in (False, True):
        name = "list" if whole else "label"
        right, total, largest = route(kb, root, method, whole, texts)
        out[f"root_{name}"] = round(right / max(total, 1), 4)
        out["root_majority"] = round(largest / max(total, 1), 4)
        sums = [0, 0, 0]
        for kid in view.nodes[root].children:
            if kid > 0 and view.nodes[kid].layer > 1:
                for i, value in enumerate(route(kb, kid, method, whole, texts)):
                    sums[i] += value
        out[f"down_{name}"] = round(sums[0] / max(sums[1], 1), 4)
        out["down_majority"] = round(sums[2] / max(sums[1], 1), 4)
        out["down_chunks"] = sums[1]
    out["root"] = shown(view, root, method, False)
    out["children"] = [shown(view, k, method, False) for k in view.nodes[root].children if k > 0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="folders of documents")
    parser.add_argument("--devset", nargs="*", type=Path, default=[],
                        help="dev set folders with corpus.jsonl (written as Markdown files)")
    parser.add_argument("--work", type=Path, required=True, help="files and data directories")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    args = parser.parse_args()
    folders = [f.resolve() for f in args.folders]
    for devset in args.devset:
        out = args.work / "files"
        if not (out / devset.name).is_dir():
            write_articles(devset.name, read_jsonl(devset / "corpus.jsonl"), out)
        folders.append((out / devset.name).resolve())
    print(json.dumps({"machine": f"{platform.machine()}, {platform.processor() or '?'}, "
                      f"python {platform.python_version()}"}), flush=True)
    table = []
    for folder in folders:
        config = Config().with_data_dir(args.work / f"data-{folder.name}")
        with KnowledgeBase(config) as kb:
            kb.ingest([folder])
            for method in args.methods:
                seconds = relabel(kb, method)
                row = {"folder": folder.name, "method": method,
                       "chunks": kb.store.chunk_count(), "label_s": round(seconds, 2)}
                row |= measure(kb, method)
                print(json.dumps(row), flush=True)
                table.append(row)
    print(f"\n{'folder':<16} {'method':<9} {'root label':>10} {'root list':>9} "
          f"{'root maj':>8} {'down label':>10} {'down list':>9} {'down maj':>8}")
    for row in table:
        print(f"{row['folder']:<16} {row['method']:<9} {row['root_label']:>10.3f} "
              f"{row['root_list']:>9.3f} {row['root_majority']:>8.3f} {row['down_label']:>10.3f} "
              f"{row['down_list']:>9.3f} {row['down_majority']:>8.3f}")


if __name__ == "__main__":
    main()

"""What the offline abstracts and labels cost, earlier picker against sibling labels.

    .venv/bin/python benchmarks/label_cost.py --n 10000 100000 \
        --data /work/shared/data/*/corpus.jsonl --work /tmp/label-cost

The folders are those of benchmarks/ingest_abstracts.py (the scale benchmark's notes: files of
50 chunks, a heading over recombined corpus sentences). The embedder is a bag-of-words hash
(64 dimensions), since neither method embeds anything and only the tree's shape (node count,
children per node) and the passages' text matter: the first run writes every node's abstract
(and label) with each method in turn; then 10 new files are ingested and the same dirty nodes
are written again with each method. Prints one JSON line per N, method and run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from scale import Generator, Layout, load_sentences, token_counter, write_docs

from psirag_kb.config import Config, load_config
from psirag_kb.ingest.embedding import normalise
from psirag_kb.kb import KnowledgeBase
from psirag_kb.tree import rows as tree_rows

METHODS = ("keywords", "contrast")


class HashEmbedder:
    """Bag-of-words vectors from word hashes: fast and deterministic."""

    name = "hash-bow"
    dim = 64

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest()[:8], 16) % self.dim] += 1
            out[row, row % self.dim] += 1e-3
        return normalise(out)

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def rewrite(kb: KnowledgeBase, method: str, nodes: set[int]) -> dict[str, float | int]:
    """Mark `nodes` dirty, write them with one method; seconds, nodes and label rows written."""
    kb.config = kb.config.replace("tree", offline_labels=method)
    kb.abstract_job.config = kb.config
    stores = kb.stores

    def mark() -> None:
        with stores.tree_edit():
            live = stores.tree_index.live
            live.dirty.update(nodes)
            live.touched.update(nodes)
            with stores.store.transaction():
                tree_rows.write_tree(stores.store, live)

    stores.writer.call(mark)
    before = dict(stores.tree_index.live.labels)
    started = time.perf_counter()
    report = kb.regenerate_abstracts(offline=True)
    seconds = time.perf_counter() - started
    after = stores.tree_index.live.labels
    changed = sum(1 for n, label in after.items() if before.get(n) != label)
    return {"seconds": round(seconds, 2), "nodes": report["regenerated"], "labels": changed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000])
    parser.add_argument("--data", type=Path, nargs="+", required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/label-cost"))
    args = parser.parse_args()
    count, _, note = token_counter(load_config(None))
    if note:
        print(note, file=sys.stderr)
    generator = Generator(load_sentences(args.data), count, 100, 0)
    for n in args.n:
        folder = args.work / f"n{n}"
        shutil.rmtree(folder, ignore_errors=True)
        layout = Layout(n, 50, 20)
        write_docs(generator, layout, folder / "docs")
        config = Config().with_data_dir(folder / "data")
        with KnowledgeBase(config, embedder=HashEmbedder()) as kb:
            started = time.perf_counter()
            kb.ingest([folder / "docs"])
            chunks = kb.stores.store.chunk_count()
            print(f"N={n}: {chunks} chunks ingested in {time.perf_counter() - started:.0f} s",
                  file=sys.stderr, flush=True)
            every = set(kb.stores.tree_index.live.children)
            for method in METHODS:
                row = {"n": n, "chunks": chunks, "method": method, "run": "all"}
                print(json.dumps(row | rewrite(kb, method, every)), flush=True)
            extra = Layout(n + 500, 50, 20)
            write_docs(generator, extra, folder / "docs", only=range(layout.files, extra.files))
            kb.ingest([folder / "docs"])
            dirty = set(kb.stores.tree_index.live.dirty)
            for method in METHODS:
                row = {"n": n, "chunks": kb.stores.store.chunk_count(), "method": method,
                       "run": "10 files added", "dirty": len(dirty)}
                print(json.dumps(row | rewrite(kb, method, dirty)), flush=True)


if __name__ == "__main__":
    main()

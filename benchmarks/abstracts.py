"""Time offline keyword abstracts layer by layer over a real corpus's abstract tree.

    python benchmarks/abstracts.py /work/shared/data/musique_train100/corpus.jsonl
    python benchmarks/abstracts.py a/corpus.jsonl b/corpus.jsonl --child-vectors --show 3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from psirag_kb.abstracts.writers import KeywordAbstractor
from psirag_kb.config import EmbeddingConfig
from psirag_kb.ingest.embedding import CachedEmbedder, SentenceTransformerEmbedder
from psirag_kb.tree import build_tree


def leaf_texts(paths: list[Path]) -> list[str]:
    """Passages as the knowledge base stores them: title, newline, text."""
    texts = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                item = json.loads(line)
                title, text = str(item.get("title", "")).strip(), str(item["text"]).strip()
                texts.append(f"{title}\n{text}" if title else text)
    return texts


def main() -> None:
    """Parse arguments, embed, build the tree, abstract bottom-up and print the timings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="+", type=Path, help="JSONL files of {id, title, text}")
    parser.add_argument("--cache", type=Path, default=Path("~/.cache/psirag-kb"))
    parser.add_argument("--sample", type=int, default=300,
                        help="leaves embedded without the cache to measure the embedding rate")
    parser.add_argument("--child-vectors", action="store_true",
                        help="pass the children's vectors (leaves, then embedded abstracts)")
    parser.add_argument("--max-children", type=int, default=40)
    parser.add_argument("--show", type=int, default=0, help="print this many abstracts per layer")
    args = parser.parse_args()

    texts = leaf_texts(args.corpus)
    inner = SentenceTransformerEmbedder(EmbeddingConfig())
    embedder = CachedEmbedder(inner, args.cache)
    inner.embed(["warm up"])
    start = time.perf_counter()
    leaves = embedder.embed(texts)
    leaf_s = time.perf_counter() - start
    sample = texts[: args.sample]
    start = time.perf_counter()
    inner.embed(sample)
    rate = len(sample) / (time.perf_counter() - start)
    print(f"leaves {len(texts)}: embed (cached) {leaf_s:.1f} s; fresh rate {rate:.1f} passages/s "
          f"-> full leaf embedding ~ {len(texts) / rate:.1f} s")

    start = time.perf_counter()
    tree = build_tree(leaves, mode="exact", max_children=args.max_children)
    print(f"tree: {time.perf_counter() - start:.1f} s, nodes per layer {tree.nodes_per_layer()}")

    abstractor = KeywordAbstractor(inner)  # phrases stay out of the passage cache
    text_of: dict[int, str] = dict(enumerate(texts))
    vector_of: dict[int, np.ndarray] = dict(enumerate(leaves))
    total = embed_total = 0.0
    for layer in range(1, tree.depth + 1):
        nodes = tree.nodes_at_layer(layer).tolist()
        groups = [[text_of[c] for c in tree.children[n]] for n in nodes]
        vectors = ([np.stack([vector_of[c] for c in tree.children[n]]) for n in nodes]
                   if args.child_vectors else None)
        cached_before = len(abstractor._vectors)
        start = time.perf_counter()
        abstracts = abstractor.abstract_many(groups, vectors)
        spent = time.perf_counter() - start
        total += spent
        sizes = [len(g) for g in groups]
        print(f"layer {layer}: {len(nodes)} groups ({min(sizes)}-{max(sizes)} children, "
              f"{sum(sizes)} texts), {spent:.1f} s, "
              f"{len(abstractor._vectors) - cached_before} new phrases embedded")
        text_of.update(zip(nodes, abstracts, strict=True))
        if args.child_vectors:
            start = time.perf_counter()
            vector_of.update(zip(nodes, embedder.embed(abstracts), strict=True))
            embed_total += time.perf_counter() - start
        for abstract in abstracts[: args.show]:
            print(f"    {abstract}")
    print(f"abstracts total {total:.1f} s vs full leaf embedding ~ {len(texts) / rate:.1f} s "
          f"(ratio {total * rate / len(texts):.2f})")
    if args.child_vectors:
        print(f"embedding the abstracts (needed for node vectors anyway): {embed_total:.1f} s")


if __name__ == "__main__":
    main()

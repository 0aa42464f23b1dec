"""Tree search variants on one KB: beam search at several widths, and leaf + parent scoring.

    psirag-kb --data-dir /tmp/devkb eval --corpus ... --questions Q.jsonl   # builds the KB once
    python benchmarks/tree_search_study.py --data-dir /tmp/devkb --questions Q.jsonl

Prints recall@5 of each variant alone and fused (RRF k=60) with BM25 and the flat dense list.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.evaluation import load_questions, recall_at
from psirag_kb.ingest.embedding import CachedEmbedder, make_embedder
from psirag_kb.kb import KnowledgeBase
from psirag_kb.search.retrieval import rrf
from psirag_kb.storage.records import Ranking


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True, help="a KB built by eval")
    parser.add_argument("--questions", type=Path, required=True)
    args = parser.parse_args()
    config = Config().with_data_dir(args.data_dir)
    embedder = CachedEmbedder(make_embedder(config.embedding), config.storage.cache_dir)
    questions = load_questions(args.questions)
    report: dict[str, dict[str, float]] = {}
    with KnowledgeBase(config, embedder=embedder) as kb:
        vectors = embedder.embed([q["question"] for q in questions])
        sparse = [Ranking(*kb.stores.sparse.search(q["question"], 10)) for q in questions]
        dense = [Ranking(*kb.stores.dense.search(v, 10)) for v in vectors]
        index = kb.stores.tree_index
        variants = {f"beam {b}": (lambda v, b=b: index.search(v, b, 10)) for b in (10, 20, 50, 100)}
        for weight in (0.0, 0.1, 0.2, 0.3, 0.5):
            variants[f"leaf + {weight} parent"] = (
                lambda v, w=weight: index.search_collapsed(v, w, 10)
            )

        def score(rankings: list[Ranking]) -> float:
            total = sum(recall_at(kb.sources(r.ids), q["gold"], 5)
                        for r, q in zip(rankings, questions, strict=True))
            return round(total / len(questions), 4)

        report["dense"] = {"alone": score(dense)}
        report["flat_hybrid"] = {"alone": score([rrf([s, d]) for s, d in zip(sparse, dense,
                                                                            strict=True)])}
        for name, search in variants.items():
            found = [search(v) for v in vectors]
            report[name] = {
                "alone": score(found),
                "with BM25 + dense": score([rrf([t, s, d]) for t, s, d in
                                            zip(found, sparse, dense, strict=True)]),
            }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

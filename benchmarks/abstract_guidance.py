"""Abstract-embedding guidance versus centroid vectors, and offline abstraction time.

    .venv/bin/python benchmarks/abstract_guidance.py --questions Q.jsonl C1.jsonl C2.jsonl ...

Builds one KB from the corpora (embeddings cached), times keyword abstract generation for the
whole tree, then scores the same questions with node_vectors = centroid and = abstract.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.evaluation import load_questions, recall_at
from psirag_kb.ingest.embedding import CachedEmbedder, make_embedder
from psirag_kb.kb import KnowledgeBase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("corpora", type=Path, nargs="+")
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--modes", default="tree,hybrid")
    args = parser.parse_args()
    config = Config()
    embedder = CachedEmbedder(make_embedder(config.embedding), config.storage.cache_dir)
    questions = load_questions(args.questions)
    report: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase(config.with_data_dir(Path(tmp) / "kb"), embedder=embedder)
        report["timings"] = kb.ingest_corpora(args.corpora)
        started = time.perf_counter()
        report["abstracts"] = kb.regenerate_abstracts()
        report["timings"]["abstract_s"] = round(time.perf_counter() - started, 2)
        live = kb.stores.tree_index.live
        report["example_root_abstract"] = live.abstracts.get(live.root, "")
        for guide in ("centroid", "abstract"):
            kb.config = dataclasses.replace(
                kb.config, tree=dataclasses.replace(kb.config.tree, node_vectors=guide)
            )
            for mode in args.modes.split(","):
                r2 = r5 = 0.0
                for item in questions:
                    found = kb.sources(kb.rank(item["question"], mode, 5).ids)
                    r2 += recall_at(found, item["gold"], 2)
                    r5 += recall_at(found, item["gold"], 5)
                report[f"{mode}/{guide}"] = {"recall@2": round(r2 / len(questions), 4),
                                             "recall@5": round(r5 / len(questions), 4)}
        kb.close()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""hnswlib against exact cosine search on a benchmark corpus: recall@5 and identical top-5 lists.

    python benchmarks/ann_exact.py --corpus $D/musique_train100/corpus.jsonl \
        --corpus $D/hotpotqa_train100/corpus.jsonl --corpus $D/2wiki_corpus/corpus.jsonl \
        --questions $D/musique_train100/questions.jsonl --ef 200 400 1000

Builds a knowledge base of the corpora in a temporary folder (embeddings from the evaluation
cache when present), then for each `ef` compares the dense index's top 5 of every question with
the exact top 5 over the same vectors. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from psirag_kb.config import Config
from psirag_kb.evaluation import load_questions, recall_at
from psirag_kb.ingest.embedding import CachedEmbedder, make_embedder
from psirag_kb.kb import KnowledgeBase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, action="append", required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--ef", type=int, nargs="+", default=[200, 400])
    args = parser.parse_args()
    questions = load_questions(args.questions)
    config = Config().with_data_dir(Path(tempfile.mkdtemp(prefix="psirag-ann-")) / "kb")
    embedder = CachedEmbedder(make_embedder(config.embedding, config.storage.cache_dir),
                              config.storage.cache_dir)
    report: dict = {"questions": len(questions), "ef": {}}
    with KnowledgeBase(config, embedder=embedder) as kb:
        kb.ingest_corpora(args.corpus)
        ids, vectors = kb.stores.store.all_vectors()
        hits = kb.stores.store.hits(ids.tolist())
        sources = np.array([hits[i].source for i in ids.tolist()])
        queries = np.stack([kb.embed_query(q["question"]) for q in questions])
        exact = [sources[np.argsort(-(vectors @ q), kind="stable")[:5]].tolist()
                 for q in queries]
        report["passages"] = len(ids)
        report["exact_recall@5"] = round(float(np.mean(
            [recall_at(e, q["gold"], 5) for e, q in zip(exact, questions, strict=True)])), 4)
        for ef in args.ef:
            kb.stores.dense.index.set_ef(ef)
            recall, same = [], 0
            for query, item, top in zip(queries, questions, exact, strict=True):
                found = [hits[i].source for i in kb.stores.dense.search(query, 5)[0].tolist()]
                same += found == top
                recall.append(recall_at(found, item["gold"], 5))
            report["ef"][ef] = {"recall@5": round(float(np.mean(recall)), 4),
                                "identical_top5": same}
    print(json.dumps(report))


if __name__ == "__main__":
    main()

"""Recall@2/@5 of one-round hybrid against multi-round retrieval without an LLM, on a built KB.

Build the KB once (embeddings are cached in ~/.cache/psirag-kb), then run:

    D=/work/shared/data
    psirag-kb --data-dir /tmp/agentkb eval --corpus $D/musique_train100/corpus.jsonl \
        --corpus $D/hotpotqa_train100/corpus.jsonl --corpus $D/2wiki_corpus/corpus.jsonl \
        --questions $D/musique_train100/questions.jsonl --modes hybrid
    python benchmarks/agent_recall.py --data-dir /tmp/agentkb \
        --questions $D/musique_train100/questions.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.evaluation import load_questions, recall_at
from psirag_kb.ingest.embedding import CachedEmbedder, make_embedder
from psirag_kb.kb import KnowledgeBase
from psirag_kb.search.multiround import FANOUT, multi_round, predict_hops


def main() -> None:
    """Score every question with hybrid and with multi-round retrieval; print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a built KB")
    parser.add_argument("--questions", type=Path, required=True, help="questions JSONL")
    parser.add_argument("--rounds", type=int, help="fixed rounds (default: hop discriminator)")
    parser.add_argument("--fanout", type=int, default=FANOUT, help="seeds per round")
    parser.add_argument("-k", type=int, default=5, help="passages scored")
    parser.add_argument("--query-cache", type=Path,
                        help="keep query embeddings here between runs (default: none)")
    args = parser.parse_args()

    questions = load_questions(args.questions)
    rows: dict[str, dict[str, float]] = {}
    config = Config().with_data_dir(args.data_dir.resolve())
    embedder = make_embedder(config.embedding)
    if args.query_cache:
        embedder = CachedEmbedder(embedder, args.query_cache)
    with KnowledgeBase(config, embedder=embedder) as kb:
        hops = [predict_hops(kb.engine, q["question"]) for q in questions]
        rankers = {
            "hybrid": lambda q, _h: kb.rank(q, "hybrid", args.k),
            "multi_round": lambda q, h: multi_round(
                kb.engine, q, args.k, args.rounds or h, fanout=args.fanout).ranking,
        }
        for name, rank in rankers.items():
            r2 = r5 = 0.0
            started = time.perf_counter()
            for item, h in zip(questions, hops, strict=True):
                found = kb.sources(rank(item["question"], h).ids)
                r2 += recall_at(found, item["gold"], 2)
                r5 += recall_at(found, item["gold"], 5)
            n = max(len(questions), 1)
            rows[name] = {"recall@2": round(r2 / n, 4), "recall@5": round(r5 / n, 4),
                          "ms_per_query": round(1000 * (time.perf_counter() - started) / n, 1)}
        passages = kb.stores.store.chunk_count()
    print(json.dumps({
        "questions": len(questions), "passages": passages, "k": args.k,
        "rounds": args.rounds or "predicted", "fanout": args.fanout,
        "predicted_hops": {str(h): hops.count(h) for h in sorted(set(hops))},
        "modes": rows,
    }, indent=2))


if __name__ == "__main__":
    main()

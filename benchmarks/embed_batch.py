"""Embedding throughput of the configured model at several batch sizes.

    python benchmarks/embed_batch.py $D/2wiki_corpus/corpus.jsonl --passages 256
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from psirag_kb.config import EmbeddingConfig
from psirag_kb.ingest.embedding import SentenceTransformerEmbedder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("corpus", type=Path, help='JSONL of {"title","text"}')
    parser.add_argument("--passages", type=int, default=256)
    parser.add_argument("--sizes", default="16,32,64,128")
    args = parser.parse_args()
    texts = []
    for line in args.corpus.read_text().splitlines()[: args.passages]:
        item = json.loads(line)
        texts.append(f"{item['title']}\n{item['text']}")
    report = {}
    for size in (int(s) for s in args.sizes.split(",")):
        embedder = SentenceTransformerEmbedder(EmbeddingConfig(batch_size=size))
        embedder.embed(texts[:32])  # warm-up
        started = time.perf_counter()
        embedder.embed(texts)
        report[size] = round(len(texts) / (time.perf_counter() - started), 1)
    print(json.dumps({"passages": len(texts), "passages_per_s_by_batch": report}))


if __name__ == "__main__":
    main()

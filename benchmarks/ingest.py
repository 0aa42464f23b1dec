"""Embedding throughput and ingest time for a JSONL corpus (run by hand, into docs/benchmarks/).

    .venv/bin/python benchmarks/ingest.py ../shared/data/2wiki_corpus/corpus.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("corpus", type=Path, help='JSONL of {"id","title","text"}')
    parser.add_argument("--sample", type=int, default=512, help="passages for the throughput run")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        config = Config().with_data_dir(Path(tmp) / "data")
        started = time.perf_counter()
        kb = KnowledgeBase(config)
        dim = kb.embedder.dim
        load_s = time.perf_counter() - started

        lines = args.corpus.read_text().splitlines()
        texts = []
        for line in lines[: args.sample]:
            item = json.loads(line)
            texts.append(f"{item['title']}\n{item['text']}")
        kb.embedder.embed(texts[:64])  # warm-up
        started = time.perf_counter()
        kb.embedder.embed(texts)
        embed_s = time.perf_counter() - started
        tokens = [kb.embedder.count_tokens(t) for t in texts]

        started = time.perf_counter()
        report = kb.ingest_jsonl(args.corpus)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        again = kb.ingest_jsonl(args.corpus)
        reingest_s = time.perf_counter() - started
        status = kb.status()
        kb.close()
    print(json.dumps({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "model": config.embedding.model, "dim": dim, "model_load_s": round(load_s, 2),
        "throughput_sample": len(texts),
        "mean_tokens_per_passage": round(sum(tokens) / len(tokens), 1),
        "passages_per_s": round(len(texts) / embed_s, 1),
        "corpus_passages": len(lines), "ingest_s": round(ingest_s, 1),
        "ingest_passages_per_s": round(len(lines) / ingest_s, 1),
        "reingest_unchanged_s": round(reingest_s, 3), "unchanged": again.unchanged,
        "chunks": status["chunks"], "stores": status["stores"],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "embedded": report.chunks_embedded,
    }, indent=2))


if __name__ == "__main__":
    main()

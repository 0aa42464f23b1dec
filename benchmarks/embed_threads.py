"""Two threads embedding at once: passages for a file batch beside questions, torch threads each.

    python benchmarks/embed_threads.py --corpus $D/2wiki_corpus/corpus.jsonl --seconds 15

One thread embeds passages 32 per call, another embeds titles as questions 8 per call, for the
given seconds, each with its own model instance (as in the daemon). Runs the pair three times:
both threads with torch's default thread count, the question thread on one torch thread, and the
passage thread on one torch thread; prints passages/s and questions/s for each.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

from psirag_kb.config import EmbeddingConfig
from psirag_kb.ingest.embedding import SentenceTransformerEmbedder


def run(setting: str, rows: list[str], titles: list[str], seconds: float) -> dict[str, float]:
    passages = SentenceTransformerEmbedder(EmbeddingConfig(),
                                           threads=1 if setting == "passages on 1" else None)
    questions = SentenceTransformerEmbedder(EmbeddingConfig(),
                                            threads=1 if setting == "questions on 1" else None)
    passages.embed(rows[:4])
    questions.embed(titles[:4])
    counts = {"passages_per_s": 0, "questions_per_s": 0}
    stop = time.perf_counter() + seconds

    def loop(model: SentenceTransformerEmbedder, texts: list[str], per: int, key: str) -> None:
        start = 0
        while time.perf_counter() < stop:
            model.embed(texts[start:start + per])
            counts[key] += per
            start = (start + per) % (len(texts) - per)

    threads = [threading.Thread(target=loop, args=(passages, rows, 32, "passages_per_s")),
               threading.Thread(target=loop, args=(questions, titles, 8, "questions_per_s"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {key: round(value / seconds, 1) for key, value in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    records = [json.loads(line) for line in args.corpus.read_text().splitlines()[:400] if line]
    rows, titles = [r["text"] for r in records], [r["title"] for r in records]
    print(json.dumps({setting: run(setting, rows, titles, args.seconds)
                      for setting in ("default", "questions on 1", "passages on 1")}, indent=2))


if __name__ == "__main__":
    main()

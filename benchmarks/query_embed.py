"""Query embedding under concurrency: single questions from T threads, with or without a lock.

    python benchmarks/query_embed.py --threads 1 20 --seconds 10 \
        --questions /work/shared/data/musique_train100/questions.jsonl

Embeds one question per call with the bundled MiniLM, from each thread back to back, and
reports calls per second and the median latency; `--lock` serialises the model calls. Prints
one JSON line per setting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.ingest.embedding import make_embedder


def run(embedder: object, questions: list[str], threads: int, seconds: float,
        lock: threading.Lock | None) -> dict[str, object]:
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    def work(offset: int) -> None:
        n = offset
        while time.perf_counter() < stop:
            started = time.perf_counter()
            if lock is None:
                embedder.embed([questions[n % len(questions)]])
            else:
                with lock:
                    embedder.embed([questions[n % len(questions)]])
            latencies.append(time.perf_counter() - started)
            n += threads

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return {"threads": threads, "lock": lock is not None, "calls": len(latencies),
            "calls_per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(statistics.median(latencies) * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 20])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    lines = args.questions.read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["question"] for line in lines if line]
    embedder = make_embedder(Config().embedding)
    embedder.embed(["warm up"])
    for use_lock in (False, True):
        for threads in args.threads:
            lock = threading.Lock() if use_lock else None
            print(json.dumps(run(embedder, questions, threads, args.seconds, lock)))


if __name__ == "__main__":
    main()

"""Hybrid query p50 without the embedding, in rounds, for knowledge bases made by scale.py.

    .venv/bin/python benchmarks/warm_queries.py --work /tmp/psirag-scale1m-b --n 10000 1000000 \
        --questions $D/musique_train100/questions.jsonl

Each knowledge base is opened in this process, its question vectors are looked up instead of
embedded, and all questions are queried (hybrid, k=5) three times: the first round after opening
pays for reading the indexes from disk, the later ones show the steady state.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from psirag_kb.config import load_config
from psirag_kb.kb import KnowledgeBase


def main() -> None:
    """Print the p50 of each round per size and the ratio of their medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="scale.py's --work folder")
    parser.add_argument("--n", type=int, nargs="+", required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    questions = [json.loads(line)["question"] for line in args.questions.open()]
    out: dict[int, list[float]] = {}
    for n in args.n:
        with KnowledgeBase(load_config(args.work / f"n{n}" / "config.toml")) as kb:
            vectors = dict(zip(questions, kb.embedder.embed(questions), strict=True))
            kb.engine.embed_query = lambda text, v=vectors: v[text]  # type: ignore[method-assign]
            out[n] = []
            for _ in range(args.rounds):
                times = []
                for question in questions:
                    started = time.perf_counter()
                    kb.query(question, mode="hybrid", k=5)
                    times.append((time.perf_counter() - started) * 1000)
                out[n].append(round(float(np.median(times)), 2))
    print(json.dumps({"p50_ms_by_round": out}))
    first, last = args.n[0], args.n[-1]
    print(f"ratio {last} / {first}: first round {out[last][0] / out[first][0]:.2f}, "
          f"median of rounds {np.median(out[last]) / np.median(out[first]):.2f}")


if __name__ == "__main__":
    main()

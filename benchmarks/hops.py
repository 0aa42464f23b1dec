"""Time hop predictions (numpy only, embedding excluded) and report metrics on labelled questions.

    python benchmarks/hops.py --data holdout.jsonl
    python benchmarks/hops.py --data holdout.jsonl --weights other.npz --repeat 2000
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from psirag_kb.config import EmbeddingConfig
from psirag_kb.ingest.embedding import SentenceTransformerEmbedder
from psirag_kb.search.hops import HopDiscriminator, load_labelled, question_features


def per_call_us(call, repeat: int) -> float:
    """Median of five runs of `repeat` calls, in microseconds per call."""
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            call()
        runs.append((time.perf_counter() - start) / repeat * 1e6)
    return float(np.median(runs))


def main() -> None:
    """Embed the questions once, then time predictions and print figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="JSONL with question and hops")
    parser.add_argument("--weights", help=".npz weights (default: the shipped ones)")
    parser.add_argument("--repeat", type=int, default=1000, help="calls per timing run")
    args = parser.parse_args()

    model = HopDiscriminator.load(args.weights)
    labelled = load_labelled(args.data)
    questions = [q for q, _ in labelled]
    vectors = SentenceTransformerEmbedder(EmbeddingConfig()).embed(questions)
    one_q, one_v = questions[0], vectors[0]
    batch = min(len(questions), 256)
    result = {
        "predict_us": round(per_call_us(lambda: model.predict(one_q, one_v), args.repeat), 1),
        "features_us": round(per_call_us(lambda: question_features([one_q]), args.repeat), 1),
        "predict_many_us_per_question": round(
            per_call_us(lambda: model.predict_many(questions[:batch], vectors[:batch]), 20)
            / batch, 2,
        ),
        "metrics": model.evaluate(labelled, vectors),
        "weights": args.weights or "shipped",
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

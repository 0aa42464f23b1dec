"""Dense index query latency at 100k vectors and at a small index, and the cost of a rebuild.

Run: PYTHONPATH=. python benchmarks/dense_churn.py [n]  (n defaults to 100,000).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from psirag_kb.storage.dense import DenseIndex


def clustered(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors around 200 centres, as chunks of many documents are."""
    centres = rng.normal(size=(200, dim)).astype(np.float32)
    out = centres[rng.integers(200, size=n)] + 0.6 * rng.normal(size=(n, dim)).astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def build(index: DenseIndex, ids: np.ndarray, vectors: np.ndarray) -> None:
    """Rebuild without saving (older code always saved)."""
    try:
        index.rebuild(1, ids, vectors, save=False)
    except TypeError:
        index.rebuild(1, ids, vectors)


def latency(index: DenseIndex, queries: np.ndarray, k: int) -> float:
    """Median ms of single-query searches."""
    times = []
    for query in queries:
        start = time.perf_counter()
        index.search(query, k)
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    dim, rng = 384, np.random.default_rng(0)
    vectors = clustered(n, dim, rng)
    queries = clustered(300, dim, rng)
    with tempfile.TemporaryDirectory() as folder:
        index = DenseIndex(Path(folder) / "big", dim)
        start = time.perf_counter()
        build(index, np.arange(n), vectors)
        print(f"rebuild of {n:,} vectors: {time.perf_counter() - start:.1f} s")
        for k in (10, 100):
            print(f"{n:,} live, k={k}: median {latency(index, queries, k):.3f} ms")
        small = DenseIndex(Path(folder) / "small", dim)
        build(small, np.arange(200), vectors[:200])
        small.search(queries[0], 10)  # the copy for exact search is taken once per change
        print(f"200 live, k=10: median {latency(small, queries, 10):.3f} ms")


if __name__ == "__main__":
    main()

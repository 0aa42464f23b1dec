"""Time the abstract tree build (pairs, merge, rebalance) on synthetic or saved vectors.

    python benchmarks/tree_build.py --n 12000 --dim 384 --mode exact
    python benchmarks/tree_build.py --n 100000 --mode hnsw
    python benchmarks/tree_build.py --vectors leaves.npy --mode bucketing
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np

from psirag_kb.tree import build_tree, dasgupta_cost


def clustered(n: int, dim: int, clusters: int, seed: int) -> np.ndarray:
    """Normalised vectors around random centres, with cluster sizes skewed like real corpora."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    weights = rng.pareto(1.5, clusters) + 1.0
    labels = rng.choice(clusters, size=n, p=weights / weights.sum())
    x = centres[labels] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def main() -> None:
    """Parse arguments, build once and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=12000, help="number of leaves")
    parser.add_argument("--dim", type=int, default=384, help="vector dimension")
    parser.add_argument("--mode", choices=("exact", "hnsw", "bucketing"), default="exact")
    parser.add_argument("--clusters", type=int, default=50, help="synthetic clusters")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-children", type=int, default=40)
    parser.add_argument("--knn", type=int, default=32)
    parser.add_argument("--buckets", type=int, default=None)
    parser.add_argument("--vectors", help=".npy file of L2-normalised float32 vectors")
    parser.add_argument("--cost", action="store_true", help="also print Dasgupta's cost")
    args = parser.parse_args()

    if args.vectors:
        x = np.load(args.vectors).astype(np.float32)
    else:
        x = clustered(args.n, args.dim, args.clusters, args.seed)
    baseline = peak_rss_mb()
    timings: dict[str, float] = {}
    start = time.perf_counter()
    tree = build_tree(
        x, mode=args.mode, max_children=args.max_children, knn=args.knn,
        buckets=args.buckets, seed=args.seed, timings=timings,
    )
    total = time.perf_counter() - start
    print(f"mode={args.mode} n={x.shape[0]} dim={x.shape[1]} max_children={args.max_children}")
    print(f"pairs     {timings['pairs']:8.2f} s")
    print(f"merge     {timings['merge']:8.2f} s")
    print(f"rebalance {timings['rebalance']:8.2f} s")
    print(f"total     {total:8.2f} s")
    print(f"peak RSS  {peak_rss_mb():8.0f} MB (inputs ready at {baseline:.0f} MB)")
    print(f"depth     {tree.depth}")
    print(f"per layer {tree.nodes_per_layer()}")
    problems = tree.problems(args.max_children)
    print(f"valid     {not problems}" + (f" ({problems[:3]})" if problems else ""))
    if args.cost:
        print(f"dasgupta  {dasgupta_cost(tree, x):.6g}")


if __name__ == "__main__":
    main()

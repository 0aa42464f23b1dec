"""Algorithm 1: iterative merging and collapse over ranked pairs, then rebalancing."""

from __future__ import annotations

import math
import time

import numpy as np

from psirag_kb.tree.model import Tree, leaves_under
from psirag_kb.tree.pairs import exact_mst, knn_pairs, spanning_forest
from psirag_kb.tree.rebalance import rebalance
from psirag_kb.tree.vectors import normalise, segment_sum

MODES = ("auto", "exact", "hnsw", "bucketing")
EXACT_MAX_LEAVES = 20_000
AUTO_BUCKET_LEAVES = 2_048
"""Leaves per bucket when auto mode buckets: each bucket is ranked exactly (16 MB at 2k)."""
"""Largest build that auto mode ranks exactly: its n x n float32 matrix is 1.6 GB here."""
_MAX_EXACT_LINKS = 8192


class Forest:
    """The growing forest of Algorithm 1, with a union-find over leaves for the current roots."""

    def __init__(self, n_leaves: int) -> None:
        self.n_leaves = n_leaves
        self.parent: list[int] = [-1] * n_leaves
        self.layer: list[int] = [0] * n_leaves
        self.children: list[list[int]] = [[] for _ in range(n_leaves)]
        self._uf: list[int] = list(range(n_leaves))
        self._size: list[int] = [1] * n_leaves
        self._top: list[int] = list(range(n_leaves))

    def find(self, leaf: int) -> int:
        """Union-find representative of a leaf's component (path halving)."""
        uf = self._uf
        while uf[leaf] != leaf:
            uf[leaf] = uf[uf[leaf]]
            leaf = uf[leaf]
        return leaf

    def root_of(self, leaf: int) -> int:
        """Current root node of the component holding a leaf."""
        return self._top[self.find(leaf)]

    def ancestor(self, node: int, layer: int) -> int:
        """The ancestor of a node (or the node itself) on the given layer."""
        parent, layers = self.parent, self.layer
        while layers[node] < layer:
            node = parent[node]
        return node

    def link(self, u: int, v: int) -> bool:
        """Apply one ranked pair of leaves; False when they already share a root."""
        ru, rv = self.find(u), self.find(v)
        if ru == rv:
            return False
        self.join(ru, rv, u, v)
        return True

    def link_all(self, us: np.ndarray, vs: np.ndarray) -> int:
        """Apply ranked leaf pairs in order; returns the number of links made."""
        made = 0
        for u, v in zip(us.tolist(), vs.tolist(), strict=True):
            made += self.link(u, v)
        return made

    def join(self, ru: int, rv: int, u: int, v: int) -> int:
        """Join two components through nodes u and v inside them; returns the attach point."""
        top_u, top_v = self._top[ru], self._top[rv]
        height_u, height_v = self.layer[top_u], self.layer[top_v]
        if height_u == height_v:
            target = self.new_node([top_u, top_v])
            top = target
        elif height_u > height_v:
            target = self.ancestor(u, height_v + 1)
            self.attach(top_v, target)
            top = top_u
        else:
            target = self.ancestor(v, height_u + 1)
            self.attach(top_u, target)
            top = top_v
        if self._size[ru] < self._size[rv]:
            ru, rv = rv, ru
        self._uf[rv] = ru
        self._size[ru] += self._size[rv]
        self._top[ru] = top
        return target

    def new_node(self, kids: list[int]) -> int:
        """A new abstract node one layer above its (equal-layer) children."""
        node = len(self.parent)
        self.parent.append(-1)
        self.layer.append(self.layer[kids[0]] + 1)
        self.children.append(list(kids))
        for kid in kids:
            self.parent[kid] = node
        return node

    def attach(self, node: int, target: int) -> None:
        """Collapse a root node into the children of target (one layer above it)."""
        self.children[target].append(node)
        self.parent[node] = target

    def leaves_under(self, node: int) -> list[int]:
        """Leaf ids below a node (the node itself for a leaf), right to left: the order the
        sums of their vectors were always taken in (float32 sums depend on it)."""
        return leaves_under(node, self.children.__getitem__, lambda n: n < self.n_leaves)[::-1]

    def labels(self) -> np.ndarray:
        """Component representative of every leaf."""
        return np.fromiter((self.find(i) for i in range(self.n_leaves)), np.int64, self.n_leaves)

    def to_tree(self) -> Tree:
        """Freeze a forest that has become one tree."""
        parent = np.asarray(self.parent, dtype=np.int64)
        roots = np.flatnonzero(parent < 0)
        if roots.size != 1:
            raise ValueError(f"the forest still has {roots.size} roots")
        return Tree(
            n_leaves=self.n_leaves,
            parent=parent,
            children=[list(kids) for kids in self.children],
            layer=np.asarray(self.layer, dtype=np.int32),
            root=int(roots[0]),
        )


def link_components(forest: Forest, x: np.ndarray) -> None:
    """Join the remaining components by the same rules, ranked by centroid similarity."""
    while True:
        labels = forest.labels()
        reps, sums = segment_sum(x, labels)
        if reps.size <= 1:
            return
        starts = [forest.root_of(int(r)) for r in reps.tolist()]
        centroids = normalise(sums)
        if reps.size <= _MAX_EXACT_LINKS:
            ci, cj, _ = exact_mst(centroids)
        else:
            ci, cj, _ = spanning_forest(*knn_pairs(centroids, 32), reps.size)
        node_sums = _NodeSums(forest, x)
        for i, j in zip(ci.tolist(), cj.tolist(), strict=True):
            ri, rj = forest.find(int(reps[i])), forest.find(int(reps[j]))
            if ri == rj:
                continue
            hi = forest.layer[forest.root_of(ri)]
            hj = forest.layer[forest.root_of(rj)]
            if hi < hj:
                i, j, ri, rj, hi, hj = j, i, rj, ri, hj, hi
            top_j = forest.root_of(rj)
            u, v = starts[i], starts[j]
            if hi > hj:
                u = _target(forest, node_sums, u, hj + 1, centroids[j])
                node = u
                while node >= 0:  # known before the join, which adds `moved` to them below
                    node_sums[node]
                    node = forest.parent[node]
            moved = _sum_of(node_sums, x, top_j)
            top_i = forest.root_of(ri)
            target = forest.join(ri, rj, u, v)
            if hi == hj:
                node_sums[target] = _sum_of(node_sums, x, top_i) + moved
            else:
                while target >= 0:
                    node_sums[target] = node_sums[target] + moved
                    target = forest.parent[target]


class _NodeSums(dict):
    """Sum of the leaf vectors under abstract nodes, computed when first asked for."""

    def __init__(self, forest: Forest, x: np.ndarray) -> None:
        super().__init__()
        self.forest, self.x = forest, x

    def __missing__(self, node: int) -> np.ndarray:
        value = self.x[self.forest.leaves_under(node)].sum(axis=0, dtype=np.float32)
        self[node] = value
        return value


def _sum_of(node_sums: dict[int, np.ndarray], x: np.ndarray, node: int) -> np.ndarray:
    """Leaf-vector sum of a node (its own vector for a leaf)."""
    if node < x.shape[0]:
        return x[node].astype(np.float32)
    return node_sums[node]


def _target(
    forest: Forest, node_sums: dict[int, np.ndarray], start: int, layer: int, toward: np.ndarray
) -> int:
    """A node on `layer` related to start: its ancestor, or its most similar descendant."""
    node = forest.ancestor(start, layer)
    while forest.layer[node] > layer:
        kids = forest.children[node]
        sums = np.stack([node_sums[k] for k in kids])
        scores = (sums @ toward) / np.maximum(np.linalg.norm(sums, axis=1), 1e-12)
        node = kids[int(np.argmax(scores))]
    return node


def spherical_kmeans(x: np.ndarray, k: int, *, iterations: int = 5, seed: int = 0) -> np.ndarray:
    """Cluster label per row from a few rounds of cosine k-means (labels 0..k'-1, k' <= k)."""
    n = x.shape[0]
    k = max(1, min(k, n))
    rng = np.random.default_rng(seed)
    centres = x[np.sort(rng.choice(n, size=k, replace=False))].astype(np.float32)
    labels = _assign(x, centres)
    for _ in range(iterations):
        ids, sums = segment_sum(x, labels)
        centres = normalise(sums)
        labels = _assign(x, centres)
    _, labels = np.unique(labels, return_inverse=True)
    return labels.astype(np.int64)


def _assign(x: np.ndarray, centres: np.ndarray, block: int = 8192) -> np.ndarray:
    """Index of the most similar centre for every row, in row blocks."""
    out = np.empty(x.shape[0], dtype=np.int64)
    for start in range(0, x.shape[0], block):
        rows = x[start : start + block].astype(np.float32, copy=False)
        out[start : start + block] = np.argmax(rows @ centres.T, axis=1)
    return out


def partition(x: np.ndarray, buckets: int, seed: int = 0) -> list[np.ndarray]:
    """Sorted leaf index arrays of roughly n/buckets rows each (k-means, split again if big)."""
    n = x.shape[0]
    target = max(1, math.ceil(n / max(1, buckets)))
    limit = 2 * target
    done: list[np.ndarray] = []
    todo = [np.arange(n, dtype=np.int64)]
    while todo:
        idx = todo.pop()
        if idx.size <= limit:
            done.append(idx)
            continue
        k = math.ceil(idx.size / target) if idx.size < n else buckets
        labels = spherical_kmeans(x if idx.size == n else x[idx], k, seed=seed)
        if labels.max(initial=0) == 0:
            half = idx.size // 2
            todo.extend([idx[:half], idx[half:]])
            continue
        order = np.argsort(labels, kind="stable")
        cuts = np.flatnonzero(np.diff(labels[order])) + 1
        todo.extend(np.split(idx[order], cuts))
    done.sort(key=lambda part: int(part[0]))
    return [np.sort(part) for part in done]


def _check(vectors: np.ndarray, mode: str, max_children: int, knn: int) -> np.ndarray:
    """Validated float32 (or float16) vectors, or a ValueError that says what is wrong."""
    half = getattr(vectors, "dtype", None) == np.float16
    x = np.ascontiguousarray(vectors, dtype=np.float16 if half else np.float32)
    if x.ndim != 2:
        raise ValueError(f"vectors must be a 2-d array (n, d), got shape {x.shape}")
    if x.shape[0] == 0:
        raise ValueError("cannot build a tree from zero vectors")
    if mode not in MODES:
        raise ValueError(f"unknown pair mode {mode!r}: use one of {', '.join(MODES)}")
    if max_children < 3:
        raise ValueError(f"max_children must be at least 3, got {max_children}")
    if knn < 1:
        raise ValueError(f"knn must be at least 1, got {knn}")
    return x


def build_tree(
    vectors: np.ndarray,
    *,
    mode: str = "auto",
    max_children: int = 40,
    knn: int = 32,
    buckets: int | None = None,
    seed: int = 0,
    timings: dict[str, float] | None = None,
    exact_max: int = EXACT_MAX_LEAVES,
) -> Tree:
    """Build the equi-depth abstract tree over L2-normalised leaf vectors (n, d).

    Mode "auto" ranks pairs exactly up to `exact_max` leaves and by bucketing above, so no
    build ever holds an n x n matrix; `timings["mode"]` names the mode that ran.
    """
    x = _check(vectors, mode, max_children, knn)
    n = x.shape[0]
    auto = mode == "auto"
    mode = resolve_mode(mode, n, exact_max)
    clock = time.perf_counter()
    spent = {"pairs": 0.0, "merge": 0.0, "rebalance": 0.0}
    forest = Forest(n)
    if mode == "bucketing" and n > 1:
        b = buckets if buckets is not None else max(1, round(math.sqrt(n / 2)))
        if auto and buckets is None:
            b = math.ceil(n / min(AUTO_BUCKET_LEAVES, exact_max))  # a bucket is ranked exactly
        parts = partition(x, b, seed)
        spent["pairs"] = time.perf_counter() - clock
        for part in parts:
            if part.size < 2:
                continue
            start = time.perf_counter()
            u, v, _ = exact_mst(x[part])
            spent["pairs"] += time.perf_counter() - start
            forest.link_all(part[u], part[v])
        spent["merge"] = time.perf_counter() - clock - spent["pairs"]
    elif n > 1:
        if mode == "exact":
            u, v, _ = exact_mst(x)
        else:
            u, v, w = knn_pairs(x, knn, seed)
            u, v, _ = spanning_forest(u, v, w, n)
        spent["pairs"] = time.perf_counter() - clock
        forest.link_all(u, v)
    start = time.perf_counter()
    link_components(forest, x)
    tree = forest.to_tree()
    spent["merge"] += time.perf_counter() - start
    if mode != "bucketing":
        spent["merge"] = time.perf_counter() - clock - spent["pairs"]
    start = time.perf_counter()
    tree = rebalance(tree, x, max_children)
    spent["rebalance"] = time.perf_counter() - start
    if timings is not None:
        timings.update(spent)
        timings["mode"] = mode  # type: ignore[assignment]
    return tree


def resolve_mode(mode: str, n: int, exact_max: int = EXACT_MAX_LEAVES) -> str:
    """The pair mode a build of n leaves uses: auto means exact while n <= exact_max."""
    if mode != "auto":
        return mode
    return "exact" if n <= exact_max else "bucketing"

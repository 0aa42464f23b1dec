"""A few leaves spread over a subtree, found by walking down it: never the whole subtree."""

from __future__ import annotations

from collections.abc import Callable, Sequence


def spread_leaves(node: int, k: int, children: Callable[[int], Sequence[int]],
                  leaves: Callable[[int], int]) -> list[int]:
    """Up to `k` leaf keys (negative) under `node`, each child's share by its leaves (largest
    remainders), evenly spaced among a lowest node's: the same leaves for the same subtree."""
    if node < 0:
        return [node] if k > 0 else []
    kids = list(children(node))
    if k <= 0 or not kids:
        return []
    sizes = [1 if kid < 0 else max(leaves(kid), 1) for kid in kids]
    total = sum(sizes)
    if all(kid < 0 for kid in kids):
        if len(kids) <= k:
            return kids
        return [kids[(2 * i + 1) * len(kids) // (2 * k)] for i in range(k)]
    k = min(k, total)
    shares = [k * size / total for size in sizes]
    quotas = [int(share) for share in shares]
    order = sorted(range(len(kids)), key=lambda i: (quotas[i] - shares[i], i))
    for i in order[:k - sum(quotas)]:
        quotas[i] += 1
    out: list[int] = []
    for kid, quota in zip(kids, quotas, strict=True):
        out += spread_leaves(kid, quota, children, leaves)
    return out

"""Which chunks an abstract node covers, as one number: nodes of two trees over the same chunks
that cover exactly the same leaves have the same signature."""

from __future__ import annotations

import numpy as np

from psirag_kb.tree.live import LiveTree

_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9),
        np.uint64(0x94D049BB133111EB))
"""splitmix64's constants: each chunk id is mixed into 64 well-spread bits."""


def mixed(ids: np.ndarray) -> np.ndarray:
    """splitmix64 of each chunk id (uint64, wrapping)."""
    z = np.asarray(ids, np.int64).astype(np.uint64) + _MIX[0]
    z = (z ^ (z >> np.uint64(30))) * _MIX[1]
    z = (z ^ (z >> np.uint64(27))) * _MIX[2]
    return z ^ (z >> np.uint64(31))


def signatures(live: LiveTree) -> dict[int, tuple[int, int]]:
    """Each abstract node's (signature, leaf count): the wrapping sum of its leaves' mixed ids,
    as a signed 64-bit int, and how many leaves it covers. Children first, one pass."""
    out: dict[int, tuple[np.uint64, int]] = {}
    with np.errstate(over="ignore"):  # the sums wrap by design
        for node in sorted(live.children, key=lambda n: live.layer[n]):
            kids = np.asarray(live.children[node], np.int64)
            leaves = kids[kids < 0]
            total = mixed(-leaves).sum(dtype=np.uint64)
            count = len(leaves)
            for kid in kids[kids > 0].tolist():
                part, size = out[kid]
                total = np.uint64(total + part)
                count += size
            out[node] = (total, count)
    return {node: (int(total.view(np.int64)), count) for node, (total, count) in out.items()}

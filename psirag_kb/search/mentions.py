"""The mention list: passages of the documents whose titles round 1's passages name.

HippoRAG's link from a passage to the entities it names, without a model: a name written in a
found passage ("published by the American Psychological Association") that is the title of
another document (a note's file name or first heading, a corpus record's title) points at that
document's passages. The names are looked up in the BM25 index's title field, one term each,
and the passages found are ranked by the question's BM25 among them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

MENTION_SEEDS = 1
"""Top passages of round 1 whose names are looked up: the first one's (docs/benchmarks/
default-mode.md, issue 42: recall@5 on MuSiQue 1-50 0.707 with one, 0.697 with two, 0.677
with three, where the list of the other passages' names crowded the question's own out)."""
STEP_PREFIX = "titles: "
"""How a mention list's step (`MultiRound.steps`) writes its query: this, then the names."""
MENTION_TERMS = 8
"""Names taken from the passage (4 and 16 measured within half a point on the tuning sets)."""


def mention_list(engine: Any, names: Sequence[str], text: str, depth: int,
                 scope: Any = None) -> np.ndarray:
    """Up to `depth` passages of the documents the names title, best for `text` first (empty
    while the BM25 index is rebuilt, or when no name is a title)."""
    if not names or "bm25" in engine.stale:
        return np.zeros(0, np.int64)
    paths = None if scope is None else scope.paths
    return engine.sparse.titled(list(names), text, depth, paths)[0]

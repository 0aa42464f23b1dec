"""Scoped search: the folders and files a query is limited to, and the chunks below them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from psirag_kb.access import OWNER, Access


def normalise(within: Iterable[str | Path]) -> tuple[str, ...]:
    """Absolute paths (`~` expanded, trailing slashes dropped), each once, in the order given."""
    return tuple(dict.fromkeys(os.path.abspath(os.path.expanduser(str(p))) for p in within))


class Scope:
    """A query's scope: the normalised paths asked for and the ids of the chunks below them.

    It is made once per query and handed to every retriever, which filter inside their search:
    BM25 by the paths alone, the others by the ids, looked up in DuckDB when first needed. The
    vectors of a small scope are read once and then shared.
    """

    def __init__(self, paths: tuple[str, ...],
                 ids: np.ndarray | Callable[[], np.ndarray], access: Access = OWNER) -> None:
        self.paths = paths
        self.access = access
        """The person the scope was made for: its paths lie within their grants."""
        self._ids = None if callable(ids) else _sorted(ids)
        self._lookup = ids if callable(ids) else None
        self._members: set[int] | None = None
        self.whole: bool | None = None
        """Whether the scope holds every chunk, once the query engine has counted."""
        self.vectors: tuple[np.ndarray, np.ndarray] | None = None
        """(ids, vectors) of the scope's chunks once an exact search has read them."""

    @property
    def ids(self) -> np.ndarray:
        """Chunk ids in scope, ascending."""
        if self._ids is None:
            assert self._lookup is not None  # ids are given or looked up
            self._ids = _sorted(self._lookup())
        return self._ids

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def members(self) -> set[int]:
        """The chunk ids as a set (for hnswlib's filter, which asks about one label at a time)."""
        if self._members is None:
            self._members = set(self.ids.tolist())
        return self._members

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Which of the given chunk ids are in scope (a boolean mask)."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(self.ids) == 0:
            return np.zeros(len(ids), dtype=bool)
        at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        return self.ids[at] == ids


def _sorted(ids: np.ndarray) -> np.ndarray:
    """Distinct int64 chunk ids, ascending."""
    return np.unique(np.asarray(ids, dtype=np.int64))


def exact_top(ids: np.ndarray, vectors: np.ndarray, query: np.ndarray,
              k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (ids, cosines) by brute force over unit vectors, best first."""
    if len(ids) == 0 or k <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    scores = vectors @ np.asarray(query, dtype=np.float32)
    k = min(k, len(ids))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return ids[top], scores[top].astype(np.float32)

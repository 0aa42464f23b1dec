"""Who may read each chunk, as a partition label: the deepest boundary (a watched root or a
granted folder or file) that contains the chunk's file."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from psirag_kb.access import covers
from psirag_kb.paths import resolved
from psirag_kb.storage.store import Store

log = logging.getLogger(__name__)

OUTSIDE = -1
"""The label of chunks under no boundary (and of corpus records)."""
UNKNOWN = -2
"""Not looked up yet."""


class Partitions:
    """The boundaries of the tree and the partition label of every chunk (by chunk id)."""

    def __init__(self, store: Store, roots: Iterable[Path | str], grants: Iterable[str]) -> None:
        self.store = store
        self.roots: tuple[str, ...] = ()
        self.grants: tuple[str, ...] = ()
        self.boundaries: tuple[str, ...] = ()
        self.labels = np.zeros(0, np.int64)
        self._lock = threading.Lock()
        self.set(grants, roots)

    def set(self, grants: Iterable[str] | None = None,
            roots: Iterable[Path | str] | None = None) -> bool:
        """Take these grant paths and watched roots (None keeps the current ones) as the
        boundaries and label every chunk again (one pass over the chunks' files); True when
        any label changed."""
        if roots is not None:
            self.roots = tuple(str(resolved(r)) for r in roots)
        if grants is not None:
            self.grants = tuple(str(g).rstrip("/") or "/" for g in grants)
        boundaries = tuple(sorted({*self.roots, *self.grants}))
        self.boundaries = boundaries
        before = self.labels
        ids, rows, paths = self.store.chunk_files()
        per_file = np.asarray([self.label_of_path(p) for p in paths], np.int64)
        labels = np.full(int(ids.max(initial=0)) + 1, UNKNOWN, np.int64)
        labels[ids] = per_file[rows] if len(ids) else labels[ids]
        with self._lock:
            self.labels = labels
        common = min(len(before), len(labels))
        return not np.array_equal(before[:common], labels[:common]) or len(before) != len(labels)

    def label_of_path(self, path: str | None) -> int:
        """Index of the deepest boundary holding the path (OUTSIDE when none does)."""
        if path is None:
            return OUTSIDE
        best, size = OUTSIDE, -1
        for number, boundary in enumerate(self.boundaries):
            if len(boundary) > size and covers(boundary, path):
                best, size = number, len(boundary)
        return best

    def root_of(self, label: int) -> str | None:
        """The boundary path of a label (None for OUTSIDE)."""
        return self.boundaries[label] if 0 <= label < len(self.boundaries) else None

    def label_of(self, ids: np.ndarray) -> np.ndarray:
        """Labels of chunks; those not seen yet are looked up in the database (new chunks,
        inside the writer's transaction) and kept."""
        ids = np.asarray(ids, np.int64)
        labels = self.labels
        out = np.full(len(ids), UNKNOWN, np.int64)
        known = ids < len(labels)
        out[known] = labels[ids[known]]
        missing = out == UNKNOWN
        if missing.any():
            paths = self.store.chunk_paths(ids[missing])
            out[missing] = [self.label_of_path(paths.get(int(i))) for i in ids[missing]]
            self._keep(ids[missing], out[missing])
        return out

    def moved(self, ids: np.ndarray, path: str) -> bool:
        """Chunks whose file moved to `path`: relabel them; True when their label changed."""
        ids = np.asarray(ids, np.int64)
        if len(ids) == 0:
            return False
        label = self.label_of_path(path)
        before = self.label_of(ids)
        self._keep(ids, np.full(len(ids), label, np.int64))
        return bool(np.any(before != label))

    def _keep(self, ids: np.ndarray, labels: np.ndarray) -> None:
        """Remember labels (a grown copy replaces the array, so readers never see it half
        written)."""
        with self._lock:
            current = self.labels
            size = int(ids.max(initial=-1)) + 1
            if size > len(current):
                grown = np.full(size + size // 4, UNKNOWN, np.int64)
                grown[: len(current)] = current
                current = grown
            current[ids] = labels
            self.labels = current

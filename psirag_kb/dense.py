"""hnswlib index over leaf vectors, derived from DuckDB and rebuilt when stale."""

from __future__ import annotations

import logging
from pathlib import Path

import hnswlib
import numpy as np

log = logging.getLogger(__name__)

EF_SEARCH = 200
"""hnswlib's ef at query time: 64 lost a point of recall@5 on the dev mix against brute force."""


class DenseIndex:
    """Cosine nearest neighbours over chunk vectors, labelled by chunk id."""

    def __init__(self, folder: Path, dim: int, *, m: int = 16, ef_construction: int = 200) -> None:
        self.folder = Path(folder)
        self.dim = dim
        self._m = m
        self._ef_construction = ef_construction
        self._file = self.folder / "dense.hnsw"
        self._generation_file = self.folder / "dense.generation"
        self._generation = -1
        self.index = self._empty(1024)
        self._live = 0
        self._load()

    def _empty(self, capacity: int) -> hnswlib.Index:
        index = hnswlib.Index(space="cosine", dim=self.dim)
        index.init_index(
            max_elements=capacity, M=self._m, ef_construction=self._ef_construction,
            allow_replace_deleted=True,
        )
        index.set_ef(EF_SEARCH)
        return index

    def _load(self) -> None:
        """Load the saved index when its generation file ("generation live_count") is readable."""
        try:
            generation, live = (int(v) for v in self._generation_file.read_text().split())
        except (OSError, ValueError):
            return
        try:
            index = hnswlib.Index(space="cosine", dim=self.dim)
            index.load_index(str(self._file), allow_replace_deleted=True)
            index.set_ef(EF_SEARCH)
        except (RuntimeError, OSError, ValueError) as exc:
            log.warning("dense index %s unreadable (%s); it will be rebuilt", self._file, exc)
            return
        self.index, self._live, self._generation = index, live, generation

    @property
    def generation(self) -> int:
        """The DuckDB generation saved on disk (-1 if unknown); memory may be ahead of it."""
        return self._generation

    def save(self, generation: int) -> None:
        """Persist the index and then its generation."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self._file.with_suffix(".tmp")
        self.index.save_index(str(tmp))
        tmp.replace(self._file)
        gen_tmp = self._generation_file.with_suffix(".tmp")
        gen_tmp.write_text(f"{generation} {self._live}")
        gen_tmp.replace(self._generation_file)
        self._generation = generation

    def _reserve(self, extra: int) -> None:
        """Grow capacity before adding."""
        needed = self.index.get_current_count() + extra
        capacity = self.index.get_max_elements()
        if needed > capacity:
            self.index.resize_index(max(needed, capacity * 2))

    def apply(self, generation: int, ids: np.ndarray, vectors: np.ndarray,
              removed: np.ndarray, save: bool = True) -> None:
        """Remove and add vectors, then save with the generation."""
        for chunk_id in removed:
            try:
                self.index.mark_deleted(int(chunk_id))
                self._live -= 1
            except RuntimeError:
                pass
        if len(ids):
            self._reserve(len(ids))
            self.index.add_items(vectors, ids, replace_deleted=True)
            self._live += len(ids)
        if save:
            self.save(generation)

    def rebuild(self, generation: int, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Build from scratch."""
        self.index = self._empty(max(1024, len(ids) + 1024))
        self._live = 0
        if len(ids):
            self.index.add_items(vectors, ids)
            self._live = len(ids)
        self.save(generation)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (ids, cosine similarities)."""
        k = min(k, self._live)
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        self.index.set_ef(max(EF_SEARCH, k))
        labels, distances = self.index.knn_query(query.reshape(1, -1), k=k)
        return labels[0].astype(np.int64), (1.0 - distances[0]).astype(np.float32)

    def search_many(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (ids, cosine similarities) for each query row; empty columns when empty."""
        k = min(k, self._live)
        if k <= 0:
            n = len(queries)
            return np.zeros((n, 0), np.int64), np.zeros((n, 0), np.float32)
        self.index.set_ef(max(EF_SEARCH, k))
        labels, distances = self.index.knn_query(queries, k=k)
        return labels.astype(np.int64), (1.0 - distances).astype(np.float32)

    @property
    def count(self) -> int:
        """Number of live vectors."""
        return self._live

"""hnswlib index over leaf vectors, derived from DuckDB and rebuilt when stale."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import hnswlib
import numpy as np

log = logging.getLogger(__name__)

ADD_SLICE = 1024
"""Vectors added per exclusive hold, so a query waits at most for one slice."""

EXACT_LIVE = 200
"""An index of up to this many live vectors (in at most EXACT_ELEMENTS graph nodes) is searched
by brute force over a copy of them taken after each change (under a millisecond): hnswlib's
graph can leave a node with no incoming link among near-identical vectors, so that no ef finds
it (in tests/unit/test_dense_churn.py, 3 of 1,200 lookups of a chunk by its own vector)."""
EXACT_ELEMENTS = 1024

COMPACT_MIN = 256
"""Deleted vectors the graph keeps before `worn` can ask for a rebuild (see `worn`)."""


class SharedLock:
    """Many readers or one writer; hnswlib allows searches alongside searches only."""

    def __init__(self) -> None:
        self._mutex = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the lock with other readers."""
        with self._mutex:
            while self._writing:
                self._mutex.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._mutex:
                self._readers -= 1
                if not self._readers:
                    self._mutex.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the lock alone (new readers wait until it is released)."""
        with self._mutex:
            while self._writing:
                self._mutex.wait()
            self._writing = True
            while self._readers:
                self._mutex.wait()
        try:
            yield
        finally:
            with self._mutex:
                self._writing = False
                self._mutex.notify_all()

EF_SEARCH = 400
"""hnswlib's ef at query time: on the dev mix 64 lost a point of recall@5 against brute force
and 200 half a point (one question's top 5 of 100 differed); 400 returns the exact top 5."""

EXACT_SCOPE = 200
"""A scope of up to this many chunks is always searched exactly (under a millisecond)."""
EXACT_SCOPE_FACTOR = 60
"""A scope of m chunks among n is searched exactly while m² <= this * n.

hnswlib's filtered search visits about 0.6 * n / m ms worth of nodes before it has k allowed
ones (100k clustered 384-d vectors: 34 ms for a scope of 1,000, 6.6 ms for 10,000), while
reading the vectors from DuckDB for brute force costs about 0.01 * m ms; they meet near
m = sqrt(60 n): 775 chunks of 10k (measured there: 1,000 chunks 12 ms exact, 8 ms filtered),
2,500 of 100k, 7,700 of a million. Exact search also has recall 1 (the filtered one
0.92-0.99 on scattered scopes)."""


def exact_scope(m: int, n: int) -> bool:
    """Whether a scope of m chunks among n is searched by brute force, not hnswlib's filter."""
    return m <= max(EXACT_SCOPE, math.isqrt(EXACT_SCOPE_FACTOR * max(n, 0)))


class DenseIndex:
    """Cosine nearest neighbours over chunk vectors, labelled by chunk id.

    The writer thread adds and removes; any thread searches. `memory_generation` is the DuckDB
    generation the vectors in memory reflect, `generation` the one saved on disk.
    """

    def __init__(self, folder: Path, dim: int, *, m: int = 16, ef_construction: int = 200) -> None:
        self.folder = Path(folder)
        self.dim = dim
        self._m = m
        self._ef_construction = ef_construction
        self._file = self.folder / "dense.hnsw"
        self._generation_file = self.folder / "dense.generation"
        self._generation = -1
        self.memory_generation = -1
        self.identity: str | None = None
        """The identity of the database the index was built from (None before it was
        recorded); saved with the generation."""
        self._lock = SharedLock()
        self.index = self._empty(1024)
        self._live = 0
        self._small: tuple[int, np.ndarray, np.ndarray] | None = None
        """(change count, ids, unit vectors) of a small index's live vectors, for exact search."""
        self._changes = 0
        self.unsaved = 0
        """Vectors added in memory since the last save (what a catch-up from the saved file
        would add again)."""
        self._load()

    def _empty(self, capacity: int) -> hnswlib.Index:
        index = hnswlib.Index(space="cosine", dim=self.dim)
        index.init_index(
            max_elements=capacity, M=self._m, ef_construction=self._ef_construction,
        )
        index.set_ef(EF_SEARCH)
        return index

    def _load(self) -> None:
        """Load the saved index when its generation file ("generation live_count identity")
        is readable."""
        try:
            parts = self._generation_file.read_text().split()
            generation, live = int(parts[0]), int(parts[1])
        except (OSError, ValueError, IndexError):
            return
        try:  # hnswlib loads a file of another dimension without a word
            saved_dim = int((self.folder / "dense.dim").read_text())
        except (OSError, ValueError):
            saved_dim = self.dim
        if saved_dim != self.dim:
            log.warning("dense index %s holds %d-d vectors, not %d-d; it will be rebuilt",
                        self._file, saved_dim, self.dim)
            return
        try:
            index = hnswlib.Index(space="cosine", dim=self.dim)
            index.load_index(str(self._file))
            index.set_ef(EF_SEARCH)
        except (RuntimeError, OSError, ValueError) as exc:
            log.warning("dense index %s unreadable (%s); it will be rebuilt", self._file, exc)
            return
        self.index, self._live, self._generation = index, live, generation
        self.memory_generation = generation
        self.identity = parts[2] if len(parts) > 2 else None

    @property
    def generation(self) -> int:
        """The DuckDB generation saved on disk (-1 if unknown); memory may be ahead of it."""
        return self._generation

    def save(self, generation: int) -> None:
        """Persist the index and then its generation (the one in memory, which the caller names:
        saving under any other would record vectors the file does not hold)."""
        if generation != self.memory_generation:
            raise ValueError(f"the dense index holds generation {self.memory_generation}, "
                             f"not {generation}; rebuild it instead of saving")
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self._file.with_suffix(".tmp")
        with self._lock.shared():
            self.index.save_index(str(tmp))
            live = self._live
        tmp.replace(self._file)
        (self.folder / "dense.dim").write_text(str(self.dim))  # a reembed changes it
        gen_tmp = self._generation_file.with_suffix(".tmp")
        gen_tmp.write_text(f"{generation} {live} {self.identity or ''}".rstrip())
        gen_tmp.replace(self._generation_file)
        self._generation = generation
        self.unsaved = 0

    def saved_files(self) -> tuple[Path, Path] | None:
        """The saved index file and its generation file (a consistent pair between two saves),
        or None when nothing was saved."""
        if self._generation < 0 or not self._file.exists():
            return None
        return self._file, self._generation_file

    def add_before_serving(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors to an index nothing searches yet (the one a reembed builds): no lock is
        taken; the caller sets `memory_generation`."""
        self._reserve(len(ids))
        self.index.add_items(np.asarray(vectors, np.float32), ids)
        self._live += len(ids)

    def recount(self, live: int) -> None:
        """Set how many vectors are live (after a change that deleted ids it cannot count)."""
        self._live = live

    def move(self, folder: Path) -> None:
        """Save into `folder` from now on (what is in memory stays)."""
        self.folder = Path(folder)
        self._file = self.folder / "dense.hnsw"
        self._generation_file = self.folder / "dense.generation"

    def _reserve(self, extra: int) -> None:
        """Grow capacity before adding."""
        needed = self.index.get_current_count() + extra
        capacity = self.index.get_max_elements()
        if needed > capacity:
            self.index.resize_index(max(needed, capacity * 2))

    def apply(self, generation: int, ids: np.ndarray, vectors: np.ndarray,
              removed: np.ndarray, save: bool = True) -> None:
        """Remove and add vectors (the change that made `generation`), then maybe save.

        Raises ValueError when memory is not at the generation before: a change was missed.
        """
        if self.memory_generation != generation - 1:
            raise ValueError(f"the dense index is at generation {self.memory_generation}, "
                             f"the change makes {generation}: it missed a change")
        self.memory_generation = -1  # until the change is complete
        with self._lock.exclusive():
            self._changes += 1
            for chunk_id in removed:
                try:
                    self.index.mark_deleted(int(chunk_id))
                    self._live -= 1
                except RuntimeError:
                    pass
            if len(ids):
                self._reserve(len(ids))
        for start in range(0, len(ids), ADD_SLICE):
            with self._lock.exclusive():
                self._changes += 1
                self.index.add_items(vectors[start:start + ADD_SLICE],
                                     ids[start:start + ADD_SLICE])
                self._live += len(ids[start:start + ADD_SLICE])
        self.unsaved += len(ids)
        self.memory_generation = generation
        if save:
            self.save(generation)

    def catch_up(self, generation: int, ids: np.ndarray,
                 vectors: Callable[[np.ndarray], np.ndarray]) -> tuple[int, int]:
        """Bring a saved index that is behind to the chunk ids the database has now, by adding
        the missing ones and deleting the gone ones (chunk ids are never reused), then save;
        returns (added, deleted). ValueError when there is nothing saved to start from."""
        if self._generation < 0:
            raise ValueError("no saved dense index to catch up")
        held = np.asarray(self.index.get_ids_list(), dtype=np.int64)
        missing = np.setdiff1d(ids, held)
        extra = np.setdiff1d(held, ids)
        self.memory_generation = -1
        with self._lock.exclusive():
            self._changes += 1
            for chunk_id in extra.tolist():
                try:
                    self.index.mark_deleted(chunk_id)
                except RuntimeError:  # deleted before the save already
                    pass
            self._reserve(len(missing))
        for start in range(0, len(missing), ADD_SLICE):
            part = missing[start:start + ADD_SLICE]
            with self._lock.exclusive():
                self._changes += 1
                self.index.add_items(vectors(part), part)
        self._live = len(ids)
        self.memory_generation = generation
        self.save(generation)
        return len(missing), len(extra)

    def rebuild(self, generation: int, ids: np.ndarray, vectors: np.ndarray,
                save: bool = True) -> None:
        """Build from scratch, then swap the new index in (queries use the old one meanwhile)."""
        index = self._empty(max(1024, len(ids) + 1024))
        if len(ids):
            index.add_items(vectors, ids)
        with self._lock.exclusive():
            self.index, self._live = index, len(ids)
            self._changes += 1
        self.memory_generation = generation
        if save:
            self.save(generation)

    @property
    def deleted(self) -> int:
        """Vectors marked deleted that the graph still holds (searched through, never
        returned)."""
        return max(0, self.index.get_current_count() - self._live)

    @property
    def worn(self) -> bool:
        """Whether deleted vectors outnumber the live ones (and COMPACT_MIN): time to rebuild.

        Deleted vectors stay in the graph, so memory and the nodes a search walks through grow
        with every edit until a rebuild. hnswlib's `replace_deleted`, which reused their slots
        instead, lost recall: after 1,500 edits of 40 near-identical paragraphs, 11% of the
        current ones were not among the top 20 for their own vector (tests/unit/
        test_dense_churn.py). Rebuilding once deletions pass the live count costs at most one
        insertion per deletion.
        """
        deleted = self.deleted
        return deleted >= COMPACT_MIN and deleted > self._live

    def search(self, query: np.ndarray, k: int,
               allowed: set[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (ids, cosine similarities); with `allowed`, only among those chunk ids."""
        labels, scores = self.search_many(query.reshape(1, -1), k, allowed)
        return labels[0], scores[0]

    def search_many(self, queries: np.ndarray, k: int, allowed: set[int] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (ids, cosine similarities) for each query row; empty columns when empty.

        With `allowed`, hnswlib skips every other label while it searches (its filter), so k
        allowed ones come back when they are reachable; meant for large sets (`exact_scope`).
        """
        with self._lock.shared():  # hnswlib searches max(ef, k) candidates by itself
            k = min(k, self._live, len(allowed) if allowed is not None else k)
            if k <= 0:
                n = len(queries)
                return np.zeros((n, 0), np.int64), np.zeros((n, 0), np.float32)
            small = self._small_vectors()
            if small is not None:
                return _exact(*small, queries, k, allowed)
            test = allowed.__contains__ if allowed is not None else None
            while True:
                try:
                    labels, distances = self.index.knn_query(queries, k=k, num_threads=1,
                                                             filter=test)
                    break
                except RuntimeError:  # deleted (or filtered) elements left fewer than k
                    if k == 1 and test is not None:  # none of `allowed` is in the index
                        n = len(queries)
                        return np.zeros((n, 0), np.int64), np.zeros((n, 0), np.float32)
                    if k == 1:
                        raise
                    k //= 2
        return _by_score_then_id(labels.astype(np.int64), (1.0 - distances).astype(np.float32))

    def _small_vectors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """A small index's live (ids, unit vectors), copied once per change (None when large);
        called under the shared lock."""
        if self._live > EXACT_LIVE or self.index.get_current_count() > EXACT_ELEMENTS:
            return None
        kept, changes = self._small, self._changes
        if kept is not None and kept[0] == changes:
            return kept[1], kept[2]
        ids, rows = [], []
        for label in sorted(self.index.get_ids_list()):  # by id: ties rank the same after a
            # rebuild; deleted labels are listed too and skipped below
            try:
                rows.append(self.index.get_items([label])[0])
            except RuntimeError:
                continue
            ids.append(label)
        vectors = np.asarray(rows, np.float32).reshape(len(ids), self.dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        self._small = (changes, np.asarray(ids, np.int64), vectors)
        return self._small[1], self._small[2]

    def get(self, ids: np.ndarray) -> np.ndarray:
        """Stored vectors of chunk ids (RuntimeError when one is not in the index)."""
        if len(ids) == 0:
            return np.zeros((0, self.dim), np.float32)
        with self._lock.shared():
            return np.asarray(self.index.get_items(np.asarray(ids, np.int64)), dtype=np.float32)

    @property
    def count(self) -> int:
        """Number of live vectors."""
        return self._live


def _by_score_then_id(ids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row ordered by score, equal scores by id, so a rebuilt index ranks ties alike."""
    order = np.lexsort((ids, -scores), axis=1)
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)


def _exact(ids: np.ndarray, vectors: np.ndarray, queries: np.ndarray, k: int,
           allowed: set[int] | None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (ids, cosines) per query row by brute force, among `allowed` when given."""
    if allowed is not None:
        keep = np.fromiter((int(i) in allowed for i in ids), bool, len(ids))
        ids, vectors = ids[keep], vectors[keep]
    queries = np.asarray(queries, np.float32).reshape(-1, vectors.shape[1])
    norms = np.linalg.norm(queries, axis=1, keepdims=True)
    scores = (queries / np.where(norms > 0, norms, 1.0)) @ vectors.T
    k = min(k, len(ids))
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return ids[order], np.take_along_axis(scores, order, axis=1).astype(np.float32)

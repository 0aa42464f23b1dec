"""The tree of a first ingest: deferred while it runs and built once at its end, with interim
trees meanwhile so that the map has topics to show."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from psirag_kb.storage.store import Store
    from psirag_kb.tree.index import TreeIndex

INTERIM_FIRST = 2000
"""Chunks a first ingest commits before its first interim tree (`interim_tree`)."""
INTERIM_GROWTH = 4
"""Each later interim tree waits until the chunks are this many times the last one's: interim
trees then cost, summed over the ingest, a third of the final build and its labels or less."""


class FirstIngest:
    """The bulk of `Stores`: a first ingest defers the tree and builds it once (all on the
    writer thread but `interim` and `interim_due`, which read)."""

    defer_tree: bool
    interim_floor: int = 0
    """The chunks when an interim build failed: the next waits for INTERIM_GROWTH times as
    many, so a failing build is not tried again at every look."""
    tree_index: TreeIndex
    tree_state: dict[str, Any]
    store: Store

    if TYPE_CHECKING:
        @property
        def tree_missing(self) -> bool: ...
        def tree_vectors(self) -> tuple[np.ndarray, np.ndarray]: ...
        def build_tree(self, ids: np.ndarray, vectors: np.ndarray) -> None: ...

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """Defer tree updates when the tree is empty, then build it once at the end."""
        if not self.begin_bulk():
            yield
            return
        try:
            yield
        finally:
            self.end_bulk()

    def begin_bulk(self) -> bool:
        """Defer tree updates when the tree is empty (writer thread); True when this call did,
        and must then call `end_bulk`. Other writes meanwhile skip the tree as well: the build
        at the end covers every chunk committed by then."""
        if not self.tree_index.empty or self.defer_tree or self.tree_state["state"] == "rebuilding":
            return False
        self.defer_tree, self.interim_floor = True, 0
        return True

    @property
    def interim(self) -> bool:
        """Whether the tree is an interim one, over the chunks a first ingest had committed
        when it was built (the tree is still deferred)."""
        return self.defer_tree and not self.tree_index.empty

    def interim_due(self) -> bool:
        """Whether a first ingest now holds INTERIM_FIRST chunks and INTERIM_GROWTH times its
        last interim tree's."""
        return self._interim_chunks() is not None

    def _interim_chunks(self) -> int | None:
        """The chunks committed so far when an interim tree is due, else None."""
        if not self.defer_tree or self.tree_missing:
            return None
        last = max(self.tree_index.view.n_leaves, self.interim_floor)
        chunks = self.store.chunk_count()
        return chunks if chunks >= max(INTERIM_FIRST, INTERIM_GROWTH * last) else None

    def interim_tree(self) -> bool:
        """Build a tree over the chunks a first ingest has committed so far, when due (writer
        thread), so that the map and the topics have something to show while it runs; writes
        go on deferring, and the build at its end covers every chunk. True when built."""
        chunks = self._interim_chunks()
        if chunks is None:
            return False
        try:
            self.build_tree(*self.tree_vectors())
        except Exception:
            self.interim_floor = chunks  # read before: the store may be what failed
            raise
        return True

    def end_bulk(self, build: bool = True) -> None:
        """Stop deferring and build the whole tree once (writer thread); without `build` (the
        knowledge base is closing) the next start rebuilds it."""
        self.defer_tree = False
        if build:
            self.build_tree(*self.tree_vectors())

"""Run the real daemon with a fast embedder, SIGKILLing itself at one named point.

`python crash_worker.py DATA_DIR FOLDER [POINT N]`: the daemon watches FOLDER; when POINT is
reached for the N-th time the process kills itself with SIGKILL, exactly where a power cut or
the OOM killer could strike. Without POINT it runs until SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from psirag_kb.abstracts.job import AbstractJob
from psirag_kb.config import Config
from psirag_kb.service.daemon import run_daemon
from psirag_kb.storage.dense import DenseIndex
from psirag_kb.storage.sparse import SparseIndex
from psirag_kb.storage.store import Store
from psirag_kb.tree import rows
from psirag_kb.tree.stores import Stores

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for conftest
from conftest import FakeEmbedder  # noqa: E402


class HashEmbedder(FakeEmbedder):
    """The tests' bag-of-words embedder with a small per-text delay, so kills land mid-batch."""

    def embed(self, texts: list[str]) -> np.ndarray:
        time.sleep(0.001 * len(texts))
        return super().embed(texts)


class Trigger:
    """Counts arrivals at the chosen point and kills the process on the N-th."""

    def __init__(self, point: str, n: int) -> None:
        self.point, self.n, self.seen = point, n, 0
        self._mutex = threading.Lock()

    def at(self, point: str) -> None:
        if point != self.point:
            return
        with self._mutex:
            self.seen += 1
            if self.seen >= self.n:
                print(f"killed at {point} #{self.seen}", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(10)  # the signal is delivered before this returns


_in_abstracts = threading.local()


def install(trigger: Trigger) -> None:
    """Wrap the store and index methods so each named point calls the trigger."""
    at = trigger.at

    embed = HashEmbedder.embed

    def embed_hook(self: HashEmbedder, texts: list[str]) -> np.ndarray:
        vectors = embed(self, texts)
        if len(texts) > 1:  # a file batch, not a query or one phrase
            at("embedding")
        return vectors

    HashEmbedder.embed = embed_hook  # type: ignore[method-assign]

    @contextmanager
    def transaction(self: Store) -> Any:
        self.db.execute("BEGIN")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        at("duckdb-commit")  # everything written, COMMIT not yet run
        self.db.execute("COMMIT")

    Store.transaction = transaction  # type: ignore[method-assign]

    update_tree = Stores.update_tree

    def update_tree_hook(self: Stores, *args: Any) -> Any:
        result = update_tree(self, *args)
        if result is not None:
            at("tree-update")  # the in-memory tree changed, its rows not yet written
        return result

    Stores.update_tree = update_tree_hook  # type: ignore[method-assign]

    save_tree = rows.save_tree

    def save_tree_hook(store: Store, live: Any) -> None:
        at("tree-build")  # a whole tree was built, none of it stored yet
        save_tree(store, live)

    rows.save_tree = save_tree_hook

    write_tree = rows.write_tree

    def write_tree_hook(store: Store, live: Any, full: bool = False) -> None:
        write_tree(store, live, full)
        if getattr(_in_abstracts, "active", False):
            at("abstracts")  # fresh abstracts written inside the uncommitted transaction

    rows.write_tree = write_tree_hook

    write = AbstractJob._write

    def write_hook(self: AbstractJob, *args: Any) -> Any:
        _in_abstracts.active = True  # on the writer thread, where the abstracts are stored
        try:
            return write(self, *args)
        finally:
            _in_abstracts.active = False

    AbstractJob._write = write_hook  # type: ignore[method-assign]

    sparse_apply = SparseIndex.apply

    def sparse_apply_hook(self: SparseIndex, *args: Any) -> None:
        at("bm25-apply")  # DuckDB committed, BM25 not yet touched
        sparse_apply(self, *args)

    SparseIndex.apply = sparse_apply_hook  # type: ignore[method-assign]

    set_generation = SparseIndex._set_generation

    def set_generation_hook(self: SparseIndex, generation: int) -> None:
        at("bm25-commit")  # Tantivy committed, its generation file not yet updated
        set_generation(self, generation)

    SparseIndex._set_generation = set_generation_hook  # type: ignore[method-assign]

    rebuild = SparseIndex.rebuild

    def rebuild_hook(self: SparseIndex, generation: int, batches: Any, *rest: Any) -> None:
        def counted() -> Any:
            for batch in batches:
                yield batch
                at("bm25-rebuild")  # old index emptied and committed, new documents uncommitted
        rebuild(self, generation, counted(), *rest)

    SparseIndex.rebuild = rebuild_hook  # type: ignore[method-assign]

    dense_save = DenseIndex.save

    def dense_save_hook(self: DenseIndex, generation: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.index.save_index(str(self._file))
        at("dense-save")  # the new index file is on disk, its generation file is not
        dense_save(self, generation)

    DenseIndex.save = dense_save_hook  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    data_dir, folder = Path(argv[0]), Path(argv[1])
    if len(argv) > 2:
        install(Trigger(argv[2], int(argv[3])))
    config = Config().with_data_dir(data_dir)
    armed = len(argv) > 2  # a clean run only reconciles; upkeep jobs run during armed ones
    config = config.replace("watch", folders=[str(folder)], quiet_period_s=0.2,
                            maintain_interval_s=0.5 if armed else 3600.0,
                            store_interval_s=1.0 if armed else 3600.0,
                            rescan_interval_s=3600.0)
    config = config.replace("api", port=0)
    return run_daemon(config, embedder=HashEmbedder())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

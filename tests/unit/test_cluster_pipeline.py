"""The cluster pipeline's order and hand-over, with a stand-in for the cluster: outcomes that
finish in any order are committed in file order, a batch cut short by the chunk budget goes
next, a burst is shared among the workers, and a cluster that goes away leaves the rest (and
nothing twice) to the local pipeline."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from psirag_kb.ingest.cluster import ClusterGone
from psirag_kb.ingest.clusterpipe import ClusterPipeline
from psirag_kb.ingest.pipeline import Prepared


class FakeCluster:
    """Batches answered in the order `finish` picks; gone after `gone_after` outcomes."""

    def __init__(self, workers: int, budget: int = 0, gone_after: int = -1) -> None:
        self.workers, self.slots = workers, 2 * workers
        self.budget, self.gone_after = budget, gone_after
        self.sent: dict[int, list[Path]] = {}
        self.answered = 0
        self.closed = False

    def submit(self, batch: list[Path]) -> int:
        if self.closed:
            raise ClusterGone("closed")
        seq = len(self.sent) + 1
        self.sent[seq] = batch
        return seq

    def outcome(self, seq: int, check_stop: Any) -> list[Path]:
        if self.answered == self.gone_after:
            raise ClusterGone("the cluster went away")
        self.answered += 1
        batch = self.sent[seq]
        return batch[:self.budget] if self.budget else batch  # the paths taken

    def drop(self, seqs: list[int]) -> None:
        pass

    def close(self, wait_s: float = 5.0) -> None:
        self.closed = True


def run(cluster: FakeCluster, files: list[Path], batch_files: int = 4
        ) -> tuple[list[list[Path]], list[list[Path]]]:
    """(the batches committed, in order; the file lists handed to the local pipeline)."""
    committed: list[list[Path]] = []
    local: list[list[Path]] = []

    def receive(paths: list[Path], context: Any, taken: list[Path]
                ) -> tuple[Prepared, list[Path]]:
        return Prepared(taken, [], {}, None), paths[len(taken):]

    def commit(prepared: Prepared) -> Future:
        future: Future = Future()
        future.set_result(True)
        return future

    def done(prepared: Prepared, future: Future) -> None:
        committed.append(prepared.paths)

    ClusterPipeline(cluster, lambda paths: (paths, None), receive, commit, done,  # type: ignore[arg-type]
                    lambda: None, local.append, batch_files).run(files)
    return committed, local


FILES = [Path(f"/docs/f{n:02d}.md") for n in range(10)]


def test_batches_commit_in_file_order_and_a_short_batch_goes_next() -> None:
    committed, local = run(FakeCluster(workers=2, budget=3), FILES)
    assert [p for batch in committed for p in batch] == FILES and local == []
    assert max(len(batch) for batch in committed) == 3  # the budget cut the batches of 4


def test_a_burst_is_shared_among_the_workers() -> None:
    committed, _ = run(FakeCluster(workers=3), FILES, batch_files=64)
    assert [len(batch) for batch in committed] == [4, 4, 2]


def test_a_cluster_gone_leaves_the_rest_to_the_local_pipeline_once(
        caplog: pytest.LogCaptureFixture) -> None:
    committed, local = run(FakeCluster(workers=1, gone_after=1), FILES, batch_files=3)
    assert committed == [FILES[:3]]
    assert local == [FILES[3:]]  # every file once: committed there or read here
    assert any("goes on locally" in r.getMessage() for r in caplog.records)

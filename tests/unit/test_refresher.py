"""The abstract refresher's choices, on a knowledge base stand-in: what runs, and how often."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from psirag_kb.service.refresher import AbstractRefresher


class Job:
    """An abstract job whose tree's labels are stale and whose relabelling fails."""

    def __init__(self) -> None:
        self.relabels = 0

    def labels_stale(self) -> bool:
        return True

    def relabel(self) -> dict[str, Any]:
        self.relabels += 1
        raise RuntimeError("a labeller bug")

    def interim(self) -> None:
        return None

    def llm_due(self) -> bool:
        return False

    @property
    def tries(self) -> int:
        return self.relabels


class FailingOffline(Job):
    """An abstract job whose labels are current and whose offline pass fails."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    def labels_stale(self) -> bool:
        return False

    def run(self, **_: Any) -> dict[str, Any]:
        self.runs += 1
        raise RuntimeError("an abstract writer bug")

    @property
    def tries(self) -> int:
        return self.runs


@pytest.mark.parametrize(("make", "dirty"), [(Job, 0), (FailingOffline, 3)],
                         ids=["relabelling", "offline pass"])
def test_a_failed_pass_is_tried_again_only_after_the_tree_changes(make: type[Job],
                                                                   dirty: int) -> None:
    view = SimpleNamespace(dirty=dirty)
    job = make()
    kb = SimpleNamespace(tree_view=lambda: view, abstract_job=job)
    refresher = AbstractRefresher(kb, busy=lambda: False, quiet_s=0.0)
    with pytest.raises(RuntimeError):
        refresher.tick()
    assert not refresher.tick() and job.tries == 1  # no retry every half second
    view = SimpleNamespace(dirty=dirty)  # a write published a new tree
    with pytest.raises(RuntimeError):
        refresher.tick()
    assert job.tries == 2

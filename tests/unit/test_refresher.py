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


def test_a_failed_relabelling_is_tried_again_only_after_the_tree_changes() -> None:
    view = SimpleNamespace(dirty=0)
    job = Job()
    kb = SimpleNamespace(tree_view=lambda: view, abstract_job=job)
    refresher = AbstractRefresher(kb, busy=lambda: False, quiet_s=0.0)
    with pytest.raises(RuntimeError):
        refresher.tick()
    assert not refresher.tick() and job.relabels == 1  # no retry every half second
    view = SimpleNamespace(dirty=0)  # a write published a new tree
    with pytest.raises(RuntimeError):
        refresher.tick()
    assert job.relabels == 2


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


def test_a_failed_offline_pass_is_tried_again_only_after_the_tree_changes() -> None:
    view = SimpleNamespace(dirty=3)
    job = FailingOffline()
    kb = SimpleNamespace(tree_view=lambda: view, abstract_job=job)
    refresher = AbstractRefresher(kb, busy=lambda: False, quiet_s=0.0)
    with pytest.raises(RuntimeError):
        refresher.tick()
    assert not refresher.tick() and job.runs == 1  # no retry every half second
    view = SimpleNamespace(dirty=4)  # a write published a new tree
    with pytest.raises(RuntimeError):
        refresher.tick()
    assert job.runs == 2

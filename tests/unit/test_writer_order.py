"""The writer's coalescing of same-key requests never changes the order of their effects."""

from __future__ import annotations

import threading

from psirag_kb.storage.writer import Writer


def test_same_key_request_after_another_write_runs_after_it() -> None:
    writer = Writer()
    gate = threading.Event()
    effects: list[str] = []
    try:
        writer.submit(gate.wait)  # holds the thread so the next three stay queued
        first = writer.submit(lambda: effects.append("ingest X"), key=("ingest", "X"))
        writer.submit(lambda: effects.append("remove X"), key=("remove", "X"))
        third = writer.submit(lambda: effects.append("ingest X again"), key=("ingest", "X"))
        gate.set()
        third.result(10)
        first.result(10)
    finally:
        writer.close(10)
    assert effects == ["ingest X", "remove X", "ingest X again"]


def test_same_key_request_right_behind_a_queued_one_shares_it() -> None:
    writer = Writer()
    gate = threading.Event()
    runs: list[int] = []
    try:
        writer.submit(gate.wait)
        first = writer.submit(lambda: runs.append(1) or len(runs), key="k")
        second = writer.submit(lambda: runs.append(2) or len(runs), key="k")
        gate.set()
        assert second is first
        assert first.result(10) == 1
    finally:
        writer.close(10)
    assert runs == [1]

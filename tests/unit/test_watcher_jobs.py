"""Scheduled daemon jobs: results and errors are recorded, runs never overlap."""

from __future__ import annotations

import threading
import time

from psirag_kb.service.scheduler import Jobs


def test_jobs_record_results_errors_and_do_not_overlap() -> None:
    running = 0
    overlap = threading.Event()
    lock = threading.Lock()

    def slow() -> dict[str, int]:
        nonlocal running
        with lock:
            running += 1
            if running > 1:
                overlap.set()
        time.sleep(0.3)
        with lock:
            running -= 1
        return {"done": 1}

    def broken() -> None:
        raise ValueError("disk full")

    jobs = Jobs()
    jobs.add("slow", slow, 0.05)
    jobs.add("broken", broken, 0.05)
    jobs.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status = {j["name"]: j for j in jobs.status()}
            if status["slow"]["runs"] >= 2 and status["broken"]["runs"] >= 1:
                break
            time.sleep(0.05)
    finally:
        jobs.shutdown()
    assert status["slow"]["result"] == {"done": 1} and status["slow"]["duration_s"] >= 0.3
    assert status["slow"]["last_run"] is not None and "error" not in status["slow"]
    assert status["broken"]["error"] == "ValueError: disk full"
    assert not overlap.is_set()

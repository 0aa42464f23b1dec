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


def test_a_frequent_quick_job_is_not_logged_at_info_each_time(caplog, monkeypatch) -> None:
    """The grants are looked at every 2 s: a daemon's log must not gain a line each time,
    while a rare job (a rescan) and a slow one still say they ended (a clock of the test's:
    no real waiting, no threshold on the machine's speed)."""
    from types import SimpleNamespace

    from psirag_kb.service import scheduler

    now = [100.0]
    monkeypatch.setattr(scheduler, "time", SimpleNamespace(time=lambda: now[0],
                                                          perf_counter=lambda: now[0]))

    def taking(seconds: float, result: object = None) -> object:
        def job() -> object:
            now[0] += seconds
            return result
        return job

    jobs = Jobs()
    runs = (("boundaries", 2.0, taking(0.001, False)), ("rescan", 600.0, taking(0.2, {})),
            ("people", 60.0, taking(scheduler.NOTED_S + 0.5)))
    for name, every, func in runs:
        jobs.add(name, func, every)
    with caplog.at_level("DEBUG", logger="psirag_kb.service.scheduler"):
        for name, _, func in runs:
            jobs._run(name, func)
    levels = {r.getMessage().split()[1]: r.levelname for r in caplog.records}
    assert levels == {"boundaries": "DEBUG", "rescan": "INFO", "people": "INFO"}
    assert [j["runs"] for j in jobs.status()] == [1, 1, 1]

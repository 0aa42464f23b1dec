"""Periodic daemon jobs on an APScheduler BackgroundScheduler; last runs kept for status."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

log = logging.getLogger(__name__)

NOTED_EVERY_S = 600.0
"""A job run at least this far apart has each completion logged at INFO; a more frequent one
(the grants every 2 s, people and conversations every minute) only when it took NOTED_S."""
NOTED_S = 1.0

@dataclass
class JobRecord:
    """What a job did last time."""

    name: str
    interval_s: float
    runs: int = 0
    last_run: float | None = None
    duration_s: float | None = None
    result: Any = None
    error: str | None = None


def _json_friendly(value: Any) -> Any:
    """Reports become plain data (objects with `as_dict` are converted)."""
    if hasattr(value, "as_dict"):
        return value.as_dict()
    return value


class Jobs:
    """Named interval jobs that coalesce and never overlap."""

    def __init__(self) -> None:
        self._scheduler = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            daemon=True,
        )
        self._records: dict[str, JobRecord] = {}
        self._mutex = threading.Lock()

    def add(self, name: str, func: Callable[[], Any], interval_s: float) -> None:
        """Run `func` every `interval_s` seconds, the first time one interval from now."""
        self._records[name] = JobRecord(name, interval_s)
        self._scheduler.add_job(
            self._run, "interval", seconds=interval_s, id=name, name=name, args=[name, func]
        )

    def _run(self, name: str, func: Callable[[], Any]) -> None:
        """Run one job, recording time, duration and result or error."""
        record = self._records[name]
        started = time.time()
        clock = time.perf_counter()
        try:
            result, error = _json_friendly(func()), None
        except Exception as exc:  # noqa: BLE001 - a failed job is reported, the daemon goes on
            log.exception("job %s failed", name)
            result, error = None, f"{type(exc).__name__}: {exc}"
        seconds = round(time.perf_counter() - clock, 3)
        with self._mutex:
            record.runs += 1
            record.last_run = started
            record.duration_s = seconds
            record.result, record.error = result, error
        if error is None:
            noted = record.interval_s >= NOTED_EVERY_S or seconds >= NOTED_S
            log.log(logging.INFO if noted else logging.DEBUG, "job %s done in %.2f s", name,
                    seconds)

    def run_now(self, name: str) -> None:
        """Ask for a run as soon as possible (coalesced with a pending one)."""
        self._scheduler.modify_job(name, next_run_time=datetime.now())

    def runs(self, name: str) -> int:
        """How many runs of a job have ended so far."""
        with self._mutex:
            return self._records[name].runs

    def start(self) -> None:
        """Start the scheduler thread."""
        self._scheduler.start()

    def shutdown(self, wait: bool = True) -> None:
        """Stop scheduling; with `wait`, let a running job finish."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=wait)

    def status(self) -> list[dict[str, Any]]:
        """Each job's last run, duration, result or error, and next run (epoch seconds)."""
        out = []
        for name, record in self._records.items():
            job = self._scheduler.get_job(name) if self._scheduler.running else None
            next_run = job.next_run_time.timestamp() if job and job.next_run_time else None
            with self._mutex:
                entry = {
                    "name": name, "interval_s": record.interval_s, "runs": record.runs,
                    "last_run": record.last_run, "duration_s": record.duration_s,
                    "next_run": next_run,
                }
                if record.error is not None:
                    entry["error"] = record.error
                else:
                    entry["result"] = record.result
            out.append(entry)
        return out

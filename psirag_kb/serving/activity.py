"""The daemon's last hour of work, sampled: a bounded ring of counters read every few seconds
(ingest, writer queue, query latency, requests by route), and the progress of long jobs."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

SAMPLE_S = 10.0
WINDOW_S = 3600.0
"""How far back the history reaches (SAMPLE_S apart: 361 samples at most)."""
ROUTES = 6
"""Routes plotted (the busiest over the window)."""


def counters(metrics: Any) -> dict[str, Any]:
    """Totals of an API server's Prometheus registry now: query count and seconds, requests
    by route pattern (empty without a registry)."""
    out: dict[str, Any] = {"queries": 0.0, "query_s": 0.0, "routes": {}}
    if metrics is None:
        return out
    for family in metrics.queries.collect():
        for sample in family.samples:
            if sample.name.endswith("_count"):
                out["queries"] += sample.value
            elif sample.name.endswith("_sum"):
                out["query_s"] += sample.value
    for family in metrics.requests.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                route = sample.labels.get("route", "other")
                out["routes"][route] = out["routes"].get(route, 0.0) + sample.value
    return out


class Activity:
    """A ring of samples (at most WINDOW_S / SAMPLE_S + 1) taken by a thread, and the long jobs
    running now (rescan, backup) with what progress they report."""

    def __init__(self, read: Callable[[], dict[str, Any]], sample_s: float = SAMPLE_S,
                 window_s: float = WINDOW_S, clock: Callable[[], float] = time.time) -> None:
        self.read = read
        """The daemon's counters now (`Daemon.metrics_state` plus `counters` and the watcher)."""
        self.sample_s = sample_s
        self.clock = clock
        self.samples: deque[dict[str, Any]] = deque(maxlen=int(window_s / sample_s) + 1)
        self.jobs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, daemon: Any) -> Activity:
        """The activity of a daemon: its /metrics state, its API's counters and the files its
        watcher has processed, read at each sample."""

        def read() -> dict[str, Any]:
            return daemon.metrics_state() | {
                "counters": counters(getattr(daemon.api, "metrics", None)),
                "processed": getattr(daemon.watcher, "processed", 0)}

        return cls(read)

    def start(self) -> None:
        """Sample every `sample_s` seconds until `stop`."""
        self._thread = threading.Thread(target=self._loop, name="activity", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.sample_s):
                return

    def sample(self) -> None:
        """Take one sample now (a daemon not serving yet, or a failing read, adds none)."""
        try:
            state = self.read()
        except Exception:  # noqa: BLE001 - a sample is best effort; the next one comes soon
            return
        if not state.get("open"):
            return
        entry = {"t": self.clock(), "chunks": state.get("chunks_written", 0),
                 "files": state.get("files_written", 0),
                 "writer_queue": state.get("writer_queue", 0),
                 "watcher_queue": state.get("watcher_queue", 0),
                 "processed": state.get("processed", 0), **state.get("counters", {})}
        with self._lock:
            self.samples.append(entry)

    @contextmanager
    def running(self, job: str) -> Iterator[None]:
        """Mark a job (a backup) as running while the block runs."""
        with self._lock:
            self.jobs[job] = {"since": self.clock()}
        try:
            yield
        finally:
            with self._lock:
                self.jobs.pop(job, None)

    def tracked(self, job: str, inner: Callable[[int, int, str], None]
                ) -> Callable[[int, int, str], None]:
        """An ingest progress callback that records `job`'s done and total, then calls `inner`
        (the job is shown from its first report until a report of done == total)."""
        since = self.clock()

        def report(done: int, total: int, current: str) -> None:
            with self._lock:
                if total and done >= total:
                    self.jobs.pop(job, None)
                else:
                    self.jobs[job] = {"since": since, "done": done, "total": total}
            inner(done, total, current)

        return report

    @contextmanager
    def tracking(self, job: str, inner: Callable[[int, int, str], None]
                 ) -> Iterator[Callable[[int, int, str], None]]:
        """`tracked`'s callback for the block; the job is no longer shown once the block ends,
        however it ends (a scan stopped by the daemon's exit or failing half-way)."""
        try:
            yield self.tracked(job, inner)
        finally:
            with self._lock:
                self.jobs.pop(job, None)

    def history(self) -> list[dict[str, Any]]:
        """The samples, oldest first."""
        with self._lock:
            return list(self.samples)

    def running_jobs(self) -> dict[str, dict[str, Any]]:
        """The jobs running now, by name."""
        with self._lock:
            return {name: dict(job) for name, job in self.jobs.items()}


def series(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Plottable series from samples: ingest rate (chunks/s), writer queue, mean query latency
    (ms) and requests per minute by route (the ROUTES busiest), each [(t, value)]."""
    out: dict[str, Any] = {"ingest": [], "writer_queue": [], "latency_ms": [], "routes": {}}
    for earlier, later in zip(samples, samples[1:], strict=False):
        span = later["t"] - earlier["t"]
        if span <= 0:
            continue
        t = later["t"]
        out["ingest"].append((t, max(0.0, (later["chunks"] - earlier["chunks"]) / span)))
        asked = later.get("queries", 0.0) - earlier.get("queries", 0.0)
        took = later.get("query_s", 0.0) - earlier.get("query_s", 0.0)
        out["latency_ms"].append((t, 1000.0 * took / asked if asked > 0 else None))
        before = earlier.get("routes") or {}
        for route, count in (later.get("routes") or {}).items():
            out["routes"].setdefault(route, []).append(
                (t, max(0.0, count - before.get(route, 0.0)) * 60.0 / span))
    out["writer_queue"] = [(s["t"], float(s["writer_queue"])) for s in samples[1:]]
    busiest = sorted(out["routes"], key=lambda r: -sum(v for _, v in out["routes"][r]))
    out["routes"] = {r: out["routes"][r] for r in busiest[:ROUTES]
                     if any(v for _, v in out["routes"][r])}
    return out


def progress(status: dict[str, Any], jobs: dict[str, dict[str, Any]],
             samples: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """The long jobs running now, each {"name", "done", "total" (None: not known), "eta_s",
    "since"}: a reembed and an abstract run from status, a rescan and a backup from `jobs`,
    the watcher's queue as an ingest (its time left from the last minutes' file rate)."""
    out = []
    reembed = status.get("reembed") or {}
    if reembed.get("state") in ("running", "switching"):
        out.append({"name": f"reembed to {reembed.get('model')}", "done": reembed.get("done"),
                    "total": reembed.get("total"), "eta_s": reembed.get("eta_s")})
    abstracts = status.get("abstracts") or {}
    if abstracts.get("running"):
        out.append({"name": "abstracts", "done": abstracts.get("done"),
                    "total": abstracts.get("total"), "eta_s": abstracts.get("eta_s")})
    for name, job in sorted(jobs.items()):
        done, total = job.get("done"), job.get("total")
        eta = None
        if name == "backup":
            took = (status.get("backup") or {}).get("seconds")
            if took:  # the last backup's length as the estimate
                eta = max(0.0, float(took) - (now - float(job["since"])))
        elif done and total:
            eta = (now - float(job["since"])) * (total - done) / done
        out.append({"name": name, "done": done, "total": total, "since": job.get("since"),
                    "eta_s": eta})
    waiting = int((status.get("daemon") or {}).get("queue") or 0)
    if waiting and not jobs.keys() & {"rescan", "scan", "ingest"}:  # those count the files
        out.append({"name": "ingest", "done": None, "total": None,
                    "eta_s": _eta(waiting, samples), "waiting": waiting})
    return out


def _eta(waiting: int, samples: list[dict[str, Any]]) -> float | None:
    """Seconds until `waiting` files are indexed at the last five minutes' rate (None when
    nothing was indexed in them)."""
    if len(samples) < 2:
        return None
    last = samples[-1]
    first = next((s for s in samples if last["t"] - s["t"] <= 300.0), samples[0])
    span = last["t"] - first["t"]
    done = last.get("processed", 0) - first.get("processed", 0)
    return waiting * span / done if span > 0 and done > 0 else None

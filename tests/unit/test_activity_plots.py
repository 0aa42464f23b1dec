"""The daemon's last hour drawn: a bounded ring of samples, the series made from it, the
charts, and the long jobs' progress with an estimate (pure logic on a fixed history)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from psirag_kb.service.metrics import Metrics
from psirag_kb.serving.activity import Activity, counters, progress, series
from psirag_kb.web.plots import chart, duration


def history(n: int = 7, step: float = 10.0) -> list[dict[str, Any]]:
    """Samples `step` apart: 50 chunks a sample, a queue of 0-3, 4 queries of 0.2 s each a
    sample, /api/query 6 requests a sample and /healthz 1."""
    return [{"t": 1000.0 + i * step, "chunks": 50 * i, "files": i, "writer_queue": i % 4,
             "watcher_queue": 0, "processed": 2 * i, "queries": 4.0 * i, "query_s": 0.8 * i,
             "routes": {"/api/query": 6.0 * i, "/healthz": 1.0 * i}} for i in range(n)]


def test_the_ring_is_bounded_and_samples_the_state() -> None:
    clock = iter(range(10_000))
    state = {"open": True, "chunks_written": 5, "writer_queue": 2, "counters": {"queries": 1.0}}
    activity = Activity(lambda: state, sample_s=10, window_s=60, clock=lambda: next(clock))
    for _ in range(50):
        activity.sample()
    kept = activity.history()
    assert len(kept) == 7 and kept[-1]["t"] == 49 and kept[0]["t"] == 43
    assert kept[-1]["chunks"] == 5 and kept[-1]["writer_queue"] == 2 and kept[-1]["queries"] == 1
    activity.read = lambda: {"open": False}
    activity.sample()
    assert len(activity.history()) == 7 and activity.history()[-1]["t"] == 49


def test_series_from_a_fixed_history() -> None:
    drawn = series(history())
    assert [v for _, v in drawn["ingest"]] == [5.0] * 6  # 50 chunks in 10 s
    assert [round(v, 6) for _, v in drawn["latency_ms"]] == [200.0] * 6
    assert [v for _, v in drawn["writer_queue"]] == [1.0, 2.0, 3.0, 0.0, 1.0, 2.0]
    assert list(drawn["routes"]) == ["/api/query", "/healthz"]
    assert [v for _, v in drawn["routes"]["/api/query"]] == [36.0] * 6  # a minute's worth


def test_charts_draw_the_series_and_say_them() -> None:
    drawn = series(history())
    svg = str(chart("Ingest", {"chunks/s": drawn["ingest"]}, 1060.0, "chunks/s"))
    assert 'aria-label="Ingest, last hour. Peak 5 chunks/s. chunks/s: now 5 chunks/s"' in svg
    points = re.findall(r'points="([^"]+)"', svg)
    assert len(points) == 1 and len(points[0].split()) == 6
    ys = {p.split(",")[1] for p in points[0].split()}
    assert ys == {"18.0"}  # the peak at the top of the plot
    gaps = str(chart("Latency", {"mean": [(1000.0, 1.0), (1010.0, None), (1020.0, 3.0),
                                          (1030.0, 2.0)]}, 1060.0, "ms"))
    assert gaps.count("<circle") == 1 and gaps.count("<polyline") == 1
    empty = str(chart("Writer queue", {"tasks": []}, 1060.0))
    assert "No data yet." in empty and "<polyline" not in empty
    routes = str(chart("<b>", {"/x<script>": drawn["routes"]["/api/query"]}, 1060.0))
    assert "<script" not in routes and "<b>" not in routes
    old = str(chart("Ingest", {"c": [(1.0, 9.0), (1050.0, 1.0)]}, 5000.0))
    assert "Peak 0" in old  # what is older than an hour is not drawn


def test_progress_of_long_jobs_with_estimates() -> None:
    status = {"reembed": {"state": "running", "model": "m", "done": 30, "total": 120,
                          "eta_s": 90.0},
              "abstracts": {"running": True, "done": 5, "total": 10, "eta_s": 4.0},
              "backup": {"seconds": 100.0}, "daemon": {"queue": 12}}
    jobs = {"backup": {"since": 1040.0}, "rescan": {"since": 1000.0, "done": 20, "total": 100}}
    shown = {j["name"]: j for j in progress(status, jobs, history(), 1060.0)}
    assert shown["reembed to m"]["done"] == 30 and shown["reembed to m"]["eta_s"] == 90.0
    assert shown["abstracts"]["total"] == 10
    assert shown["backup"]["eta_s"] == 80.0 and shown["backup"]["total"] is None
    assert shown["rescan"]["eta_s"] == 240.0  # 20 of 100 in 60 s
    assert "ingest" not in shown  # the rescan is what fills the queue
    ingest = progress({"daemon": {"queue": 12}}, {}, history(), 1060.0)
    assert ingest == [{"name": "ingest", "done": None, "total": None, "eta_s": 60.0,
                       "waiting": 12}]  # 2 files each 10 s
    assert progress({}, {}, [], 0.0) == []
    assert duration(None) == "?" and duration(45) == "45 s" and duration(600) == "10 min"
    assert duration(7500) == "2 h 5 min"


def test_tracked_and_running_jobs() -> None:
    activity = Activity(lambda: {}, clock=lambda: 5.0)
    seen: list[tuple[int, int]] = []
    report = activity.tracked("rescan", lambda done, total, _: seen.append((done, total)))
    report(3, 10, "a")
    assert activity.running_jobs() == {"rescan": {"since": 5.0, "done": 3, "total": 10}}
    report(10, 10, "b")
    assert activity.running_jobs() == {} and seen == [(3, 10), (10, 10)]
    with activity.running("backup"):
        assert "backup" in activity.running_jobs()
    assert activity.running_jobs() == {}


def test_a_tracked_block_is_shown_until_it_ends_however_it_ends() -> None:
    activity = Activity(lambda: {}, clock=lambda: 5.0)
    with pytest.raises(RuntimeError), activity.tracking("scan", lambda *_: None) as report:
        report(3, 10, "a")
        assert activity.running_jobs() == {"scan": {"since": 5.0, "done": 3, "total": 10}}
        raise RuntimeError("the daemon stops half-way")
    assert activity.running_jobs() == {}
    status = {"daemon": {"queue": 2}}  # the folder's scan is one queued item: its files count
    jobs = {"scan": {"since": 1000.0, "done": 50, "total": 700}}
    shown = progress(status, jobs, history(), 1060.0)
    assert [(j["name"], j["done"], j["total"]) for j in shown] == [("scan", 50, 700)]
    assert shown[0]["eta_s"] == 780.0  # 50 of 700 in 60 s


def test_counters_read_a_registry() -> None:
    metrics = Metrics()
    metrics.observe_query("hybrid", 0.25)
    metrics.observe_query("sparse", 0.5)
    metrics.requests.labels("/api/query", "POST", "200").inc(3)
    metrics.requests.labels("/api/query", "POST", "400").inc()
    read = counters(metrics)
    assert read["queries"] == 2 and read["query_s"] == 0.75
    assert read["routes"] == {"/api/query": 4.0}
    assert counters(None)["routes"] == {} and isinstance(metrics.registry, CollectorRegistry)

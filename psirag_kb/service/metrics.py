"""Prometheus metrics of one API server: request counters and latencies measured as requests
pass, and the knowledge base's current state read at scrape time (one registry per server)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
OTHER = "other"
"""The route label of a path no route serves (so a scan of random paths adds one series)."""


def route_of(scope: Scope, key: str) -> str:
    """The route pattern a request was served by (`/api/tree/{node_id:signed}`: bounded label
    values, never the raw path), "/mcp" for the MCP mount, or "other"."""
    entry = scope.get(key)
    if entry is not None:
        return entry.path
    raw = scope.get("raw_path") or scope["path"].encode()
    path = raw.split(b"?", 1)[0]
    return "/mcp" if path == b"/mcp" or path.startswith(b"/mcp/") else OTHER


class StateCollector(Collector):
    """Gauges and counters read from `read()` at each scrape (the daemon's current state)."""

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self.read = read

    def describe(self) -> list[Metric]:
        """Nothing up front: the registry must not read the state when it is built."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The state now, as metric families."""
        state = self.read()
        up = GaugeMetricFamily("psirag_up", "1 while the stores are open and serving")
        up.add_metric([], 1.0 if state.get("open") else 0.0)
        yield up
        if not state.get("open"):
            return
        files = GaugeMetricFamily("psirag_files", "Indexed files by state", labels=["state"])
        for name, count in sorted(state["files"].items()):
            files.add_metric([name], count)
        yield files
        for name, text, value in (
            ("psirag_chunks", "Chunks in the knowledge base", state["chunks"]),
            ("psirag_generation", "DuckDB generation (commits that changed the chunks)",
             state["generation"]),
            ("psirag_abstracts_dirty", "Tree nodes whose abstract waits for regeneration",
             state["dirty"]),
            ("psirag_writer_queue", "Write tasks waiting or running on the writer thread",
             state["writer_queue"]),
            ("psirag_watcher_queue", "File events waiting to be indexed", state["watcher_queue"]),
        ):
            gauge = GaugeMetricFamily(name, text)
            gauge.add_metric([], value)
            yield gauge
        indexes = GaugeMetricFamily(
            "psirag_index_ok", "1 when a derived index is current, 0 while stale, missing or "
            "being rebuilt", labels=["index", "state"])
        for name, shown in sorted(state["indexes"].items()):
            indexes.add_metric([name, shown], 1.0 if shown == "ok" else 0.0)
        yield indexes
        for name, text, value in (
            ("psirag_ingest_files", "Files whose change was committed by this process",
             state["files_written"]),
            ("psirag_ingest_chunks", "Chunks added by this process (their rate is the ingest "
             "throughput)", state["chunks_written"]),
        ):
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], value)
            yield counter
        requests = CounterMetricFamily("psirag_llm_requests", "Chats asked of each Ollama host",
                                       labels=["host"])
        failures = CounterMetricFamily("psirag_llm_failures", "Chats an Ollama host failed",
                                       labels=["host"])
        for host, (asked, failed) in sorted(state["llm"].items()):
            requests.add_metric([host], asked)
            failures.add_metric([host], failed)
        yield requests
        yield failures
        backup = state.get("backup")
        if backup:
            for name, text, value in (
                ("psirag_backup_last_timestamp_seconds", "When the last backup was taken",
                 backup.get("taken")),
                ("psirag_backup_last_bytes", "Size of the last backup", backup.get("bytes")),
                ("psirag_backup_last_generation", "Generation the last backup holds",
                 backup.get("generation")),
            ):
                if value is not None:
                    gauge = GaugeMetricFamily(name, text)
                    gauge.add_metric([], float(value))
                    yield gauge


class Metrics:
    """The registry of one API server: what requests record, and the state collector."""

    def __init__(self, read: Callable[[], dict[str, Any]] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("psirag_http_requests", "HTTP requests by route pattern, method "
                                "and status", ["route", "method", "status"],
                                registry=self.registry)
        self.latency = Histogram("psirag_http_request_seconds", "HTTP request latency by route "
                                 "pattern", ["route"], buckets=LATENCY_BUCKETS,
                                 registry=self.registry)
        self.queries = Histogram("psirag_query_seconds", "Query latency by mode", ["mode"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        if read is not None:
            self.registry.register(StateCollector(read))

    def observe_query(self, mode: str, seconds: float) -> None:
        """Record one answered query."""
        self.queries.labels(mode or "default").observe(seconds)

    def render(self) -> bytes:
        """The text exposition format of every metric now."""
        return generate_latest(self.registry)


class Measured:
    """ASGI middleware: counts each HTTP request by route pattern, method and status, and
    records its latency (until the last byte of the response)."""

    def __init__(self, inner: ASGIApp, metrics: Metrics, key: str) -> None:
        self.inner = inner
        self.metrics = metrics
        self.key = key
        """Where the router leaves the matched route in the request's scope."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in _METHODS else OTHER
        started = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.inner(scope, receive, sending)
        finally:
            route = route_of(scope, self.key)
            self.metrics.requests.labels(route, method, str(status[0])).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)


_METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"})

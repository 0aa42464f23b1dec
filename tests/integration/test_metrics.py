"""/metrics in Prometheus' text format and /api/ready: parsed with Prometheus' own
parser, route patterns as labels, the monitor role, and readiness while an index is rebuilt."""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import api, serving_notes, wait_for
from prometheus_client.parser import text_string_to_metric_families

from psirag_kb.storage.sparse import SparseIndex

NOTES = {
    "birds/heron.md": "Herons stand still in shallow water waiting for fish.\n",
    "fish/pike.md": "Pike wait still in shallow water to ambush smaller fish.\n",
}


def scrape(daemon: Any, token: str | None = None) -> tuple[int, dict[str, Any]]:
    """(status, {(name, labels...): value}) of GET /metrics, parsed by prometheus_client."""
    request = urllib.request.Request(daemon.api.url + "/metrics")
    request.add_header("Authorization", f"Bearer {token or daemon.api.token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            text = response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, {}
    samples: dict[Any, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, *sorted(sample.labels.items()))] = sample.value
    return 200, samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, *sorted(labels.items())))


def test_metrics_parse_and_count_requests_by_route_pattern(tmp_path: Path) -> None:
    def backups(config: Any, _docs: Path) -> Any:
        return config.replace("backup", dir=str(tmp_path / "backups"), every_hours=0.0)

    with serving_notes(tmp_path, NOTES, "still shallow", backups) as (daemon, docs):
        for chunk in (123456, 654321):  # two raw paths, one route
            assert api(daemon, "GET", f"/api/chunk/{chunk}")[0] == 404
        assert api(daemon, "GET", "/no/such/thing")[0] == 404
        status, found = api(daemon, "POST", "/api/query", {"text": "pike", "mode": "dense"})
        assert status == 200 and found["results"]
        status, samples = scrape(daemon)
        assert status == 200
        assert value(samples, "psirag_files", state="indexed") == 2
        assert value(samples, "psirag_chunks") == 2
        assert value(samples, "psirag_up") == 1
        assert value(samples, "psirag_index_ok", index="bm25", state="ok") == 1
        assert value(samples, "psirag_index_ok", index="tree", state="ok") == 1
        assert value(samples, "psirag_ingest_files_total") == 2
        assert value(samples, "psirag_ingest_chunks_total") == 2
        assert value(samples, "psirag_http_requests_total", route="/api/chunk/{chunk_id:int}",
                     method="GET", status="404") == 2
        assert value(samples, "psirag_http_requests_total", route="other", method="GET",
                     status="404") == 1
        assert not any("123456" in str(key) for key in samples)  # never the raw path
        assert value(samples, "psirag_query_seconds_count", mode="dense") == 1
        assert value(samples, "psirag_query_seconds_count", mode="sparse") >= 1  # the fixture's
        assert value(samples, "psirag_http_request_seconds_count",
                     route="/api/query") >= 2
        assert value(samples, "psirag_writer_queue") is not None
        assert value(samples, "psirag_backup_last_timestamp_seconds") is None  # none taken
        status, taken = api(daemon, "POST", "/api/backup", {"name": "b"})
        assert status == 200, taken
        _, samples = scrape(daemon)
        assert value(samples, "psirag_backup_last_bytes") == taken["bytes"]
        assert value(samples, "psirag_backup_last_generation") == taken["generation"]


def test_a_monitor_reads_metrics_and_health_and_nothing_else(tmp_path: Path) -> None:
    with serving_notes(tmp_path, NOTES, "still shallow") as (daemon, docs):
        people = daemon.people
        monitor = people.add("prom", "monitor")
        reader = people.add("ann", "reader", [str(docs)])
        assert scrape(daemon, monitor)[0] == 200
        assert scrape(daemon, reader)[0] == 403
        assert api(daemon, "GET", "/api/health", token=monitor)[0] == 200
        assert api(daemon, "GET", "/api/ready", token=monitor)[0] == 200
        for method, path, body in (("GET", "/api/status", None), ("GET", "/api/tree", None),
                                   ("POST", "/api/query", {"text": "pike"}),
                                   ("GET", "/api/chunk/1", None),
                                   ("POST", "/api/backup", {"name": "x"})):
            status, answer = api(daemon, method, path, body, token=monitor)
            assert status == 403 and "monitor" in answer["error"], (path, answer)
        request = urllib.request.Request(daemon.api.url + "/mcp", data=b"{}", method="POST")
        request.add_header("Authorization", f"Bearer {monitor}")
        request.add_header("Content-Type", "application/json")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403
        with pytest.raises(Exception, match="monitor"):
            people.add("prom2", "monitor", [str(docs)])


def test_ready_is_503_while_an_index_is_rebuilt(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with serving_notes(tmp_path, NOTES, "still shallow") as (daemon, docs):
        assert api(daemon, "GET", "/api/ready", token="") == (200, {"ready": True,
                                                                    "state": "serving"})
        release = threading.Event()
        rebuilding = threading.Event()
        original, original_apply = SparseIndex.rebuild, SparseIndex.apply

        def disk_full(self, *args: Any, **kwargs: Any) -> None:
            raise OSError(28, "No space left on device")

        def slow_rebuild(self, *args: Any, **kwargs: Any) -> None:
            rebuilding.set()
            release.wait(60)
            original(self, *args, **kwargs)

        monkeypatch.setattr(SparseIndex, "apply", disk_full)  # the next change misses BM25
        monkeypatch.setattr(SparseIndex, "rebuild", slow_rebuild)
        (docs / "birds" / "tern.md").write_text("Terns fly from pole to pole every year.\n")
        wait_for(rebuilding.is_set, 30, "the BM25 rebuild")
        status, body = api(daemon, "GET", "/api/ready")
        assert status == 503 and body["ready"] is False
        assert any("bm25" in reason for reason in body["reasons"]), body
        status, body = api(daemon, "GET", "/api/ready", token="")  # a stranger: the word
        assert status == 503 and body == {"ready": False, "state": "rebuilding"}
        assert api(daemon, "GET", "/api/health", token="")[0] == 200  # liveness stays 200
        _, samples = scrape(daemon)
        assert value(samples, "psirag_index_ok", index="bm25", state="stale") == 0
        monkeypatch.setattr(SparseIndex, "apply", original_apply)
        release.set()
        wait_for(lambda: api(daemon, "GET", "/api/ready", token="")[0] == 200, 30,
                 "ready again")
        _, samples = scrape(daemon)
        assert value(samples, "psirag_index_ok", index="bm25", state="ok") == 1

"""A watched folder's start-up scan and a large set of new files report their progress in
files (done of total) to the status page, across the watcher's batches, and leave it once they
end; real daemon, MiniLM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon_helpers import wait_for, watching

from psirag_kb.ingest import ingestion
from psirag_kb.service import watcher as watcher_module
from psirag_kb.service.daemon import Daemon
from psirag_kb.serving.activity import Activity


def write(folder: Path, prefix: str, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"{prefix}-{i}.md").write_text(
            f"# {prefix} note {i}\n\nOrchard entry {i} of {prefix}: {i * 7} crates picked.\n",
            encoding="utf-8")


def test_the_scan_and_a_burst_of_files_show_files_done_of_total(
        config: Any, minilm: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(ingestion, "BATCH_FILES", 4)  # several committed batches per call
    monkeypatch.setattr(watcher_module, "BATCH_PATHS", 8)
    reports: list[tuple[str, int, int]] = []
    tracked = Activity.tracked

    def recording(self: Activity, job: str, inner: Any) -> Any:
        report = tracked(self, job, inner)

        def both(done: int, total: int, current: str) -> None:
            reports.append((job, done, total))
            report(done, total, current)

        return both

    monkeypatch.setattr(Activity, "tracked", recording)
    folder = tmp_path / "notes"
    write(folder, "first", 12)
    daemon = Daemon(watching(config, folder, 0.2), embedder=minilm)
    daemon.start()
    try:
        wait_for(lambda: ("scan", 12, 12) in reports, 120, what="the start-up scan")
        scan = [(d, t) for job, d, t in reports if job == "scan"]
        assert scan[-1] == (12, 12) and all(t == 12 for _, t in scan)
        assert [d for d, _ in scan] == sorted(d for d, _ in scan) and len(scan) >= 2
        wait_for(lambda: daemon.activity.running_jobs() == {}, 60, what="the scan to leave status")

        outside = tmp_path / "arrived"  # a set too large for the watcher's own thread
        write(outside, "burst", 20)
        daemon.watcher._hand_over([], sorted(outside.iterdir()), [])
        wait_for(lambda: ("ingest", 20, 20) in reports, 120, what="the burst")
        burst = [(d, t) for job, d, t in reports if job == "ingest"]
        assert [d for d, _ in burst] == [4, 8, 12, 16, 20] and {t for _, t in burst} == {20}
        wait_for(lambda: daemon.activity.running_jobs() == {}, 60, what="the burst to leave status")
    finally:
        daemon.stop()

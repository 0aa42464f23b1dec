"""The daemon as a separate process: signals, the data directory lock, the real model end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import stop_process, wait_for

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 30.0
"""How long a daemon subprocess may take to show a change."""
FAKE_RUNNER = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from conftest import FakeEmbedder
from psirag_kb.config import load_config
from psirag_kb.service.daemon import run_daemon
config = load_config(Path(sys.argv[1]))
sys.exit(run_daemon(config, embedder=FakeEmbedder()))
"""


def write_config(tmp_path: Path, docs: Path, quiet: float = 0.3) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[storage]\ndata_dir = "{tmp_path / "data"}"\n'
        f'[watch]\nfolders = ["{docs}"]\nquiet_period_s = {quiet}\n'
        '[api]\nport = 0\n'
    )
    return path


TOKENS: dict[str, str] = {}
"""Each running daemon's generated API token, by URL."""


def daemon_url(data_dir: Path) -> str | None:
    try:
        url = json.loads((data_dir / "daemon.json").read_text())["url"]
    except (OSError, ValueError, KeyError):
        return None
    TOKENS[url] = (data_dir / "api.token").read_text().strip()
    return url


def post_query(url: str, text: str) -> list[dict[str, Any]]:
    request = urllib.request.Request(url + "/api/query", method="POST",
                                     data=json.dumps({"text": text, "k": 10}).encode(),
                                     headers={"Authorization": f"Bearer {TOKENS[url]}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["results"]


class Process:
    """A daemon subprocess that is always stopped in teardown."""

    def __init__(self, args: list[str], data_dir: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
        self.data_dir = data_dir
        self.proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def url(self, timeout: float = 60.0) -> str:
        def ready() -> str | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited: {self.proc.communicate()[1][-2000:]}")
            return daemon_url(self.data_dir)

        return wait_for(ready, timeout)

    def stop(self) -> None:
        stop_process(self.proc, 15)


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


def fake_daemon(config: Path, data_dir: Path, started: list[Process]) -> Process:
    runner = FAKE_RUNNER.format(tests=str(ROOT / "tests"))
    process = Process([sys.executable, "-c", runner, str(config)], data_dir)
    started.append(process)
    return process


def test_sigterm_stops_quickly_and_a_second_daemon_is_refused(tmp_path: Path,
                                                              processes: list[Process]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Narwhals have a long tusk.\n")
    config = write_config(tmp_path, docs)
    first = fake_daemon(config, tmp_path / "data", processes)
    url = first.url()
    wait_for(lambda: post_query(url, "narwhals tusk"), WAIT_S)
    second = fake_daemon(config, tmp_path / "data", processes)
    assert second.proc.wait(60) == 1
    assert f"pid {first.proc.pid}" in second.proc.communicate()[1]
    (docs / "b.md").write_text("Belugas sing.\n")
    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(WAIT_S) == 0  # a guard against a hang, not a measure of speed
    assert not (tmp_path / "data" / "daemon.json").exists()
    assert "daemon stopped" in (tmp_path / "data" / "daemon.log").read_text()


def test_stale_lock_of_a_dead_daemon_is_taken_over(tmp_path: Path,
                                                    processes: list[Process]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    config = write_config(tmp_path, docs)
    first = fake_daemon(config, tmp_path / "data", processes)
    first.url()
    first.proc.kill()
    first.proc.wait()
    assert (tmp_path / "data" / "daemon.lock").exists()
    second = fake_daemon(config, tmp_path / "data", processes)
    wait_for(lambda: json.loads((tmp_path / "data" / "daemon.json").read_text())["pid"]
             == second.proc.pid, WAIT_S)


@pytest.mark.slow
def test_real_model_end_to_end_through_the_cli(tmp_path: Path,
                                               processes: list[Process]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    config = write_config(tmp_path, docs, quiet=0.5)
    process = Process([sys.executable, "-m", "psirag_kb", "--config", str(config), "daemon"],
                      tmp_path / "data")
    processes.append(process)
    url = process.url(120)
    note = docs / "volcano.md"
    note.write_text("Mount Etna is an active stratovolcano on the east coast of Sicily.\n")

    def top(text: str) -> list[str]:
        return [r["source"] for r in post_query(url, text)]

    wait_for(lambda: str(note) in top("Which volcano is in Sicily?"), WAIT_S)
    tmp = docs / "volcano.md.tmp"
    # a title: no chunk's header is the file name, so the rename below keeps every vector
    tmp.write_text("# Great Barrier Reef\n\n"
                   "The Great Barrier Reef lies off the coast of Queensland, Australia.\n")
    os.replace(tmp, note)
    wait_for(lambda: any("Queensland" in r["text"] for r in post_query(url, "coral reef")), WAIT_S)
    assert not any("Etna" in r["text"] for r in post_query(url, "volcano Sicily"))
    out = subprocess.run(
        [sys.executable, "-m", "psirag_kb", "--config", str(config), "status", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    status = json.loads(out.stdout)
    assert status["daemon"]["pid"] == process.proc.pid and status["files"]["indexed"] == 1
    before = {r["chunk_id"] for r in post_query(url, "coral reef")}
    moved = docs / "reef.md"
    os.rename(note, moved)
    wait_for(lambda: str(moved) in top("coral reef Queensland"), WAIT_S)
    assert {r["chunk_id"] for r in post_query(url, "coral reef")} == before  # leaves kept
    moved.unlink()
    wait_for(lambda: not post_query(url, "coral reef"), WAIT_S)
    process.proc.send_signal(signal.SIGINT)
    assert process.proc.wait(WAIT_S) == 0  # a guard against a hang, not a measure of speed
    # changes made while the daemon is down are applied when it starts again
    late = docs / "glacier.md"
    late.write_text("The Aletsch Glacier is the largest glacier in the Alps.\n")
    again = Process([sys.executable, "-m", "psirag_kb", "--config", str(config), "daemon"],
                    tmp_path / "data")
    processes.append(again)
    url = again.url(120)
    wait_for(lambda: str(late) in top("largest glacier in the Alps"), WAIT_S)
    again.proc.send_signal(signal.SIGTERM)
    assert again.proc.wait(WAIT_S) == 0  # a guard against a hang

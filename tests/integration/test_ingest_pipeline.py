"""The writer only commits ready batches: an edit is found while a large ingest is embedding, and
a daemon stopped in the middle of a burst ends promptly and loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from daemon_helpers import stop_process, wait_for

from psirag_kb.config import Config
from psirag_kb.ingest.report import IngestReport
from psirag_kb.kb import KnowledgeBase

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("river castle engine violin glacier pepper orbit harbour lantern meadow copper falcon "
         "quarry saddle tundra velvet walnut yeast zephyr anchor bramble cinder dune ember "
         "forest granite hollow island jasmine kettle lemon marble nectar olive pebble").split()


def prose(rng: np.random.Generator, sentences: int) -> str:
    """Sentences of plain words, about 12 tokens each."""
    return " ".join(" ".join(rng.choice(WORDS, 11)).capitalize() + "." for _ in range(sentences))


class HeldEmbedder:
    """The real model; a batch holding `marker` waits at the model's door until released."""

    def __init__(self, inner: Any, marker: str) -> None:
        self.inner, self.marker = inner, marker
        self.name, self.dim = inner.name, inner.dim
        self.holding = threading.Event()
        self.release = threading.Event()

    def embed(self, texts: list[str]) -> np.ndarray:
        if any(self.marker in text for text in texts):
            self.holding.set()
            self.release.wait(300)
        return self.inner.embed(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)


def test_an_edit_is_committed_and_found_while_a_large_ingest_is_embedding(
        tmp_path: Path, minilm: Any) -> None:
    docs = tmp_path / "docs"
    (docs / "burst").mkdir(parents=True)
    note = docs / "note.md"
    note.write_text("The lighthouse keeper painted the door blue.\n")
    rng = np.random.default_rng(3)
    for number in range(40):
        (docs / "burst" / f"b{number:03d}.md").write_text(
            f"Burstmarker file {number}. {prose(rng, 6)}\n")
    embedder = HeldEmbedder(minilm, "Burstmarker")
    kb = KnowledgeBase(Config().with_data_dir(tmp_path / "data"), embedder=embedder)
    results: dict[str, Any] = {}

    def run(name: str, paths: list[Path]) -> None:
        try:
            results[name] = kb.ingest(paths)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            results[name] = exc

    try:
        kb.ingest([note])
        burst = threading.Thread(target=run, args=("burst", [docs / "burst"]), daemon=True)
        burst.start()
        wait_for(embedder.holding.is_set, 120, "the large ingest reached the embedder")
        note.write_text("The lighthouse keeper painted the door crimson with zebra stripes.\n")
        edit = threading.Thread(target=run, args=("edit", [note]), daemon=True)
        edit.start()
        edit.join(60)  # today it waits behind the large ingest, which waits for the release
        assert not edit.is_alive(), "the edit waited for the large ingest"
        assert isinstance(results["edit"], IngestReport) and results["edit"].updated == 1
        top = kb.query("door painted crimson with zebra stripes", mode="hybrid", k=3)["results"]
        assert top[0]["source"] == str(note) and "zebra" in top[0]["text"]
        assert burst.is_alive() and "burst" not in results  # still embedding its first batch
    finally:
        embedder.release.set()
    burst.join(300)
    assert not burst.is_alive()
    report = results["burst"]
    assert isinstance(report, IngestReport), report
    assert report.added == 40 and report.failed == 0
    found = kb.query("Burstmarker file 17", mode="sparse", k=40)["results"]
    assert str(docs / "burst" / "b017.md") in {r["source"] for r in found}
    kb.close()


def test_a_batch_read_before_a_newer_commit_is_read_again_not_applied_over_it(
        tmp_path: Path, minilm: Any) -> None:
    note = tmp_path / "note.md"
    note.write_text("The ferry leaves the harbour at noon.\n")
    embedder = HeldEmbedder(minilm, "Slowversion")
    kb = KnowledgeBase(Config().with_data_dir(tmp_path / "data"), embedder=embedder)
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            results[name] = kb.ingest([note])
        except BaseException as exc:  # noqa: BLE001 - asserted below
            results[name] = exc

    try:
        kb.ingest([note])
        note.write_text("Slowversion: the ferry leaves the harbour at dawn.\n")
        first = threading.Thread(target=run, args=("first",), daemon=True)
        first.start()
        wait_for(embedder.holding.is_set, 60, "the first ingest read the file")
        note.write_text("The ferry leaves the harbour at midnight with lanterns lit.\n")
        second = threading.Thread(target=run, args=("second",), daemon=True)
        second.start()
        second.join(60)
        assert not second.is_alive() and results["second"].updated == 1
    finally:
        embedder.release.set()
    first.join(120)
    assert isinstance(results["first"], IngestReport), results["first"]
    texts = [text for (text,) in kb.stores.store.db.execute("SELECT text FROM chunks").fetchall()]
    assert texts == ["The ferry leaves the harbour at midnight with lanterns lit."]
    assert kb.stores.sparse.count() == kb.stores.dense.count == 1
    kb.close()


# -- a daemon process stopped mid-burst ---------------------------------------------------------


def _config(tmp_path: Path, docs: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[storage]\ndata_dir = "{tmp_path / "data"}"\n'
        f'[watch]\nfolders = ["{docs}"]\nquiet_period_s = 0.3\n'
        '[api]\nport = 0\n'
    )
    return path


def _daemon(config: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    return subprocess.Popen([sys.executable, "-m", "psirag_kb", "--config", str(config),
                             "daemon"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _api(data: Path, path: str, body: Any = None) -> dict[str, Any]:
    url = json.loads((data / "daemon.json").read_text())["url"]
    token = (data / "api.token").read_text().strip()
    request = urllib.request.Request(
        url + path, method="POST" if body is not None else "GET",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _indexed(data: Path) -> int:
    try:
        return int(_api(data, "/api/status")["files"]["indexed"])
    except (OSError, ValueError, KeyError):
        return 0


def _serving(process: subprocess.Popen, data: Path) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"daemon exited: {process.communicate()[1][-2000:]}")
    return (data / "daemon.json").exists()


@pytest.mark.slow
def test_sigterm_in_the_middle_of_a_burst_ends_within_10_s_and_loses_nothing(
        tmp_path: Path) -> None:
    docs, data = tmp_path / "docs", tmp_path / "data"
    docs.mkdir()
    config = _config(tmp_path, docs)
    process = _daemon(config)
    try:
        wait_for(lambda: _serving(process, data), 120, "the daemon serves")
        rng = np.random.default_rng(5)
        files = 64  # about 20 chunks each: today one batch, 30 s or more on two cores
        texts = [f"Document d{number:03d} holds the word tok{number:03d}q. " + prose(rng, 160)
                 + "\n" for number in range(files)]
        for number, text in enumerate(texts):  # written at once: one burst, on a busy machine too
            (docs / f"d{number:03d}.md").write_text(text)
        wait_for(lambda: _api(data, "/api/status")["daemon"]["queue"] > 0, 60, "busy")
        busy = time.monotonic()  # mid-burst: after a first commit, or 8 s into the burst
        wait_for(lambda: _indexed(data) or time.monotonic() - busy > 8, 300, "mid-burst")
        committed = _indexed(data)
        assert committed < files
        process.send_signal(signal.SIGTERM)
        try:  # the behaviour under test: the daemon ends within 10 s
            status = process.wait(10)
        except subprocess.TimeoutExpired:
            raise AssertionError("the daemon did not end within 10 s of SIGTERM") from None
        assert status == 0, process.communicate()[1][-2000:]
        with KnowledgeBase(Config().with_data_dir(data)) as kb:  # no model needed to count
            assert kb.status()["files"]["indexed"] >= committed  # committed batches stayed
        process = _daemon(config)  # the restart's reconciliation picks up the rest
        wait_for(lambda: _serving(process, data), 120, "the daemon serves again")
        wait_for(lambda: _indexed(data) == files, 600, "every file indexed after the restart")
        for number in range(files):
            found = _api(data, "/api/query", {"text": f"tok{number:03d}q", "mode": "sparse",
                                              "k": 3})["results"]
            assert [r["source"] for r in found][:1] == [str(docs / f"d{number:03d}.md")]
        status = _api(data, "/api/status")
        assert status["files"]["failed"] == 0 and status["problems"] == []
    finally:
        stop_process(process)

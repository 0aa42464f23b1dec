"""Twenty query clients against the real daemon while it ingests, edits and deletes files.

The short variant of `benchmarks/load.py` (which measures latency and memory): here every
request must succeed and, once the daemon is idle, the index must hold exactly the folder.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import wait_for

from psirag_kb.config import Config
from psirag_kb.service.daemon import Daemon

CLIENTS = 20
SECONDS = 10.0
TOPICS = ["glacier", "violin", "harbour", "orbit", "pepper", "lantern", "falcon", "quarry"]


TOKEN = "load-test-token-" + "l" * 32


def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def note(n: int, version: int = 0) -> str:
    topic = TOPICS[n % len(TOPICS)]
    return (f"Note {n} (marker{n}v{version}) is about the {topic}. The {topic} was observed "
            f"on day {n} and again on day {n + version + 1}, which the observer wrote down.\n")


@pytest.fixture
def daemon(config: Config, tmp_path: Path, minilm) -> Iterator[Daemon]:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(40):
        (docs / f"base{n:03d}.md").write_text(note(n), encoding="utf-8")
    config = config.replace("watch", folders=[str(docs)], quiet_period_s=0.3)
    running = Daemon(config.replace("api", port=0, token=TOKEN), embedder=minilm)
    running.start()
    yield running
    running.stop()


def idle(daemon: Daemon, expected: int) -> bool:
    status = daemon.status()
    return status["daemon"]["queue"] == 0 and status["files"]["indexed"] == expected


def test_twenty_clients_during_a_burst_of_changes(daemon: Daemon) -> None:
    docs = daemon.folders[0]
    wait_for(lambda: idle(daemon, 40), timeout=120)
    url = daemon.api.url + "/api/query"
    outcomes: list[tuple[int, str]] = []
    mutex = threading.Lock()
    stop = threading.Event()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            mode = rng.choice(["hybrid", "tree", "dense", "sparse"])
            status, body = post(url, {"text": f"the {rng.choice(TOPICS)}", "mode": mode})
            problem = "" if status == 200 and body.get("results") else str(body)[:200]
            with mutex:
                outcomes.append((status, problem))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    for n in range(40, 140):  # a burst of new files
        (docs / f"burst{n:03d}.md").write_text(note(n), encoding="utf-8")
    for n in range(0, 20):  # edits
        (docs / f"base{n:03d}.md").write_text(note(n, 1), encoding="utf-8")
    for n in range(20, 30):  # deletes
        (docs / f"base{n:03d}.md").unlink()
    time.sleep(max(0.0, SECONDS - (time.monotonic() - started)))
    stop.set()
    for thread in threads:
        thread.join()

    assert len(outcomes) > CLIENTS
    failures = [o for o in outcomes if o[0] != 200 or o[1]]
    assert failures == [], failures[:5]
    wait_for(lambda: idle(daemon, 130), timeout=120)
    for n in [*range(0, 20), *range(30, 40), *range(40, 140, 7)]:
        version = 1 if n < 20 else 0
        _, body = post(url, {"text": f"marker{n}v{version}", "mode": "sparse", "k": 3})
        name = f"{'base' if n < 40 else 'burst'}{n:03d}.md"
        assert body["results"][0]["source"] == str(docs / name)
    for n in [*range(0, 20), *range(20, 30)]:  # superseded and deleted text is gone
        _, body = post(url, {"text": f"marker{n}v0", "mode": "sparse", "k": 3})
        assert all(f"marker{n}v0" not in r["text"] for r in body["results"])
    status = daemon.status()
    assert status["daemon"]["errors"] == []
    assert status["chunks"] == status["tree"]["leaves"]

"""Helpers for tests that drive a running daemon: polling with a deadline, JSON over HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from waiting import wait_until


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    """Poll until the predicate holds; fail at the deadline (saying `what` was awaited): the
    shared `waiting.wait_until` under the name and arguments the daemon tests use."""
    return wait_until(predicate, timeout, message=what)


class AuditTail:
    """The lines a daemon appends to audit.jsonl from now on: `text()` and `lines()`."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "audit.jsonl"
        self.start = self.path.stat().st_size if self.path.exists() else 0

    def text(self) -> str:
        with self.path.open(encoding="utf-8") as handle:
            handle.seek(self.start)
            return handle.read()

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text().splitlines()]


def stop_process(process: subprocess.Popen[Any], wait_s: float = 30.0) -> None:
    """SIGTERM a daemon subprocess still running, then kill it if it has not ended in
    `wait_s`."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def api(daemon: Any, method: str, path: str, body: Any = None,
        token: str | None = None) -> tuple[int, dict[str, Any]]:
    """One JSON request to a daemon's API with its token (unless one is given; "" sends none):
    (status, decoded body), errors included."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(daemon.api.url + path, data=data, method=method)
    token = daemon.api.token if token is None else token
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def watching(config: Any, folder: Path, quiet_s: float) -> Any:
    """`config` with a daemon watching `folder` (files settle after `quiet_s`) and its API on
    a free loopback port."""
    config = config.replace("watch", folders=[str(folder)], quiet_period_s=quiet_s)
    return config.replace("api", port=0)


@contextmanager
def serving_notes(base: Path, notes: dict[str, str], words: str,
                  configure: Any = None) -> Iterator[tuple[Any, Path]]:
    """A daemon (fake embedder, loopback, its generated token) watching `base/docs` with these
    notes, once a sparse query for `words` returns every one of them: status counts a file at
    its DuckDB commit, a moment before BM25 publishes it. `configure(config, docs)` may change
    the config first."""
    import os

    from conftest import FakeEmbedder

    from psirag_kb.config import Config
    from psirag_kb.service.daemon import Daemon

    docs = base / "docs"
    for name, text in notes.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text)
    config = watching(Config().with_data_dir(base / "data"), docs, 0.2).replace(
        "retrieval", fold_copies=False)  # notes from templates: each its own result
    if configure is not None:
        config = configure(config, docs)
    saved = os.environ.pop("PSIRAG_KB_TOKEN", None)
    running = Daemon(config, embedder=FakeEmbedder())
    running.start()
    try:
        wait_for(lambda: len(api(running, "POST", "/api/query", {
            "text": words, "mode": "sparse", "k": 10})[1]["results"]) == len(notes))
        yield running, docs
    finally:
        running.stop()
        if saved is not None:
            os.environ["PSIRAG_KB_TOKEN"] = saved


@contextmanager
def serving_team(base: Path, notes: dict[str, str], grants: dict[str, tuple[str, list[str]]],
                 words: str, embedder: Any, written: bool = False
                 ) -> Iterator[tuple[Any, Path, dict[str, str]]]:
    """A daemon on `embedder` watching `base/docs` with these notes and a person per grant
    (role, folders under docs), once every note is found by a sparse query for `words` and is a
    leaf of the tree (and, when `written`, every abstract is written); yields the daemon, the
    docs folder and each person's token."""
    from psirag_kb.config import Config
    from psirag_kb.people import People
    from psirag_kb.service.daemon import Daemon

    docs = base / "docs"
    for name, text in notes.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text)
    config = watching(Config().with_data_dir(base / "data"), docs, 0.2)
    # the notes are made from templates: each is its own result, not a copy of another
    config = config.replace("api", person_requests_per_minute=100_000).replace(
        "retrieval", fold_copies=False)
    people = People(config.data_dir)
    tokens = {name: people.add(name, role, [str(docs / f) for f in folders])
              for name, (role, folders) in grants.items()}
    running = Daemon(config, embedder=embedder)
    running.start()
    try:
        wait_for(lambda: len(api(running, "POST", "/api/query", {
            "text": words, "mode": "sparse", "k": 100})[1]["results"]) == len(notes), 120)
        wait_for(lambda: api(running, "GET", "/api/tree")[1].get("leaves") == len(notes), 120)
        if written:  # offline keywords in every abstract
            wait_for(lambda: api(running, "GET", "/api/status")[1]["tree"].get("dirty") == 0,
                     120)
        yield running, docs, tokens
    finally:
        running.stop()

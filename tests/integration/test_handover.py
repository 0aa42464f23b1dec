"""A daemon started while an in-process `mcp` or `tui` session holds the data directory takes it
over; the session goes on through the daemon's API; other commands say who holds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from conftest import NOTES
from daemon_helpers import stop_process, wait_for
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from psirag_kb.config import Config, load_config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.handover import connect_session
from psirag_kb.storage.datadir import holder

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
ENV.pop("PSIRAG_KB_URL", None)
ENV.pop("PSIRAG_KB_TOKEN", None)
WAIT_S = 90.0
"""How long a daemon subprocess (the real model) may take to serve."""


@pytest.fixture
def kb_config(tmp_path: Path, minilm) -> Path:
    """A config file over a data directory that already holds the notes."""
    docs = tmp_path / "docs"
    for name, text in NOTES.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text)
    path = tmp_path / "config.toml"
    path.write_text(f'[storage]\ndata_dir = "{tmp_path / "data"}"\n[api]\nport = 0\n')
    with KnowledgeBase(load_config(path), embedder=minilm) as kb:
        assert kb.ingest([docs]).added == len(NOTES)
    return path


class Daemon:
    """`psirag-kb daemon` as a subprocess, stopped in teardown."""

    def __init__(self, config: Path) -> None:
        self.data_dir = load_config(config).data_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "psirag_kb", "--config", str(config), "daemon"],
            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def serving(self) -> bool:
        """Whether it owns the data directory and its daemon.json names it."""
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited: {self.proc.communicate()[1][-2000:]}")
        try:
            info = json.loads((self.data_dir / "daemon.json").read_text())
        except (OSError, ValueError):
            return False
        owner = holder(self.data_dir)
        return info.get("pid") == self.proc.pid and owner is not None and \
            owner.pid == self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for daemon in started:
        daemon.stop()


@contextmanager
def mcp_session(config: Path, stderr: Path) -> Iterator[Callable[..., dict[str, Any]]]:
    """`psirag-kb mcp` over stdio, driven by the SDK's client; yields `call(tool, **args)`."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "psirag_kb", "--config", str(config), "mcp"],
        cwd=str(ROOT), env=ENV)
    with stderr.open("w") as errlog, start_blocking_portal() as portal:
        client = Client(stdio_client(params, errlog=errlog), read_timeout_seconds=120)
        with portal.wrap_async_context_manager(client) as connected:
            def call(name: str, **arguments: Any) -> dict[str, Any]:
                result = portal.call(connected.call_tool, name, arguments)
                assert not result.is_error, (result.content, stderr.read_text())
                return result.structured_content
            yield call


def test_a_daemon_takes_over_from_an_in_process_mcp_server(kb_config, daemons, tmp_path):
    data_dir = load_config(kb_config).data_dir
    with mcp_session(kb_config, tmp_path / "mcp.stderr") as call:
        assert "served_by" not in call("status")["freshness"]  # in-process
        assert holder(data_dir) is not None  # held in-process
        daemon = Daemon(kb_config)
        daemons.append(daemon)
        wait_for(daemon.serving, WAIT_S)  # before the fix: waits for the session for ever
        assert not (data_dir / "takeover.request").exists()
        status = call("status")  # the same MCP session, now through the daemon's API
        assert f"daemon pid {daemon.proc.pid}" in status["freshness"]["served_by"]
        found = call("search", query="Which bird migrates from pole to pole?", k=3)
        assert found["results"][0]["source"].endswith("birds.md")
        daemon.stop()
        # the daemon is gone: the session opens the knowledge base in-process again
        found = call("search", query="sourdough starter yeast", k=3)
        assert found["results"][0]["source"].endswith("bread.rst")
        assert "served_by" not in call("status")["freshness"]


def test_the_tui_client_hands_over_and_goes_on(kb_config, daemons, minilm, monkeypatch):
    monkeypatch.delenv("PSIRAG_KB_URL", raising=False)
    monkeypatch.delenv("PSIRAG_KB_TOKEN", raising=False)
    config: Config = load_config(kb_config)
    client = connect_session(config, "tui", embedder=minilm)  # as `psirag-kb tui` does
    try:
        assert getattr(client, "url", None) is None  # in-process
        assert client.query("arctic tern", k=1)["results"]
        daemon = Daemon(kb_config)
        daemons.append(daemon)
        wait_for(daemon.serving, WAIT_S)
        wait_for(lambda: getattr(client, "url", None), WAIT_S)
        status = client.status()
        assert status["daemon"]["pid"] == daemon.proc.pid
        top = client.query("Which volcano is in Sicily?", k=1)["results"][0]
        assert top["source"].endswith("volcano.txt")
    finally:
        client.close()


def test_other_commands_name_the_session_instead_of_waiting(kb_config, minilm, monkeypatch):
    monkeypatch.delenv("PSIRAG_KB_URL", raising=False)
    config = load_config(kb_config)
    client = connect_session(config, "tui", embedder=minilm)
    try:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "psirag_kb", "--config", str(kb_config), "status"],
                cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("status waited for the in-process session")
        assert done.returncode == 1
        assert f"psirag-kb tui (pid {os.getpid()})" in done.stderr
        assert "psirag-kb daemon" in done.stderr
    finally:
        client.close()

"""A real daemon on loopback: another local process's wrong tokens never lock out the user's own
CLI and MCP, and only the daemon's own origin passes the Origin check."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from daemon_helpers import serving_notes

from psirag_kb.cli import main
from psirag_kb.service.daemon import Daemon

NOTES = {"otter.md": "Otters hold hands while they sleep on the water.\n"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"}}}


@pytest.fixture
def daemon(tmp_path) -> Iterator[Daemon]:
    """Its own daemon: the wrong tokens sent here would lock out 127.0.0.1 in a shared one."""
    with serving_notes(tmp_path, NOTES, "otters") as served:
        yield served[0]


def request(daemon: Daemon, method: str, path: str, headers: dict[str, str],
            body: Any = None) -> int:
    """One request from 127.0.0.1 on a fresh connection; its status."""
    connection = http.client.HTTPConnection("127.0.0.1", daemon.api.server_address[1],
                                            timeout=20)
    try:
        data = json.dumps(body).encode() if body is not None else None
        connection.request(method, path, data, {"Content-Type": "application/json", **headers})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_a_local_process_guessing_tokens_does_not_lock_out_the_user(
        daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    limit = daemon.config.api.auth_failures_per_minute
    wrong = {"Authorization": "Bearer " + "g" * 43}
    codes = [request(daemon, "GET", "/api/status", wrong) for _ in range(limit + 20)]
    assert codes[:limit] == [401] * limit and set(codes[limit:]) == {429}
    assert request(daemon, "GET", "/api/status", {}) == 429  # no token is limited too
    data_dir = ["--data-dir", str(daemon.config.data_dir)]
    assert main([*data_dir, "status", "--json"]) == 0  # the CLI reads api.token
    assert json.loads(capsys.readouterr().out)["daemon"]["pid"] > 0
    assert main([*data_dir, "query", "otters", "--mode", "sparse", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"]
    right = {"Authorization": f"Bearer {daemon.api.token}",
             "Accept": "application/json, text/event-stream"}
    assert request(daemon, "POST", "/mcp", right, INITIALIZE) == 200
    assert request(daemon, "GET", "/api/status", wrong) == 429  # the guesser still is limited


def test_only_the_daemons_own_origin_passes(daemon: Daemon) -> None:
    port = daemon.api.server_address[1]
    other = port + 1 if port < 65535 else port - 1
    auth = {"Authorization": f"Bearer {daemon.api.token}"}
    query = {"text": "otters", "mode": "sparse"}
    for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
        assert request(daemon, "POST", "/api/query", {**auth, "Origin": origin}, query) == 200
    for origin in (f"http://127.0.0.1:{other}", "http://10.0.0.1", f"http://10.0.0.1:{port}",
                   f"http://localhost:{other}", "http://127.0.0.1", "null"):
        assert request(daemon, "POST", "/api/query", {**auth, "Origin": origin}, query) == 403, \
            origin
    assert request(daemon, "GET", "/api/status", auth) == 200

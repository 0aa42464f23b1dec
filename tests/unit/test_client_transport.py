"""The client never lets the token leave in clear text or follow a redirect to another server."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from psirag_kb.cli import main
from psirag_kb.errors import KBError
from psirag_kb.service.client import HTTPClient, check_transport

TOKEN = "transport-test-token-" + "t" * 32


class Recorder(ThreadingHTTPServer):
    """A server that records every request's path and headers and answers like a daemon."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        super().__init__(("127.0.0.1", 0), RecordingHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class RecordingHandler(BaseHTTPRequestHandler):
    """Records the request, answers a health-like JSON object."""

    server: Recorder

    def _answer(self) -> None:
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        body = json.dumps({"ok": True, "pid": 1, "files": {}, "daemon": {"pid": 1},
                           "results": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        """Quiet."""


class Redirector(ThreadingHTTPServer):
    """A server that answers every request with `code` to the same path on `target`."""

    def __init__(self, code: int, target: str) -> None:
        self.code, self.target = code, target
        super().__init__(("127.0.0.1", 0), RedirectingHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class RedirectingHandler(BaseHTTPRequestHandler):
    """Answers with the server's redirect."""

    server: Redirector

    def _answer(self) -> None:
        self.send_response(self.server.code)
        self.send_header("Location", self.server.target + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        """Quiet."""


def _serving(server: ThreadingHTTPServer) -> Iterator[Any]:
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)  # quick stop
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    yield from _serving(Recorder())


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A member's machine with the token in the environment and no server named."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PSIRAG_KB_TOKEN", TOKEN)
    monkeypatch.delenv("PSIRAG_KB_URL", raising=False)
    return tmp_path / "data"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_an_error_and_the_token_never_follows_it(
        recorder: Recorder, env: Path, capsys: pytest.CaptureFixture[str], code: int) -> None:
    for redirector in _serving(Redirector(code, recorder.url)):
        status, err = run(capsys, "--data-dir", str(env), "--server", redirector.url, "status")
        assert status == 1 and f"redirected to {recorder.url}/api/health" in err
        assert f"set the server URL to {recorder.url}" in err
        assert "address failed" in err
    assert recorder.seen == []  # nothing reached the other server, least of all the token


def test_a_redirected_query_is_not_sent_on(recorder: Recorder) -> None:
    for redirector in _serving(Redirector(302, recorder.url)):
        client = HTTPClient(redirector.url, TOKEN, remote=True)
        with pytest.raises(KBError, match="redirected to"):
            client.query("the launch codes")
        with pytest.raises(KBError, match="redirected to"):
            client.status()
        with pytest.raises(KBError) as raised:
            client.chunk(5, neighbours=1)
        assert f"set the server URL to {recorder.url} " in str(raised.value)
    assert recorder.seen == []


def test_the_recorder_sees_a_token_sent_to_it(recorder: Recorder) -> None:
    """The check above can fail: a direct request to the recorder does carry the token."""
    assert HTTPClient(recorder.url, TOKEN, remote=True).status()["pid"] == 1
    assert recorder.seen[0][2]["Authorization"] == f"Bearer {TOKEN}"


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every connection or name look-up attempted, refused on the spot."""
    attempts: list[Any] = []

    def refuse(address: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(address)
        raise ConnectionRefusedError(111, "Connection refused (test)")

    def look_up(host: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(host)
        raise socket.gaierror(-2, "Name or service not known (test)")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", look_up)
    return attempts


@pytest.mark.parametrize("url", ["http://kb.example.invalid:8765", "http://10.255.255.1:8765",
                                 "http://kb.example.invalid", "http://[2001:db8::1]:8765"])
def test_plain_http_beyond_loopback_is_refused_before_connecting(
        env: Path, capsys: pytest.CaptureFixture[str], connections: list[Any],
        url: str) -> None:
    status, err = run(capsys, "--data-dir", str(env), "--server", url, "status")
    assert status == 1 and "clear text" in err and "https://" in err
    assert "--insecure-http" in err and "insecure_http = true" in err
    assert connections == []
    with pytest.raises(KBError, match="clear text"):
        HTTPClient(url, TOKEN, remote=True)
    assert connections == []


def test_the_flag_lets_plain_http_through_with_a_warning(
        env: Path, capsys: pytest.CaptureFixture[str], connections: list[Any],
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        status, err = run(capsys, "--data-dir", str(env), "--insecure-http", "--server",
                          "http://10.255.255.1:8765", "status")
    assert status == 1 and "address failed: cannot reach" in err  # it tried to connect
    assert connections == [("10.255.255.1", 8765)]
    assert "clear text" in caplog.text and "http://10.255.255.1:8765" in caplog.text


def test_the_config_setting_lets_plain_http_through(
        env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        connections: list[Any]) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[api]\nserver = "http://10.255.255.1:8765"\ninsecure_http = true\n')
    status, err = run(capsys, "--config", str(config), "--data-dir", str(env), "status")
    assert status == 1 and "address failed: cannot reach" in err
    assert connections == [("10.255.255.1", 8765)]
    config.write_text('[api]\nserver = "http://10.255.255.1:8765"\n')
    connections.clear()
    status, err = run(capsys, "--config", str(config), "--data-dir", str(env), "status")
    assert status == 1 and "clear text" in err and connections == []


def test_loopback_and_https_need_no_flag() -> None:
    for url in ("http://127.0.0.1:8765", "http://127.9.9.9:1", "http://localhost:8765",
                "http://LOCALHOST", "http://[::1]:8765", "https://kb.example.org",
                "https://10.0.0.1:8443"):
        check_transport(url)
    for url in ("http://kb.example.org", "http://0.0.0.0:8765", "http://192.168.1.5:8765",
                "http://localhost.example.org", "http://127.0.0.1.nip.io"):
        with pytest.raises(KBError, match="clear text"):
            check_transport(url)
        check_transport(url, insecure_http=True)

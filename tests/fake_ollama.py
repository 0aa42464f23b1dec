"""A scripted stand-in for the Ollama HTTP API, and the `fake_ollama` pytest fixture."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

JUNK = "!!! ... ,,, ---"
MODES = ("normal", "missing", "slow", "junk", "error", "close")


@dataclass
class Recorded:
    """One request the fake server received."""

    method: str
    path: str
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def options(self) -> dict[str, Any]:
        """The request's generation options."""
        return dict(self.body.get("options") or {})

    @property
    def text(self) -> str:
        """All prompt text of a chat or generate request, joined by newlines."""
        if "messages" in self.body:
            return "\n".join(str(m.get("content") or "") for m in self.body["messages"])
        return "\n".join(str(self.body.get(k) or "") for k in ("system", "prompt"))


Reply = str | Callable[[dict[str, Any]], str]


class FakeOllama:
    """A local HTTP server answering /api/tags, /api/version, /api/chat and /api/generate."""

    def __init__(self, models: tuple[str, ...] = ("llama3.1:8b",), port: int = 0) -> None:
        self.models = list(models)
        self.requests: list[Recorded] = []
        self.mode = "normal"
        self.delay = 0.0
        self.answered = 0
        self.fail_after: int | None = None
        self.then = "error"
        self._queue: deque[Reply] = deque()
        self._fn: Callable[[dict[str, Any]], str] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Base URL of the server."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def chats(self) -> list[Recorded]:
        """The chat and generate requests received so far."""
        return [r for r in self.requests if r.path in ("/api/chat", "/api/generate")]

    def script(
        self,
        *replies: Reply,
        fn: Callable[[dict[str, Any]], str] | None = None,
        mode: str = "normal",
        delay: float = 0.0,
        fail_after: int | None = None,
        then: str = "error",
    ) -> FakeOllama:
        """Queue replies (texts or functions of the request), set a default `fn`, or a mode.

        Modes: normal; missing (404 "model not found" for any generation); slow (sleep
        `delay` seconds before answering); junk (reply with punctuation only); error (HTTP 500);
        close (drop the connection without an answer). With `fail_after`, the first
        `fail_after` generations from now on follow `mode` and every later one follows `then`.
        """
        if mode not in MODES or then not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        with self._lock:
            self._queue.extend(replies)
            if fn is not None:
                self._fn = fn
            self.mode = mode
            self.delay = delay
            self.fail_after = fail_after
            self.then = then
            self.answered = 0
        return self

    def current_mode(self) -> str:
        """The mode of the next generation request (counting it against `fail_after`)."""
        with self._lock:
            self.answered += 1
            if self.fail_after is not None and self.answered > self.fail_after:
                return self.then
            return self.mode

    def reply_for(self, body: dict[str, Any]) -> str:
        """The scripted text for one generation request."""
        with self._lock:
            item = self._queue.popleft() if self._queue else self._fn
        if item is None:
            return "fake reply"
        return item if isinstance(item, str) else item(body)

    def wait(self, seconds: float) -> None:
        """Sleep, waking early when the server stops."""
        self._stopping.wait(seconds)

    def stop(self) -> None:
        """Shut the server down and free its port."""
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _now() -> str:
    """An RFC 3339 timestamp like Ollama's."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _handler_for(fake: FakeOllama) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to one fake server."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            """Stay quiet."""

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:  # the client gave up waiting (a timeout test): nothing to report
                self.close_connection = True

        def _stream(self, lines: list[dict[str, Any]]) -> None:
            data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:  # the client gave up waiting (a timeout test): nothing to report
                self.close_connection = True

        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            fake.requests.append(Recorded("GET", self.path))
            if self.path == "/api/tags":
                models = [{"name": m, "model": m, "modified_at": _now(), "size": 1,
                           "digest": "0" * 12, "details": {"format": "gguf"}}
                          for m in fake.models]
                self._send(200, {"models": models})
            elif self.path == "/api/version":
                self._send(200, {"version": "0.0.0-fake"})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": "invalid JSON"})
                return
            fake.requests.append(Recorded("POST", self.path, body))
            if self.path not in ("/api/chat", "/api/generate"):
                self._send(404, {"error": "not found"})
                return
            model = str(body.get("model", ""))
            mode = fake.current_mode()
            if mode == "slow":
                fake.wait(fake.delay)
            if mode == "close":
                self.close_connection = True
                return
            if mode == "missing" or model not in fake.models:
                self._send(404, {"error": f"model '{model}' not found"})
                return
            if mode == "error":
                self._send(500, {"error": "llama runner process has terminated"})
                return
            text = JUNK if mode == "junk" else fake.reply_for(body)
            self._answer(body, model, text)

        def _answer(self, body: dict[str, Any], model: str, text: str) -> None:
            chat = self.path == "/api/chat"

            def part(piece: str, done: bool) -> dict[str, Any]:
                line: dict[str, Any] = {"model": model, "created_at": _now(), "done": done}
                if chat:
                    line["message"] = {"role": "assistant", "content": piece}
                else:
                    line["response"] = piece
                if done:
                    line.update(done_reason="stop", total_duration=1, eval_count=len(text) // 4)
                return line

            if body.get("stream", True):
                words = text.split(" ")
                pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
                self._stream([part(p, False) for p in pieces] + [part("", True)])
            else:
                self._send(200, part(text, True))

    return Handler


@pytest.fixture
def fake_ollama() -> Iterator[FakeOllama]:
    """A running fake Ollama server, stopped after the test."""
    server = FakeOllama()
    try:
        yield server
    finally:
        server.stop()

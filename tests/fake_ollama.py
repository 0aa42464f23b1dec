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
OLD_SERVER_ERROR = ("json: cannot unmarshal object into Go struct field ChatRequest.format "
                    "of type string")
"""What an Ollama without structured output says about a JSON schema in `format`."""
_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict, "array": list, "string": str, "integer": int, "number": (int, float),
    "boolean": bool, "null": type(None),
}


def schema_problem(value: Any, schema: dict[str, Any], where: str = "$") -> str | None:
    """Why `value` breaks a JSON schema (type, enum, required, properties, items, minItems,
    maxItems, additionalProperties false), or None when it conforms."""
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _TYPES:
        wrong_bool = isinstance(value, bool) and kind in ("integer", "number")
        if not isinstance(value, _TYPES[kind]) or wrong_bool:
            return f"{where} is {type(value).__name__}, not {kind}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} = {value!r} is not one of {schema['enum']}"
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                return f"{where} lacks the required {key!r}"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(properties))
            if extra:
                return f"{where} has properties the schema does not allow: {extra}"
        for key, sub in properties.items():
            if key in value:
                problem = schema_problem(value[key], sub, f"{where}.{key}")
                if problem:
                    return problem
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            return f"{where} has more than {schema['maxItems']} items"
        if len(value) < schema.get("minItems", 0):
            return f"{where} has fewer than {schema['minItems']} items"
        for i, item in enumerate(value):
            problem = schema_problem(item, schema.get("items", {}), f"{where}[{i}]")
            if problem:
                return problem
    return None


def format_problem(text: str, wanted: Any) -> str | None:
    """Why a reply breaks a request's `format` ("json" or a JSON schema), or None."""
    if not wanted:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return f"the reply is not JSON: {text[:60]!r}"
    return schema_problem(value, wanted) if isinstance(wanted, dict) else None


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
    def format(self) -> Any:
        """The request's `format` (a JSON schema, "json" or None)."""
        return self.body.get("format") or None

    @property
    def text(self) -> str:
        """All prompt text of a chat or generate request, joined by newlines."""
        if "messages" in self.body:
            return "\n".join(str(m.get("content") or "") for m in self.body["messages"])
        return "\n".join(str(self.body.get(k) or "") for k in ("system", "prompt"))


Reply = str | dict[str, Any] | Callable[[dict[str, Any]], str | dict[str, Any]]


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
        self.structured = True
        """Honour `format`; False answers it like an Ollama without structured output (400)."""
        self.format_check = "refuse"
        """A scripted reply that breaks the request's `format`: "refuse" (HTTP 500 naming the
        schema, the reply stays queued) or "pass" (sent as is); both record it in violations."""
        self.violations: list[str] = []
        """Scripted replies that broke the request's `format`, and why."""
        self.holding = 0
        """Requests a "slow" mode is holding right now (answered once their delay is over)."""
        self._queue: deque[Reply] = deque()
        self._fn: Callable[[dict[str, Any]], str] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._server.daemon_threads = True
        # a short poll: shutdown() returns within it, not the default 0.5 s, at every teardown
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)
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
        structured: bool = True,
        format_check: str = "refuse",
    ) -> FakeOllama:
        """Queue replies (texts or functions of the request), set a default `fn`, or a mode.

        Modes: normal; missing (404 "model not found" for any generation); slow (sleep
        `delay` seconds before answering); junk (reply with punctuation only); error (HTTP 500);
        close (drop the connection without an answer). With `fail_after`, the first
        `fail_after` generations from now on follow `mode` and every later one follows `then`.
        A reply may be a dict (sent as JSON). `structured` and `format_check` say how requests
        with a `format` are treated (see the attributes).
        """
        if mode not in MODES or then not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        if format_check not in ("refuse", "pass"):
            raise ValueError("format_check must be refuse or pass")
        with self._lock:
            self._queue.extend(replies)
            if fn is not None:
                self._fn = fn
            self.mode = mode
            self.delay = delay
            self.fail_after = fail_after
            self.then = then
            self.structured = structured
            self.format_check = format_check
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
        return self._take(body)[0]

    def _take(self, body: dict[str, Any]) -> tuple[str, Reply | None]:
        """The scripted text, and the queued item it came from (None for `fn` or the default)."""
        with self._lock:
            queued = self._queue.popleft() if self._queue else None
            item = queued if queued is not None else self._fn
        if item is None:
            return "fake reply", None
        reply = item(body) if callable(item) else item
        return (reply if isinstance(reply, str) else json.dumps(reply)), queued

    def answer_for(self, body: dict[str, Any]) -> tuple[int, str]:
        """(200, the reply) for a generation request, or (status, error) when `format` is
        refused; a refused queued reply stays first in the queue."""
        wanted = body.get("format") or None
        if wanted is not None and not self.structured:
            return 400, OLD_SERVER_ERROR
        text, queued = self._take(body)
        problem = format_problem(text, wanted)
        if problem is None:
            return 200, text
        with self._lock:
            self.violations.append(problem)
            if self.format_check == "pass":
                return 200, text
            if queued is not None:
                self._queue.appendleft(queued)
        return 500, f"fake ollama: the scripted reply does not match the format schema: {problem}"

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
                with fake._lock:
                    fake.holding += 1
                try:
                    fake.wait(fake.delay)
                finally:
                    with fake._lock:
                        fake.holding -= 1
            if mode == "close":
                self.close_connection = True
                return
            if mode == "missing" or model not in fake.models:
                self._send(404, {"error": f"model '{model}' not found"})
                return
            if mode == "error":
                self._send(500, {"error": "llama runner process has terminated"})
                return
            if mode == "junk":
                self._answer(body, model, JUNK)
                return
            status, text = fake.answer_for(body)
            if status != 200:
                self._send(status, {"error": text})
                return
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

"""The daemon's local HTTP JSON API (stdlib ThreadingHTTPServer) in front of the daemon object."""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from psirag_kb.errors import KBError, NodeNotFound

log = logging.getLogger(__name__)

QUERY_FIELDS = {"text": str, "mode": str, "k": int, "summarize": bool}
REINDEX_FIELDS = {"path": str}
ANSWER_FIELDS = {"text": str, "k": int}
MAX_K = 1000
DISCARD_LIMIT = 64_000_000
"""A refused body up to this size is read and dropped so the client gets its 413."""
ROUTES: dict[str, set[str]] = {
    "/api/health": {"GET"}, "/api/status": {"GET"}, "/api/query": {"POST"},
    "/api/tree": {"GET"}, "/api/reindex": {"POST"}, "/api/answer": {"POST"},
}
STREAMED = (0, {})
"""What `_dispatch` returns when it already wrote a streamed answer."""
NODE_ROUTE = re.compile(r"^/api/tree/([^/]+)$")
PATH_ROUTE = re.compile(r"^/api/path/([^/]+)$")


class App(Protocol):
    """What the API serves (the daemon)."""

    def health(self) -> dict[str, Any]: ...
    def status(self) -> dict[str, Any]: ...
    def query(self, text: str, mode: str | None, k: int | None,
              summarize: bool) -> dict[str, Any]: ...
    def node(self, node_id: int | None) -> dict[str, Any]: ...
    def path(self, chunk_id: int) -> dict[str, Any]: ...
    def reindex(self, path: str) -> dict[str, Any]: ...
    def answer(self, text: str, k: int | None,
               on_step: Callable[[dict[str, Any]], None]) -> dict[str, Any]: ...


class HTTPError(Exception):
    """A request error answered with a status code and a JSON message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts local connections."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def validate(body: Any, fields: dict[str, type], required: tuple[str, ...]) -> dict[str, Any]:
    """Check a JSON body's keys and value types; returns it as a dict."""
    if not isinstance(body, dict):
        raise HTTPError(400, "the body must be a JSON object")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise HTTPError(400, f"unknown field(s) {', '.join(unknown)}; known: "
                             f"{', '.join(fields)}")
    for key in required:
        if key not in body:
            raise HTTPError(400, f"missing field {key!r}")
    for key, value in body.items():
        kind = fields[key]
        if value is None and key not in required:
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise HTTPError(400, f"field {key!r} must be of type {kind.__name__}")
        if kind is str and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise HTTPError(400, f"field {key!r} is not valid Unicode (a lone surrogate "
                                     "escape)") from None
    return body


class _Handler(BaseHTTPRequestHandler):
    """Routes one request to the app and writes a JSON answer."""

    server: APIServer
    server_version = "psirag-kb"
    timeout = 30  # seconds a silent client may hold its connection

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """Answer an error http.server found itself (bad request line, method) as valid JSON."""
        self.close_connection = True
        try:
            self._send(code, {"error": message or self.responses.get(code, ("error",))[0]})
        except OSError:
            log.debug("client closed the connection before the error")

    def _authorized(self) -> bool:
        token = self.server.token
        if not token:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode("utf-8"), f"Bearer {token}".encode())

    def _discard(self, size: int) -> None:
        """Read (a bounded part of) a refused body so the client sees the answer, not a reset."""
        left = min(size, DISCARD_LIMIT)
        self.connection.settimeout(5.0)
        try:
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass

    def _body(self) -> Any:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise HTTPError(411, "send the body with a Content-Length, not chunked")
        if length is None:
            raise HTTPError(411, "missing Content-Length")
        try:
            size = int(length)
        except ValueError:
            raise HTTPError(400, "invalid Content-Length") from None
        if size < 0:
            raise HTTPError(400, "invalid Content-Length")
        if size > self.server.max_body_bytes:
            self.close_connection = True
            self._discard(size)
            raise HTTPError(413, f"body of {size} bytes exceeds the limit of "
                                 f"{self.server.max_body_bytes}")
        try:
            raw = self.rfile.read(size)
        except TimeoutError:
            self.close_connection = True
            raise HTTPError(408, f"the body of {size} bytes did not arrive in time") from None
        if len(raw) < size:
            self.close_connection = True
            raise HTTPError(400, f"the body ended after {len(raw)} of {size} bytes")
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise HTTPError(400, f"malformed JSON: {exc}") from None
        except RecursionError:
            raise HTTPError(400, "malformed JSON: nested too deeply") from None

    def _dispatch(self, method: str) -> tuple[int, dict[str, Any]]:
        path = self.path.split("?", 1)[0]
        if not self._authorized():
            return 401, {"error": "missing or wrong bearer token"}
        app = self.server.app
        node = NODE_ROUTE.match(path)
        chunk = PATH_ROUTE.match(path)
        allowed = ROUTES.get(path) or ({"GET"} if node or chunk else None)
        if allowed is None:
            return 404, {"error": f"no such endpoint {path}"}
        if method not in allowed:
            return 405, {"error": f"{method} is not allowed on {path}; use "
                                  f"{', '.join(sorted(allowed))}"}
        if node:
            raw = node.group(1)
            if not re.fullmatch(r"-?\d{1,18}", raw):
                return 404, {"error": f"no tree node {raw}"}
            return 200, app.node(int(raw))
        if chunk:
            raw = chunk.group(1)
            if not re.fullmatch(r"\d{1,18}", raw):
                return 404, {"error": f"no chunk {raw}"}
            return 200, app.path(int(raw))
        if path == "/api/health":
            return 200, app.health()
        if path == "/api/status":
            return 200, app.status()
        if path == "/api/tree":
            return 200, app.node(None)
        if path == "/api/query":
            body = validate(self._body(), QUERY_FIELDS, ("text",))
            k = body.get("k")
            if k is not None and not 1 <= k <= MAX_K:
                raise HTTPError(400, f"k must be between 1 and {MAX_K}")
            return 200, app.query(body["text"], body.get("mode"), k,
                                  bool(body.get("summarize") or False))
        if path == "/api/answer":
            body = validate(self._body(), ANSWER_FIELDS, ("text",))
            k = body.get("k")
            if k is not None and not 1 <= k <= MAX_K:
                raise HTTPError(400, f"k must be between 1 and {MAX_K}")
            if not body["text"].strip():
                raise HTTPError(400, "the query is empty")
            self._stream_answer(body["text"], k)
            return STREAMED
        body = validate(self._body(), REINDEX_FIELDS, ("path",))
        return 200, app.reindex(body["path"])

    def _stream_answer(self, text: str, k: int | None) -> None:
        """NDJSON: one {"step": ...} line per agent step, then {"answer": ...} or {"error": ...}."""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        gone = False

        def emit(line: dict[str, Any]) -> None:
            nonlocal gone
            if gone:
                return
            try:
                self.wfile.write(json.dumps(line).encode("utf-8") + b"\n")
                self.wfile.flush()
            except OSError:  # the client went away; finish quietly
                gone = True

        try:
            emit({"answer": self.server.app.answer(text, k, lambda s: emit({"step": s}))})
        except KBError as exc:
            emit({"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a failing request never stops the server
            log.exception("streamed answer failed")
            emit({"error": f"internal error ({type(exc).__name__}); see daemon.log"})

    def _handle(self) -> None:
        method = self.command
        try:
            status, payload = self._dispatch(method)
            if (status, payload) == STREAMED:
                return
        except HTTPError as exc:
            status, payload = exc.status, {"error": str(exc)}
        except NodeNotFound as exc:
            status, payload = 404, {"error": str(exc)}
        except KBError as exc:
            status, payload = 400, {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a failing request never stops the server
            log.exception("%s %s failed", method, self.path)
            status, payload = 500, {"error": f"internal error ({type(exc).__name__}); "
                                             "see daemon.log"}
        try:
            self._send(status, payload)
        except OSError:  # the client went away
            log.debug("client closed the connection before the answer")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle  # noqa: N815


class APIServer(ThreadingHTTPServer):
    """The HTTP server: a thread per request, serving until `stop`."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    """Connections the kernel holds while the accept loop is busy (5 reset clients under load)."""

    def __init__(self, app: App, host: str, port: int, token: str,
                 max_body_bytes: int = 1_000_000) -> None:
        if not is_loopback(host) and not token:
            raise KBError(
                f"refusing to serve the API on {host}, which is not loopback, without a token: "
                "set [api] token or PSIRAG_KB_TOKEN, or bind to 127.0.0.1"
            )
        self.app = app
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            super().__init__((host, port), _Handler)
        except OSError as exc:
            raise KBError(f"cannot listen on {host}:{port} ({exc}); stop what uses that port "
                          "or set [api] port") from exc
        self._thread = threading.Thread(target=self.serve_forever, name="psirag-api",
                                        kwargs={"poll_interval": 0.2}, daemon=True)

    @property
    def url(self) -> str:
        """The base URL clients use."""
        host, port = self.server_address[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        if ":" in str(shown):
            shown = f"[{shown}]"
        return f"http://{shown}:{port}"

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting requests and close the socket."""
        if self._thread.is_alive():
            self.shutdown()
        self.server_close()


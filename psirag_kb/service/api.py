"""The daemon's HTTP server: the JSON API at /api and the MCP server at /mcp, on one port.

Starlette on uvicorn, serving from a background thread with its own event loop. The knowledge
base's calls are synchronous and run on a bounded pool of threads; one guard in front of both
mounts checks Host, Origin and the bearer token (and limits wrong tokens per address, never a
right one), and maps the token to an Access: the data directory's api.token is the owner, a
person's token (`psirag-kb users add`) is that person, limited in requests per minute. Every
route passes that Access down; only admins reach /api/users.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Protocol

import anyio
import anyio.to_thread
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from psirag_kb.access import OWNER, Access
from psirag_kb.errors import AccessDenied, KBError, NodeNotFound
from psirag_kb.people import MyTokens, People, SignInRefused, UnknownPerson, Users
from psirag_kb.service import openai_compat as chat
from psirag_kb.service.metrics import CONTENT_TYPE, Measured, Metrics
from psirag_kb.service.openapi import openapi
from psirag_kb.service.routes import NotFound, Route, match, route, routes_of
from psirag_kb.service.starting import SERVING, Starting, Switch
from psirag_kb.serving.audit import AuditLog
from psirag_kb.serving.auth import (
    FailureLimiter,
    HostPolicy,
    PersonLimiter,
    bearer,
    is_loopback,
    token_matches,
)
from psirag_kb.serving.http import MAX_HEAD_BYTES, header
from psirag_kb.serving.thread import TIMEOUT_S, ServedInThread, served_url

__all__ = ["APIServer", "HTTPError", "Listener", "is_loopback", "validate"]

log = logging.getLogger(__name__)

QUERY_FIELDS = {"text": str, "mode": str, "k": int, "summarize": bool, "in": list}
REINDEX_FIELDS = {"path": str}
REEMBED_FIELDS = {"model": str, "cancel": bool}
ANSWER_FIELDS = {"text": str, "k": int}
USER_FIELDS = {"name": str, "role": str, "read": list}
GRANT_FIELDS = {"read": list}
CONVERSATION_FIELDS = {"title": str}
TURN_FIELDS = {"q": str, "mode": str, "k": int, "in": list}
ASK_FIELDS = {"q": str, "history": list, "mode": str, "k": int, "in": list}
MAX_HISTORY = 200
"""Earlier turns or messages an /api/ask body may carry."""
CHAT_SCHEMA = {
    "type": "object", "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string", "const": chat.MODEL},
        "stream": {"type": "boolean"},
        "messages": {"type": "array", "minItems": 1, "maxItems": chat.MAX_MESSAGES,
                     "items": {"type": "object", "required": ["role"], "properties": {
                         "role": {"enum": list(chat.ROLES)},
                         "content": {"type": ["string", "array", "null"]}}}},
    },
    "description": "Sampling options (temperature, max_tokens, ...) are accepted and ignored.",
}
MAX_K = 1000
MAX_SCOPES = 100
MAX_HEADERS = 100
WORKER_THREADS = 16
"""Requests the knowledge base serves at once; more wait for a thread."""
MAX_CONNECTIONS = 256
KEEP_ALIVE_EVENT_S = 10.0
"""A streamed chat completion sends a comment this often while its answer is worked on."""
METHODS = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"}
ROUTE_KEY = "psirag.route"
"""Where a request's scope holds the Route it was matched to."""
TOKEN_FIELDS = {"name": str}
MONITOR_PATHS = ("/api/health", "/api/ready", "/metrics")
"""All that a person of role monitor may ask for (issue 34)."""
BACKUP_FIELDS = {"dest": str}


class App(Protocol):
    """What the API serves (the daemon); every read and reindex takes the caller's Access."""

    def health(self) -> dict[str, Any]: ...
    def status(self, *, access: Access = OWNER) -> dict[str, Any]: ...
    def query(self, text: str, mode: str | None = None, k: int | None = None,
              summarize: bool = False, within: Sequence[str] | None = None, *,
              access: Access = OWNER) -> dict[str, Any]: ...
    def node(self, node_id: int | None = None, *, access: Access = OWNER) -> dict[str, Any]: ...
    def path(self, chunk_id: int, *, access: Access = OWNER) -> dict[str, Any]: ...
    def chunk(self, chunk_id: int, neighbours: int = 0, *,
              access: Access = OWNER) -> dict[str, Any]: ...
    def reindex(self, path: str, *, access: Access = OWNER) -> dict[str, Any]: ...
    def forget(self, path: str, *, access: Access = OWNER) -> dict[str, Any]: ...
    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None, *,
               access: Access = OWNER) -> dict[str, Any]: ...
    def maintain(self, *, access: Access = OWNER) -> dict[str, Any]: ...
    def reembed(self, model: str, cancel: bool = False, *,
                access: Access = OWNER) -> dict[str, Any]: ...
    def ask(self, question: str, *, conversation: str | None = None,
            history: Sequence[Any] | None = None, mode: str | None = None,
            k: int | None = None, within: Sequence[str] | None = None,
            on_step: Callable[[dict[str, Any]], None] | None = None,
            access: Access = OWNER) -> dict[str, Any]: ...
    def conversations(self, *, access: Access = OWNER) -> dict[str, Any]: ...
    def conversation(self, conversation: str, *, access: Access = OWNER) -> dict[str, Any]: ...
    def new_conversation(self, title: str = "", *,
                         access: Access = OWNER) -> dict[str, Any]: ...
    def rename_conversation(self, conversation: str, title: str, *,
                            access: Access = OWNER) -> dict[str, Any]: ...
    def delete_conversation(self, conversation: str, *,
                            access: Access = OWNER) -> dict[str, Any]: ...
    def person_removed(self, name: str) -> None: ...
    def ready(self) -> list[str]: ...
    def backup(self, dest: str, *, access: Access = OWNER) -> dict[str, Any]: ...


class HTTPError(Exception):
    """A request error answered with a status code and a JSON message."""

    def __init__(self, status: int, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.close = close


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
        if kind is str:
            _check_text(key, value)
    return body


def _check_text(key: str, value: str) -> None:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise HTTPError(400, f"field {key!r} is not valid Unicode (a lone surrogate "
                                 "escape)") from None


def scopes(value: list[Any] | None) -> list[str] | None:
    """The "in" field: absolute paths of folders or files results must lie under."""
    if value is None:
        return None
    if not value or len(value) > MAX_SCOPES:
        raise HTTPError(400, f"field 'in' must list 1 to {MAX_SCOPES} paths")
    for item in value:
        if not isinstance(item, str):
            raise HTTPError(400, "field 'in' must be a list of strings")
        _check_text("in", item)
        if not item.startswith("/") or "\x00" in item:
            raise HTTPError(400, f"field 'in' takes absolute paths; got {item!r}")
    return value


def _json(status: int, payload: dict[str, Any], close: bool = False,
          headers: dict[str, str] | None = None) -> Response:
    extra = dict(headers or {})
    if close:
        extra["Connection"] = "close"
    if status == 401:
        extra["WWW-Authenticate"] = "Bearer"
    return JSONResponse(payload, status, headers=extra)


def openai_error(status: int, message: str, close: bool = False) -> Response:
    """An error in OpenAI's shape ({"error": {"message", "type", "code"}}) for the /v1 routes."""
    kind = {400: "invalid_request_error", 401: "authentication_error",
            403: "permission_error", 404: "not_found_error", 429: "rate_limit_error"}.get(
                status, "invalid_request_error" if status < 500 else "server_error")
    code = {401: "invalid_api_key", 404: "not_found", 429: "rate_limit_exceeded"}.get(status)
    return _json(status, {"error": {"message": message, "type": kind, "code": code,
                                    "param": None}}, close=close)


def _as_openai(response: Response) -> Response:
    """A refusal of the guard's in OpenAI's error shape (for /v1), its headers kept."""
    message = json.loads(bytes(response.body)).get("error", "refused")
    out = openai_error(response.status_code, message)
    for key, value in response.headers.items():
        if key.lower() not in ("content-length", "content-type"):
            out.headers[key] = value
    return out


class Guard:
    """ASGI middleware: header limits, Host and Origin checks, the bearer token."""

    def __init__(self, inner: ASGIApp, token: str, policy: HostPolicy,
                 limiter: FailureLimiter, people: People | None = None,
                 persons: PersonLimiter | None = None, audit: AuditLog | None = None,
                 proxy: Any = None) -> None:
        self.inner = inner
        self.token = token
        self.policy = policy
        self.limiter = limiter
        self.people = people
        self.persons = persons
        self.audit = audit
        self.proxy = proxy
        """A trusted sign-in proxy (psirag_kb.serving.proxy.Proxy) whose headers name people."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            if scope.get("raw_path", b"").startswith(b"/v1/"):
                refusal = _as_openai(refusal)
            await refusal(scope, receive, send)
            return
        await self.inner(scope, receive, send)

    def refusal(self, scope: Scope) -> Response | None:
        """The answer to a request that may not pass, or None."""
        if len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) > MAX_HEAD_BYTES:
            return _json(414, {"error": "the request line is too long"}, close=True)
        if len(scope["headers"]) > MAX_HEADERS:
            return _json(431, {"error": f"more than {MAX_HEADERS} header fields"}, close=True)
        if sum(len(k) + len(v) for k, v in scope["headers"]) > MAX_HEAD_BYTES:
            return _json(431, {"error": "the request headers are too large"}, close=True)
        host = header(scope, b"host")
        if not self.policy.host_allowed(host):
            return _json(403, {"error": f"Host {host!r} is not a name of this server (a DNS "
                                        "rebinding attempt?); add it to [api] allowed_hosts "
                                        "if it is"})
        origin = header(scope, b"origin")
        if not self.policy.origin_allowed(origin, host) or \
                header(scope, b"sec-fetch-site") == "cross-site":
            return _json(403, {"error": f"cross-origin requests are refused (Origin "
                                        f"{origin!r})"})
        path = scope.get("raw_path", b"").split(b"?", 1)[0]
        given = header(scope, b"authorization")
        if path in (p.encode() for p in OPEN_PATHS) and given is None:
            scope.setdefault("state", {})["authorized"] = False
            return None
        state = scope.setdefault("state", {})
        if token_matches(given or "", self.token):  # a right token never meets the limiter
            state["authorized"], state["access"] = True, OWNER
            return None
        token = bearer(given)
        person = self.people.access_for(token) if self.people is not None and token else None
        client = (scope.get("client") or ("?", 0))[0]
        if person is None and self.proxy is not None:
            from starlette.datastructures import Headers

            try:  # believed only from a trusted peer; from any other the headers are ignored
                person = self.proxy.access(client, Headers(scope=scope))
            except SignInRefused as exc:
                self._refused(f"proxy sign-in {path.decode('latin-1')}", 403, client)
                return _json(403, {"error": str(exc)})
        if person is not None:
            wait = self.persons.wait(person.name) if self.persons is not None else 0.0
            if wait > 0:
                if self.audit is not None:
                    self.audit.record(person.name, f"{scope['method']} {path.decode('latin-1')}",
                                      status=429)
                return _json(429, {"error": f"more than {self.persons.per_minute} requests a "
                                            f"minute from {person.name}; retry in "
                                            f"{int(wait) + 1} s"},
                             headers={"Retry-After": str(int(wait) + 1)})
            state["authorized"], state["access"] = True, person
            return None
        wait = self.limiter.retry_after(client)
        if wait > 0:  # not audited: the limiter bounds the lines a flood of wrong tokens writes
            return _json(429, {"error": f"too many wrong tokens from {client}; retry in "
                                        f"{int(wait) + 1} s"},
                         headers={"Retry-After": str(int(wait) + 1)})
        self.limiter.failed(client)
        self._refused(f"{scope['method']} {path.decode('latin-1')}", 401, client)
        return _json(401, {"error": "missing or wrong bearer token (send "
                                    "Authorization: Bearer <token>)"})

    def _refused(self, action: str, status: int, client: str) -> None:
        """A request with a missing or wrong token in audit.jsonl (person null, never the
        token it sent)."""
        if self.audit is not None:
            self.audit.record(None, action, status=status, client=client)


class Endpoints:
    """The /api routes over the daemon: a table of `@route` handlers matched on the undecoded
    path (see psirag_kb/service/routes.py; OpenAPI is generated from the same table)."""

    table: tuple[Route, ...] = ()
    """Every route served, filled from the `@route` declarations below the class."""

    def __init__(self, app: App, max_body_bytes: int, mcp: ASGIApp | None,
                 threads: int, people: People | None = None,
                 audit: AuditLog | None = None, metrics: Metrics | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.audit = audit
        self.max_body_bytes = max_body_bytes
        self.mcp = mcp
        self.threads = anyio.CapacityLimiter(threads)
        self.users = Users(people) if people is not None else None
        self.mine = MyTokens(people) if people is not None else None

    async def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run a knowledge-base call on the worker threads."""
        return await anyio.to_thread.run_sync(function, *args, limiter=self.threads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") or scope["path"].encode()
        path = raw.split(b"?", 1)[0].decode("latin-1")
        if self.mcp is not None and (path == "/mcp" or path.startswith("/mcp/")):
            if getattr(scope.get("state", {}).get("access"), "role", None) == "monitor":
                await _json(403, {"error": "a monitor reads metrics and health only"})(
                    scope, receive, send)
                return
            await self.mcp(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await self.dispatch(request, path)
        except Exception as exc:  # noqa: BLE001 - a failing request never stops the server
            response = self.failure(scope, path, exc)
        await response(scope, receive, send)

    def failure(self, scope: Scope, path: str, exc: Exception) -> Response:
        """The error response for an exception a route raised, in its route's error shape."""
        status, close = 500, False
        if isinstance(exc, HTTPError):
            status, message, close = exc.status, str(exc), exc.close
        elif isinstance(exc, (NodeNotFound, UnknownPerson, NotFound)):
            status, message = 404, str(exc)
        elif isinstance(exc, AccessDenied):
            status, message = 403, str(exc)
        elif isinstance(exc, KBError):
            status, message = 400, str(exc)
        else:
            log.exception("%s %s failed", scope["method"], path, exc_info=exc)
            message = f"internal error ({type(exc).__name__}); see daemon.log"
        entry = scope.get(ROUTE_KEY)
        if path.startswith("/v1/") or (entry is not None and entry.errors == "openai"):
            return openai_error(status, message, close)
        return _json(status, {"error": message}, close=close)

    async def body(self, request: Request) -> Any:
        """The JSON body, bounded in size and in time."""
        headers = request.headers
        if "transfer-encoding" in headers:
            raise HTTPError(411, "send the body with a Content-Length, not chunked", close=True)
        length = headers.get("content-length")
        if length is None:
            raise HTTPError(411, "missing Content-Length")
        if not length.isdigit():
            raise HTTPError(400, "invalid Content-Length", close=True)
        size = int(length)
        if size > self.max_body_bytes:
            raise HTTPError(413, f"body of {size} bytes exceeds the limit of "
                                 f"{self.max_body_bytes}", close=True)
        try:
            raw = await asyncio.wait_for(request.body(), TIMEOUT_S)
        except TimeoutError:
            raise HTTPError(408, f"the body of {size} bytes did not arrive in time",
                            close=True) from None
        except ClientDisconnect:
            raise HTTPError(400, f"the body of {size} bytes ended early", close=True) from None
        if len(raw) < size:
            raise HTTPError(400, f"the body ended after {len(raw)} of {size} bytes", close=True)
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise HTTPError(400, f"malformed JSON: {exc}") from None
        except RecursionError:
            raise HTTPError(400, "malformed JSON: nested too deeply") from None

    async def fields(self, request: Request) -> dict[str, Any]:
        """The JSON body checked against the fields its route declares."""
        entry: Route = request.scope[ROUTE_KEY]
        return validate(await self.body(request), entry.body or {}, entry.required)

    async def dispatch(self, request: Request, path: str) -> Response:
        """Route one request through the table."""
        method = request.method
        if method not in METHODS:
            raise HTTPError(501, f"method {method} is not supported")
        found = match(self.table, path)
        if not found:
            raise HTTPError(404, f"no such endpoint {path}")
        chosen = next(((entry, raw) for entry, raw in found if method in entry.methods), None)
        if chosen is None:
            allowed = sorted({verb for entry, _ in found for verb in entry.methods})
            raise HTTPError(405, f"{method} is not allowed on {path}; use "
                                 f"{', '.join(allowed)}")
        entry, raw = chosen
        request.scope[ROUTE_KEY] = entry
        access = request.scope.get("state", {}).get("access") if entry.open else \
            _access(request)
        if getattr(access, "role", None) == "monitor" and entry.path not in MONITOR_PATHS:
            raise HTTPError(403, f"{access.name} is a monitor: metrics and health only")
        return await entry.handler(self, request, access, **entry.bind(raw))

    # -- the core routes ---------------------------------------------------------------------

    @route("GET", "/api/health", "Is the daemon up (open: without a token, only `ok`); 200 "
           "while it starts too, with its state and reason.", open=True,
           response="{ok, pid, data_dir, state: serving}; only {ok} without a token; "
                    "{ok, state, reason} while the daemon starts")
    async def health(self, request: Request, access: Access | None) -> Response:
        """GET /api/health."""
        health = self.app.health()
        state = request.scope.get("state", {})
        if not state.get("authorized", True):
            health = {"ok": health.get("ok", True)}
        elif not getattr(state.get("access"), "everything", True):
            health.pop("data_dir", None)  # a person's grants never show the server's paths
        return _json(200, health)

    @route("GET", "/api/status", "Files, chunks, tree and daemon state within the caller's "
           "grants.", response="the status object")
    async def status(self, request: Request, access: Access) -> Response:
        """GET /api/status."""
        return _json(200, await self.call(lambda: self.app.status(access=access)))

    @route("POST", "/api/query", "Search: ranked passages for a question.",
           body=QUERY_FIELDS, required=("text",),
           response="{query, mode, results: [{source, lines, location, chunk_id, text, ...}]}")
    async def query(self, request: Request, access: Access) -> Response:
        """POST /api/query."""
        body = await self.fields(request)
        k = _k(body.get("k"))
        within = scopes(body.get("in"))
        args = (body["text"], body.get("mode"), k, bool(body.get("summarize") or False))
        started = time.perf_counter()
        result = await self.call(lambda: self.app.query(*args, within=within, access=access))
        if self.metrics is not None:
            self.metrics.observe_query(str(result.get("mode") or body.get("mode") or ""),
                                       time.perf_counter() - started)
        return _json(200, result)

    @route("GET", "/api/tree", "The abstract tree's root and its children.",
           response="a tree node")
    async def tree(self, request: Request, access: Access) -> Response:
        """GET /api/tree."""
        return _json(200, await self.call(lambda: self.app.node(None, access=access)))

    @route("GET", "/api/tree/{node_id:signed}", "One tree node and its children.",
           noun="tree node", response="a tree node")
    async def node(self, request: Request, access: Access, node_id: int) -> Response:
        """GET /api/tree/<id>."""
        return _json(200, await self.call(lambda: self.app.node(node_id, access=access)))

    @route("GET", "/api/path/{chunk_id:int}", "The tree path from the root to a chunk.",
           noun="chunk", response="{chunk_id, path: [tree nodes]}")
    async def path(self, request: Request, access: Access, chunk_id: int) -> Response:
        """GET /api/path/<chunk id>."""
        return _json(200, await self.call(lambda: self.app.path(chunk_id, access=access)))

    @route("GET", "/api/chunk/{chunk_id:int}", "One chunk's text and location, with up to 20 "
           "neighbours each side.", noun="chunk", query={"neighbours": int},
           response="{chunk_id, source, path, lines, location, text, neighbours}")
    async def chunk(self, request: Request, access: Access, chunk_id: int) -> Response:
        """GET /api/chunk/<chunk id>."""
        neighbours = _neighbours(request.query_params.get("neighbours"))
        return _json(200, await self.call(
            lambda: self.app.chunk(chunk_id, neighbours, access=access)))

    @route("POST", "/api/reindex", "Read a file or folder again now.", body=REINDEX_FIELDS,
           required=("path",), response="an ingest report")
    async def reindex(self, request: Request, access: Access) -> Response:
        """POST /api/reindex."""
        body = await self.fields(request)
        return _json(200, await self.call(lambda: self.app.reindex(body["path"], access=access)))

    @route("POST", "/api/forget", "Remove a file or folder from the index.",
           body=REINDEX_FIELDS, required=("path",), response="{removed: n}")
    async def forget(self, request: Request, access: Access) -> Response:
        """POST /api/forget."""
        body = await self.fields(request)
        return _json(200, await self.call(lambda: self.app.forget(body["path"], access=access)))

    @route("POST", "/api/answer", "The agent's answer, streamed: one {step} line per step, "
           "then {answer} or {error}.", body=ANSWER_FIELDS, required=("text",),
           media="application/x-ndjson", response="NDJSON lines")
    async def answer(self, request: Request, access: Access) -> Response:
        """POST /api/answer: NDJSON, one {"step"} line per agent step, then the answer."""
        body = await self.fields(request)
        k = _k(body.get("k"))
        if not body["text"].strip():
            raise HTTPError(400, "the query is empty")
        return StreamingResponse(self.answer_lines(body["text"], k, access),
                                 media_type="application/x-ndjson",
                                 headers={"Cache-Control": "no-cache"})

    async def answer_lines(self, text: str, k: int | None,
                           access: Access) -> AsyncIterator[bytes]:
        """The agent's steps as they complete, then its answer or error."""
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        def emit(line: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(lines.put_nowait, line)

        def run() -> None:
            try:
                emit({"answer": self.app.answer(text, k, lambda s: emit({"step": s}),
                                                access=access)})
            except KBError as exc:
                emit({"error": str(exc)})
            except Exception as exc:  # noqa: BLE001 - a failing request never stops the server
                log.exception("streamed answer failed")
                emit({"error": f"internal error ({type(exc).__name__}); see daemon.log"})
            finally:
                loop.call_soon_threadsafe(lines.put_nowait, None)

        worker = asyncio.ensure_future(self.call(run))
        while (line := await lines.get()) is not None:
            yield json.dumps(line).encode("utf-8") + b"\n"
        await worker

    @route("POST", "/api/maintain", "Run the tree's maintenance now.",
           response="{pid, runs}")
    async def maintain(self, request: Request, access: Access) -> Response:
        """POST /api/maintain."""
        return _json(200, await self.call(lambda: self.app.maintain(access=access)))

    # -- people (admins only) ----------------------------------------------------------------

    def _admin(self, access: Access) -> Users:
        """The people registry, for an admin only."""
        if access.role != "admin":
            raise HTTPError(403, f"{access.name} is a {access.role}; only an admin manages "
                                 "people")
        if self.users is None:
            raise HTTPError(404, "this server keeps no people")
        return self.users

    @route("GET", "/api/users", "The people and their roles and grants (admins).",
           response="{users: [{name, role, grants, created, rotated, last_used}]}")
    async def users_list(self, request: Request, access: Access) -> Response:
        """GET /api/users."""
        return _json(200, await self.call(self._admin(access).list))

    @route("POST", "/api/users", "Add a person; the answer holds their token, shown once "
           "(admins).", body=USER_FIELDS, required=("name",),
           response="{name, token}, the token shown this once")
    async def users_add(self, request: Request, access: Access) -> Response:
        """POST /api/users."""
        users = self._admin(access)
        body = await self.fields(request)
        read = _paths(body.get("read") or [])
        self._audit(access, "users add", body["name"])
        return _json(200, await self.call(
            lambda: users.add(body["name"], body.get("role") or "reader", read)))

    @route("DELETE", "/api/users/{name}", "Remove a person and their token (admins).",
           response="{revoked: name}")
    async def users_revoke(self, request: Request, access: Access, name: str) -> Response:
        """DELETE /api/users/<name>."""
        users = self._admin(access)
        self._audit(access, "users revoke", name)
        revoked = await self.call(users.revoke, name)
        await self.call(self.app.person_removed, name)  # their conversations go too
        return _json(200, revoked)

    @route("POST", "/api/users/{name}/rotate", "A new token for a person, the old one stops "
           "(admins).", response="{name, token}")
    async def users_rotate(self, request: Request, access: Access, name: str) -> Response:
        """POST /api/users/<name>/rotate."""
        users = self._admin(access)
        self._audit(access, "users rotate", name)
        return _json(200, await self.call(users.rotate, name))

    @route("POST", "/api/users/{name}/grant", "Let a person read more paths (admins).",
           body=GRANT_FIELDS, required=("read",), response="the person")
    async def users_grant(self, request: Request, access: Access, name: str) -> Response:
        """POST /api/users/<name>/grant."""
        return await self._regrant(request, access, name, "grant")

    @route("POST", "/api/users/{name}/ungrant", "Take paths from a person's grants (admins).",
           body=GRANT_FIELDS, required=("read",), response="the person")
    async def users_ungrant(self, request: Request, access: Access, name: str) -> Response:
        """POST /api/users/<name>/ungrant."""
        return await self._regrant(request, access, name, "ungrant")

    async def _regrant(self, request: Request, access: Access, name: str,
                       action: str) -> Response:
        users = self._admin(access)
        self._audit(access, f"users {action}", name)
        read = _paths((await self.fields(request))["read"])
        if not read:
            raise HTTPError(400, "field 'read' must list at least one path")
        change = users.grant if action == "grant" else users.ungrant
        return _json(200, await self.call(change, name, read))

    def _audit(self, access: Access, action: str, name: str) -> None:
        if self.audit is not None:
            self.audit.record(access.name, action, name)

    # -- issue 32: conversations (branch i32) ------------------------------------------------

    @route("GET", "/api/conversations", "The caller's conversations, most recently continued "
           "first.", response="{conversations: [{id, title, created, updated, turns}]}")
    async def conversations(self, request: Request, access: Access) -> Response:
        """GET /api/conversations."""
        return _json(200, await self.call(lambda: self.app.conversations(access=access)))

    @route("POST", "/api/conversations", "Start a conversation (the title defaults to its "
           "first question).", body=CONVERSATION_FIELDS,
           response="{id, title, created, updated, turns}")
    async def conversation_new(self, request: Request, access: Access) -> Response:
        """POST /api/conversations."""
        title = (await self.fields(request)).get("title") or ""
        return _json(200, await self.call(lambda: self.app.new_conversation(title,
                                                                            access=access)))

    @route("GET", "/api/conversations/{conversation_id}", "One of the caller's conversations "
           "with its turns (passages re-checked against the grants of now).",
           response="{id, title, created, updated, turns: [...]}")
    async def conversation_read(self, request: Request, access: Access,
                                conversation_id: str) -> Response:
        """GET /api/conversations/<id>."""
        return _json(200, await self.call(
            lambda: self.app.conversation(conversation_id, access=access)))

    @route("PATCH", "/api/conversations/{conversation_id}", "Rename a conversation.",
           body=CONVERSATION_FIELDS, required=("title",),
           response="{id, title, created, updated, turns}")
    async def conversation_rename(self, request: Request, access: Access,
                                  conversation_id: str) -> Response:
        """PATCH /api/conversations/<id>."""
        title = (await self.fields(request))["title"]
        return _json(200, await self.call(
            lambda: self.app.rename_conversation(conversation_id, title, access=access)))

    @route("DELETE", "/api/conversations/{conversation_id}", "Delete a conversation.",
           response="{deleted: id}")
    async def conversation_delete(self, request: Request, access: Access,
                                  conversation_id: str) -> Response:
        """DELETE /api/conversations/<id>."""
        return _json(200, await self.call(
            lambda: self.app.delete_conversation(conversation_id, access=access)))

    @route("POST", "/api/conversations/{conversation_id}/turns", "Ask the next question of a "
           "conversation (a follow-up is resolved against its earlier turns; the turn is "
           "stored).", body=TURN_FIELDS, required=("q",),
           response="the query or answer object plus {question, searched, rewrite, "
                    "conversation, turn}")
    async def conversation_turn(self, request: Request, access: Access,
                                conversation_id: str) -> Response:
        """POST /api/conversations/<id>/turns."""
        body = await self.fields(request)
        return await self.ask_turn(body, access, conversation=conversation_id)

    @route("POST", "/api/ask", "A question after the earlier turns given in the body (a "
           "follow-up resolved, nothing stored).", body=ASK_FIELDS, required=("q",),
           response="the query or answer object plus {question, searched, rewrite}")
    async def ask(self, request: Request, access: Access) -> Response:
        """POST /api/ask."""
        body = await self.fields(request)
        history = body.get("history") or []
        if len(history) > MAX_HISTORY:
            raise HTTPError(400, f"field 'history' holds at most {MAX_HISTORY} turns")
        return await self.ask_turn(body, access, history=history)

    async def ask_turn(self, body: dict[str, Any], access: Access, **where: Any) -> Response:
        """A turn: {q, mode, k, in} searched or answered after the earlier turns."""
        k, within = _k(body.get("k")), scopes(body.get("in"))
        if not body["q"].strip():
            raise HTTPError(400, "field 'q' is empty")
        extra = {} if within is None else {"within": within}
        result = await self.call(lambda: self.app.ask(body["q"], mode=body.get("mode"), k=k,
                                                      access=access, **where, **extra))
        return _json(200, result)

    # -- issue 33: sign-in (branch i33) ------------------------------------------------------

    def _mine(self) -> MyTokens:
        if self.mine is None:
            raise HTTPError(404, "this server keeps no people")
        return self.mine

    @route("GET", "/api/me/tokens", "The caller's own personal tokens (never the tokens).",
           response="{tokens: [{name, created, last_used}]}")
    async def my_tokens(self, request: Request, access: Access) -> Response:
        """GET /api/me/tokens."""
        return _json(200, await self.call(self._mine().list, access))

    @route("POST", "/api/me/tokens", "Make a personal token for the caller (shown once).",
           body=TOKEN_FIELDS, required=("name",), response="{name, token}")
    async def my_token_make(self, request: Request, access: Access) -> Response:
        """POST /api/me/tokens."""
        name = (await self.fields(request))["name"]
        mine = self._mine()
        self._audit(access, "token make", name)
        return _json(200, await self.call(mine.make, access, name))

    @route("DELETE", "/api/me/tokens/{name}", "Revoke one of the caller's personal tokens (at "
           "once).", noun="token", response="{revoked}")
    async def my_token_revoke(self, request: Request, access: Access, name: str) -> Response:
        """DELETE /api/me/tokens/<name>."""
        mine = self._mine()
        self._audit(access, "token revoke", name)
        return _json(200, await self.call(mine.revoke, access, name))


    # -- issue 34: operations (branch i34) ---------------------------------------------------

    @route("GET", "/api/ready", "Readiness: 200 when the stores are open and no derived index "
           "is stale, 503 with the reasons otherwise: an index rebuilt, or while the daemon "
           "starts (waiting for a restore, migrating the schema, opening the stores) with its "
           "state (liveness is /api/health).", open=True,
           response="{ready: true}, or {ready: false, reasons: [...]} (and `state` while "
                    "starting) with 503")
    async def ready(self, request: Request, access: Access | None) -> Response:
        """GET /api/ready."""
        reasons = await self.call(self.app.ready)
        if reasons:
            return _json(503, {"ready": False, "reasons": reasons},
                         headers={"Retry-After": "5"})
        return _json(200, {"ready": True})

    @route("GET", "/metrics", "Prometheus metrics (text format) for an admin or a monitor.",
           response="the Prometheus text exposition format", media="text/plain")
    async def metrics_text(self, request: Request, access: Access) -> Response:
        """GET /metrics."""
        if access.role not in ("admin", "monitor"):
            raise HTTPError(403, f"{access.name} is a {access.role}; metrics are for an admin "
                                 "or a monitor")
        if self.metrics is None:
            raise HTTPError(404, "this server keeps no metrics")
        return Response(await self.call(self.metrics.render), 200, media_type=CONTENT_TYPE)

    @route("POST", "/api/backup", "Copy the knowledge base into a new folder on the daemon's "
           "machine while it serves (an admin only).", body=BACKUP_FIELDS, required=("dest",),
           response="{path, generation, chunks, bytes, files, indexes, seconds, ...}")
    async def backup(self, request: Request, access: Access) -> Response:
        """POST /api/backup."""
        dest = (await self.fields(request))["dest"]
        return _json(200, await self.call(lambda: self.app.backup(dest, access=access)))
    # -- issue 34: a new embedding model (branch i34b) ---------------------------------------

    @route("POST", "/api/reembed", "Embed everything again with another model in the "
           "background (or cancel the running reembed); an admin only.", body=REEMBED_FIELDS,
           response="the reembed's status {model, state, done, total, rate, eta_s}")
    async def reembed(self, request: Request, access: Access) -> Response:
        """POST /api/reembed: {"model": NAME_OR_PATH} or {"cancel": true}."""
        body = await self.fields(request)
        if not body.get("cancel") and not body.get("model"):
            raise HTTPError(400, 'give "model" (a model name or folder) or "cancel": true')
        return _json(200, await self.call(lambda: self.app.reembed(
            body.get("model") or "", cancel=bool(body.get("cancel")), access=access)))

    # -- issue 32: OpenAPI and the OpenAI-compatible /v1 (branch i32b) -----------------------

    @route("GET", "/api/openapi.json", "This API's OpenAPI 3.1 description, generated from "
           "its route table.", response="an OpenAPI 3.1 document")
    async def openapi(self, request: Request, access: Access) -> Response:
        """GET /api/openapi.json."""
        return _json(200, openapi(self.table, _version()))

    @route("GET", "/v1/models", "OpenAI-compatible: the one model, this knowledge base.",
           errors="openai", response="{object: list, data: [{id, object, created, owned_by}]}")
    async def v1_models(self, request: Request, access: Access) -> Response:
        """GET /v1/models."""
        return _json(200, chat.models())

    @route("GET", "/v1/models/{model}", "OpenAI-compatible: one model.", errors="openai",
           noun="model", response="{id, object, created, owned_by}")
    async def v1_model(self, request: Request, access: Access, model: str) -> Response:
        """GET /v1/models/<id>."""
        if model != chat.MODEL:
            raise HTTPError(404, f"no model {model!r}; this server has {chat.MODEL!r}")
        return _json(200, chat.model_entry())

    @route("POST", "/v1/chat/completions", "OpenAI-compatible chat: the last user message "
           "asked after the earlier turns, answered from the caller's folders (streamed as "
           "server-sent events with stream: true); the sources in a top-level `citations`.",
           errors="openai", schema=CHAT_SCHEMA,
           response="a chat.completion (or chat.completion.chunk events, then [DONE]) with "
                    "citations: [{number, source, lines, location, chunk_id, text}]")
    async def v1_chat(self, request: Request, access: Access) -> Response:
        """POST /v1/chat/completions."""
        try:
            asked = chat.parse(await self.body(request))
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from None
        if asked.model != chat.MODEL:
            raise HTTPError(404, f"no model {asked.model!r}; this server has {chat.MODEL!r}")
        if not asked.stream:
            result = await self.call(lambda: self.v1_ask(asked, access))
            return _json(200, chat.completion(asked, result))
        return StreamingResponse(self.v1_events(asked, access), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})  # nginx: pass each chunk

    def v1_ask(self, asked: chat.ChatRequest, access: Access) -> dict[str, Any]:
        """The last user message asked after the earlier ones, in agent mode (the agent's
        answer with an LLM, the passages found without)."""
        return self.app.ask(asked.question, history=asked.history, mode="agent", access=access)

    async def v1_events(self, asked: chat.ChatRequest, access: Access) -> AsyncIterator[bytes]:
        """The opening chunk at once, keep-alive comments while the answer is worked on, then
        its chunks (or an error event: the status line is sent by then)."""
        stream = chat.ChunkStream(asked)
        yield stream.first()
        worker = asyncio.ensure_future(self.call(lambda: self.v1_ask(asked, access)))
        while not (await asyncio.wait({worker}, timeout=KEEP_ALIVE_EVENT_S))[0]:
            yield stream.KEEP_ALIVE
        try:
            result = worker.result()
        except KBError as exc:
            events = stream.failed(str(exc))
        except Exception as exc:  # noqa: BLE001 - a failing request never stops the server
            log.exception("streamed chat completion failed")
            events = stream.failed(f"internal error ({type(exc).__name__}); see daemon.log",
                                   "server_error")
        else:
            events = stream.rest(result)
        for event in events:
            yield event


Endpoints.table = routes_of(Endpoints)
OPEN_PATHS = tuple(entry.path for entry in Endpoints.table if entry.open)


def _version() -> str:
    """The installed package's version (the OpenAPI document's info.version)."""
    try:
        return importlib.metadata.version("psirag-kb")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _access(request: Request) -> Access:
    """Who the guard found the request's token to be (never defaults to the owner)."""
    access = request.scope.get("state", {}).get("access")
    if not isinstance(access, Access):
        raise HTTPError(401, "missing or wrong bearer token")
    return access


def _paths(value: list[Any]) -> list[str]:
    """A list of grant paths from a JSON body."""
    if len(value) > MAX_SCOPES or not all(isinstance(v, str) for v in value):
        raise HTTPError(400, f"field 'read' must list up to {MAX_SCOPES} path strings")
    for item in value:
        _check_text("read", item)
    return value


def _k(k: int | None) -> int | None:
    if k is not None and not 1 <= k <= MAX_K:
        raise HTTPError(400, f"k must be between 1 and {MAX_K}")
    return k


def _neighbours(raw: str | None) -> int:
    if raw is None:
        return 0
    if not raw.isdigit() or int(raw) > 20:
        raise HTTPError(400, "neighbours must be a whole number from 0 to 20")
    return int(raw)


def build_app(app: App, token: str, policy: HostPolicy, limiter: FailureLimiter,
              max_body_bytes: int, mcp_server: Any = None,
              threads: int = WORKER_THREADS, people: People | None = None,
              persons: PersonLimiter | None = None, audit: AuditLog | None = None,
              proxy: Any = None, metrics: Metrics | None = None) -> ASGIApp:
    """The whole ASGI application: measured, guarded, then /mcp or the /api routes."""
    mcp_app = None
    if mcp_server is not None:
        from mcp.server.transport_security import TransportSecuritySettings

        # Host and Origin are checked by the guard in front of both mounts
        mcp_app = mcp_server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=True, json_response=True,
            max_request_body_size=max_body_bytes,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
    endpoints = Endpoints(app, max_body_bytes, mcp_app, threads, people, audit, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if mcp_server is None:
            yield
            return
        async with mcp_server.session_manager.run():
            yield

    starlette = Starlette(lifespan=lifespan)
    starlette.router.default = endpoints  # every method and path reaches `dispatch`
    guarded = Guard(starlette, token, policy, limiter, people, persons, audit, proxy)
    return guarded if metrics is None else Measured(guarded, metrics, ROUTE_KEY)


class Listener(ServedInThread):
    """The API's port from the daemon's first instant: `Switch` answers from `starting` (503
    with the reason) until `APIServer.start` installs the real application on it."""

    def __init__(self, host: str, port: int, starting: Starting | None = None,
                 allowed_hosts: Iterable[str] = (),
                 max_connections: int = MAX_CONNECTIONS) -> None:
        super().__init__(host, port, "API", "psirag-api")
        self.starting = starting or Starting()
        self.switch = Switch(self.starting, HostPolicy(host, allowed_hosts,
                                                       port=self.server_address[1]))
        self.serve(self.switch, max_connections, lifespan="on", graceful_s=5)
        self.running = False

    def start(self, wait_s: float = 30.0) -> None:
        """Serve the starting answers in a background thread (once)."""
        if not self.running:
            super().start(wait_s)
            self.running = True

    @property
    def url(self) -> str:
        """The base URL clients use."""
        return served_url(self.server_address)


class APIServer:
    """The HTTP server of the daemon, serving in a background thread until `stop` (on a
    `Listener` that already answers while the daemon starts, or on a new one)."""

    def __init__(self, app: App, host: str, port: int, token: str,
                 max_body_bytes: int = 1_000_000, *, allowed_hosts: Iterable[str] = (),
                 mcp_server: Any = None, max_connections: int = MAX_CONNECTIONS,
                 failures_per_minute: int = 10, people: People | None = None,
                 person_requests_per_minute: int = 600, audit: AuditLog | None = None,
                 proxy: Any = None, listener: Listener | None = None) -> None:
        if not token:
            raise KBError("the API needs a token (the daemon generates one in its data "
                          "directory)")
        self.listener = listener or Listener(host, port, None, allowed_hosts, max_connections)
        self.socket = self.listener.socket
        self.server_address = self.listener.server_address
        self.app = app
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.limiter = FailureLimiter(failures_per_minute, 60.0)
        policy = HostPolicy(host, allowed_hosts, port=self.server_address[1])
        self.persons = PersonLimiter(person_requests_per_minute)
        read = getattr(app, "metrics_state", None)
        self.metrics = Metrics(read if callable(read) else None)
        """This server's own registry (several servers in one process never share one)."""
        self.asgi = build_app(app, token, policy, self.limiter, max_body_bytes, mcp_server,
                              people=people, persons=self.persons, audit=audit, proxy=proxy,
                              metrics=self.metrics)

    @property
    def server(self) -> uvicorn.Server | None:
        """The uvicorn server."""
        return self.listener.server

    def start(self, wait_s: float = 30.0) -> None:
        """Serve the real application (the listener's port stays open throughout)."""
        self.listener.start(wait_s)
        self.listener.switch.install(self.asgi)
        self.listener.starting.set(SERVING, "serving")

    def stop(self) -> None:
        """Stop accepting requests, let the ones in flight end, close the socket."""
        self.listener.stop()

    @property
    def url(self) -> str:
        """The base URL clients use."""
        return served_url(self.server_address)

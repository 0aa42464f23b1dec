"""The API's routes, made from the table of operations: Starlette routing on the undecoded
path, bodies checked by each operation's pydantic model, errors in the route's shape."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

import anyio
import anyio.to_thread
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from psirag_kb.access import Access
from psirag_kb.errors import AccessDenied, KBError, NodeNotFound, TreeEmpty
from psirag_kb.people import MyTokens, People, UnknownPerson, Users
from psirag_kb.service.guard import HTTPError, openai_error, reply
from psirag_kb.service.handlers import HANDLERS
from psirag_kb.service.metrics import Metrics
from psirag_kb.serving.audit import AuditLog
from psirag_kb.serving.ops import OPS, NotFound, Op
from psirag_kb.serving.requests import Body, Invalid, parse, parse_query
from psirag_kb.serving.thread import TIMEOUT_S

__all__ = ["METHODS", "ROUTE_KEY", "Endpoints"]

log = logging.getLogger(__name__)

METHODS = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"}
"""The methods the tests try on every path (any other is answered as one of these not served)."""
ROUTE_KEY = "psirag.route"
"""Where a request's scope holds the operation it was matched to."""
Handler = Callable[["Endpoints", Request, "Access | None", Op, dict[str, Any]],
                   Awaitable[Response]]
"""An operation served by more than a call of the app: (endpoints, request, access, op,
path arguments) -> response."""


class _Arguments(Protocol):
    """A query string's model (each has args())."""

    def args(self) -> dict[str, Any]: ...


def _routes() -> list[Route]:
    """One Starlette route per path of the table, matching every method (a method the path
    does not serve, OPTIONS, TRACE or one never heard of, is answered 405 with `Allow` in the
    API's shape by `Endpoints.match`)."""
    paths: dict[str, dict[str, Op]] = {}
    for entry in OPS:
        paths.setdefault(entry.template, {})[entry.method] = entry
    return [Route(template, endpoint=_Methods(by_method), methods=None)
            for template, by_method in paths.items()]


class _Methods:
    """A path's operations by method: the route's endpoint, read by `Endpoints.match` (the
    route only matches the path; it is never called as an ASGI app)."""

    def __init__(self, by_method: dict[str, Op]) -> None:
        self.by_method = by_method

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("dispatched by Endpoints")


class Endpoints:
    """The table's operations over the app (the daemon), the people and the metrics."""

    routes = _routes()

    def __init__(self, app: Any, max_body_bytes: int, mcp: ASGIApp | None,
                 threads: int, people: People | None = None,
                 audit: AuditLog | None = None, metrics: Metrics | None = None) -> None:
        self.app = app
        # handlers of operations that are not open annotate access as Access: the table gives
        # them a caller (`_access` refuses a request without one)
        self.handlers = cast("dict[str, Handler]", HANDLERS)
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
                await reply(403, {"error": "a monitor reads metrics and health only"})(
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
        status, close, headers = 500, False, {}
        if isinstance(exc, HTTPError):
            status, message, close, headers = exc.status, str(exc), exc.close, exc.headers
        elif isinstance(exc, Invalid):
            status, message = 400, str(exc)
        elif isinstance(exc, (NodeNotFound, UnknownPerson, NotFound)):
            status, message = 404, str(exc)
        elif isinstance(exc, AccessDenied):
            status, message = 403, str(exc)
        elif isinstance(exc, TreeEmpty):  # a state that passes (the first ingest ends)
            status, message = 409, str(exc)
        elif isinstance(exc, KBError):
            status, message = 400, str(exc)
        else:
            log.exception("%s %s failed", scope["method"], path, exc_info=exc)
            message = f"internal error ({type(exc).__name__}); see daemon.log"
        entry = scope.get(ROUTE_KEY)
        if path.startswith("/v1/") or (entry is not None and entry.errors == "openai"):
            return openai_error(status, message, close, headers)
        return reply(status, {"error": message}, close=close, headers=headers)

    def match(self, scope: Scope, path: str) -> tuple[Op, dict[str, str]]:
        """The operation for the request's method and undecoded path, with its raw path
        parameters (404 or 405 when there is none)."""
        probe = {"type": "http", "path": path, "root_path": "", "method": scope["method"]}
        for candidate in self.routes:
            found, child = candidate.matches(probe)
            if found is Match.FULL:
                by_method = cast(_Methods, candidate.endpoint).by_method  # see _routes
                entry = by_method.get(scope["method"])
                if entry is None:
                    allowed = ", ".join(sorted(by_method))
                    raise HTTPError(405, f"{scope['method']} is not allowed on {path}; use "
                                         f"{allowed}", headers={"Allow": allowed})
                return entry, child["path_params"]
        raise HTTPError(404, f"no such endpoint {path}")

    async def dispatch(self, request: Request, path: str) -> Response:
        """Serve one request: its operation, who asks, what the table lets them reach."""
        entry, raw = self.match(request.scope, path)
        request.scope[ROUTE_KEY] = entry
        access = request.scope.get("state", {}).get("access") if entry.role == "open" else \
            _access(request)
        if access is not None:
            refusal = entry.refusal(access.name, access.role)
            if refusal is not None:
                raise HTTPError(403, refusal)
        handler = self.handlers.get(entry.name)
        if handler is not None:
            return await handler(self, request, access, entry, entry.bind(raw))
        args = entry.bind(raw) | await self.arguments(request, entry)
        return reply(200, await self.invoke(entry, access, args))

    async def arguments(self, request: Request, entry: Op) -> dict[str, Any]:
        """The app method's arguments from the request's body and query string."""
        args: dict[str, Any] = {}
        if entry.query is not None:
            query = cast(_Arguments, parse_query(entry.query, dict(request.query_params)))
            args |= query.args()
        if entry.body is not None:  # a Body: ChatBody's operation has a handler
            args |= parse(cast("type[Body]", entry.body), await self.body(request)).args()
        return args

    async def invoke(self, entry: Op, access: Access | None, args: dict[str, Any]) -> Any:
        """Call the operation's app method on a worker thread."""
        method = getattr(self.app, entry.target or entry.name)
        return await self.call(lambda: method(**args, access=access))

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

    def audited(self, access: Access, action: str, name: str) -> None:
        """An admin's or a person's change in audit.jsonl."""
        if self.audit is not None:
            self.audit.record(access.name, action, name)


def _access(request: Request) -> Access:
    """Who the guard found the request's token to be (never defaults to the owner)."""
    access = request.scope.get("state", {}).get("access")
    if not isinstance(access, Access):
        raise HTTPError(401, "missing or wrong bearer token")
    return access

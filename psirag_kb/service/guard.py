"""The guard in front of the API and MCP: header limits, Host and Origin checks, the bearer
token (a wrong one limited per address, never a right one), mapped to the caller's Access."""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from psirag_kb.access import OWNER
from psirag_kb.people import People, SignInRefused
from psirag_kb.serving.audit import AuditLog
from psirag_kb.serving.auth import FailureLimiter, HostPolicy, PersonLimiter, bearer, token_matches
from psirag_kb.serving.http import MAX_HEAD_BYTES, header
from psirag_kb.serving.ops import OPEN_PATHS
from psirag_kb.serving.peers import client_address, socket_peer

__all__ = ["Guard", "HTTPError", "openai_error", "reply"]

MAX_HEADERS = 100


class HTTPError(Exception):
    """A request error answered with a status code and a JSON message."""

    def __init__(self, status: int, message: str, close: bool = False,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.close = close
        self.headers = headers or {}


def reply(status: int, payload: dict[str, Any], close: bool = False,
          headers: dict[str, str] | None = None) -> Response:
    """A JSON answer (closing the connection when asked; a 401 names the Bearer scheme)."""
    extra = dict(headers or {})
    if close:
        extra["Connection"] = "close"
    if status == 401:
        extra["WWW-Authenticate"] = "Bearer"
    return JSONResponse(payload, status, headers=extra)


def openai_error(status: int, message: str, close: bool = False,
                 headers: dict[str, str] | None = None) -> Response:
    """An error in OpenAI's shape ({"error": {"message", "type", "code"}}) for the /v1 routes."""
    kind = {400: "invalid_request_error", 401: "authentication_error",
            403: "permission_error", 404: "not_found_error", 429: "rate_limit_error"}.get(
                status, "invalid_request_error" if status < 500 else "server_error")
    code = {401: "invalid_api_key", 404: "not_found", 429: "rate_limit_exceeded"}.get(status)
    return reply(status, {"error": {"message": message, "type": kind, "code": code,
                                    "param": None}}, close=close, headers=headers)


def as_openai(response: Response) -> Response:
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
                refusal = as_openai(refusal)
            await refusal(scope, receive, send)
            return
        await self.inner(scope, receive, send)

    def refusal(self, scope: Scope) -> Response | None:
        """The answer to a request that may not pass, or None."""
        if len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) > MAX_HEAD_BYTES:
            return reply(414, {"error": "the request line is too long"}, close=True)
        if len(scope["headers"]) > MAX_HEADERS:
            return reply(431, {"error": f"more than {MAX_HEADERS} header fields"}, close=True)
        if sum(len(k) + len(v) for k, v in scope["headers"]) > MAX_HEAD_BYTES:
            return reply(431, {"error": "the request headers are too large"}, close=True)
        host = header(scope, b"host")
        if not self.policy.host_allowed(host):
            return reply(403, {"error": f"Host {host!r} is not a name of this server (a DNS "
                                        "rebinding attempt?); add it to [api] allowed_hosts "
                                        "if it is"})
        origin = header(scope, b"origin")
        if not self.policy.origin_allowed(origin, host) or \
                header(scope, b"sec-fetch-site") == "cross-site":
            return reply(403, {"error": f"cross-origin requests are refused (Origin "
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
        client = client_address(scope)  # the socket's, or an allowed reverse proxy's client
        if person is None and self.proxy is not None:
            try:  # believed only from a trusted socket; from any other the headers are ignored
                person = self.proxy.access(socket_peer(scope), Headers(scope=scope))
            except SignInRefused as exc:
                self._refused(f"proxy sign-in {path.decode('latin-1')}", 403, client)
                return reply(403, {"error": str(exc)})
        if person is not None:
            wait = self.persons.wait(person.name) if self.persons is not None else 0.0
            if wait > 0:
                assert self.persons is not None  # wait is 0.0 without a limiter
                if self.audit is not None:
                    self.audit.record(person.name, f"{scope['method']} {path.decode('latin-1')}",
                                      status=429)
                return reply(429, {"error": f"more than {self.persons.per_minute} requests a "
                                            f"minute from {person.name}; retry in "
                                            f"{int(wait) + 1} s"},
                             headers={"Retry-After": str(int(wait) + 1)})
            state["authorized"], state["access"] = True, person
            return None
        wait = self.limiter.retry_after(client)
        if wait > 0:  # not audited: the limiter bounds the lines a flood of wrong tokens writes
            return reply(429, {"error": f"too many wrong tokens from {client}; retry in "
                                        f"{int(wait) + 1} s"},
                         headers={"Retry-After": str(int(wait) + 1)})
        self.limiter.failed(client)
        self._refused(f"{scope['method']} {path.decode('latin-1')}", 401, client)
        return reply(401, {"error": "missing or wrong bearer token (send "
                                    "Authorization: Bearer <token>)"})

    def _refused(self, action: str, status: int, client: str) -> None:
        """A request with a missing or wrong token in audit.jsonl (person null, never the
        token it sent)."""
        if self.audit is not None:
            self.audit.record(None, action, status=status, client=client)

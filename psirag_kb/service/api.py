"""The daemon's HTTP server: the JSON API at /api and the MCP server at /mcp, on one port.

Starlette on uvicorn, serving from a background thread with its own event loop. The knowledge
base's calls are synchronous and run on a bounded pool of threads; one guard in front of both
mounts checks Host, Origin and the bearer token (and limits wrong tokens per address, never a
right one), and maps the token to an Access: the data directory's api.token is the owner, a
person's token (`psirag-kb users add`) is that person, limited in requests per minute. Every
operation passes that Access down; the table of operations (psirag_kb/serving/ops.py) says
which roles reach which.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp

from psirag_kb.errors import KBError
from psirag_kb.people import People
from psirag_kb.service.endpoints import ROUTE_KEY, Endpoints
from psirag_kb.service.guard import Guard
from psirag_kb.service.metrics import Measured, Metrics
from psirag_kb.service.starting import SERVING, Door, Starting, Switch
from psirag_kb.serving.audit import AuditLog
from psirag_kb.serving.auth import FailureLimiter, HostPolicy, PersonLimiter
from psirag_kb.serving.thread import ServedInThread, served_url

__all__ = ["APIServer", "Listener", "build_app"]

WORKER_THREADS = 16
"""Requests the knowledge base serves at once; more wait for a thread."""
MAX_CONNECTIONS = 256


def build_app(app: Any, token: str, policy: HostPolicy, limiter: FailureLimiter,
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
    """The API's port from the daemon's first instant: `Switch` answers from `starting` (503,
    the reason for an admin or a monitor, 401 for a stranger; `door` says who a token is)
    until `APIServer.start` installs the real application on it."""

    def __init__(self, host: str, port: int, starting: Starting | None = None,
                 allowed_hosts: Iterable[str] = (),
                 max_connections: int = MAX_CONNECTIONS,
                 forwarded_allow: tuple[str, ...] = (), door: Door | None = None,
                 failures_per_minute: int = 10) -> None:
        super().__init__(host, port, "API", "psirag-api")
        self.starting = starting or Starting()
        self.switch = Switch(self.starting, HostPolicy(host, allowed_hosts,
                                                       port=self.server_address[1]),
                             door, FailureLimiter(failures_per_minute, 60.0))
        self.serve(self.switch, max_connections, lifespan="on", graceful_s=5,
                   forwarded_allow=forwarded_allow)
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

    def __init__(self, app: Any, host: str, port: int, token: str,
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

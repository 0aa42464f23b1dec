"""The API's port from the daemon's first instant: 503 with the reason until the stores are open.

A daemon binds its port before it waits for a restore or a command to finish and before it opens
(and maybe migrates) the stores. Meanwhile `Switch` answers from `Starting`: /api/health 200 with
the state (alive), /api/ready 503, every other route 503 for a caller with a token and 401 for a
stranger. Only the admin token and a person of role admin or monitor learn the reason (which
names a restore's pid or the schema versions of a migration); anyone else gets the state word.
`Listener.install` then hands the same listening server over to the real application (whose
lifespan it runs on the server's loop), so the port never closes between the two.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from psirag_kb.access import OWNER, Access
from psirag_kb.config import APIConfig
from psirag_kb.errors import KBError
from psirag_kb.people import People
from psirag_kb.serving.auth import (
    TOKEN_FILE,
    FailureLimiter,
    HostPolicy,
    bearer,
    configured_token,
    read_token_file,
    token_matches,
)
from psirag_kb.serving.http import header
from psirag_kb.serving.peers import client_address

__all__ = ["PRIVILEGED", "RETRY_AFTER_S", "SERVING", "Door", "EarlyDoor", "Starting", "Switch",
           "unavailable"]

Door = Callable[[str], Access | None]
"""Who an Authorization header names (None: nobody)."""
PRIVILEGED = ("admin", "monitor")
"""The roles that learn why the daemon is not ready (and its pid and paths)."""

SERVING = "serving"
"""The state once the real application answers."""
RETRY_AFTER_S = 5
"""The Retry-After of a 503 while the daemon starts."""
LIFESPAN_WAIT_S = 60.0
"""How long the real application's lifespan (the MCP session manager) may take to start."""


class Starting:
    """What a starting daemon is doing: a state ("waiting", "restoring", "starting",
    "migrating", "serving") and its reason, set by the daemon's thread, read by the server's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "starting"
        self._reason = "the daemon is starting"

    def set(self, state: str, reason: str) -> None:
        """Say what runs now."""
        with self._lock:
            self._state, self._reason = state, reason

    def get(self) -> tuple[str, str]:
        """(state, reason)."""
        with self._lock:
            return self._state, self._reason


class EarlyDoor:
    """Who a token is before the stores are open: the admin token (configured, or the data
    directory's api.token, read when asked since a restore may be writing it; never created
    here) or a person's in people.json (read only)."""

    def __init__(self, data_dir: Path, api: APIConfig) -> None:
        self.data_dir = Path(data_dir)
        self.api = api
        self._people: People | None = None

    def __call__(self, given: str) -> Access | None:
        try:
            token = (configured_token(self.api.token, self.api.token_file, "the config")
                     or read_token_file(self.data_dir / TOKEN_FILE))
        except KBError:
            token = ""
        if token and token_matches(given, token):
            return OWNER
        if not bearer(given) or not self.data_dir.is_dir():
            return None
        if self._people is None:
            self._people = People(self.data_dir)
        return self._people.access_for(bearer(given))


def unavailable(state: str, reason: str) -> str:
    """The error message of a request refused while the daemon starts (`reason` empty: the
    state alone)."""
    doing = f"{state}: {reason}" if reason else state
    return (f"the daemon is not serving yet ({doing}); retry in a few seconds "
            "(GET /api/ready answers 200 once it serves)")


STRANGER = "missing or wrong bearer token (send Authorization: Bearer <token>)"
"""A refusal's message for a request without a known token (as the real application's)."""


async def _answer(send: Send, status: int, payload: dict[str, Any], retry: bool | int,
                  ) -> None:
    """A complete JSON response that closes the connection (`retry`: with Retry-After, its
    seconds when an int)."""
    body = json.dumps(payload).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    if retry is not False:
        seconds = RETRY_AFTER_S if retry is True else retry
        headers.append((b"retry-after", str(seconds).encode()))
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Switch:
    """ASGI application: the starting answers until `install`, then the real application."""

    def __init__(self, starting: Starting, policy: HostPolicy, door: Door | None = None,
                 limiter: FailureLimiter | None = None) -> None:
        self.starting = starting
        self.policy = policy
        self.door = door
        """Who a token is meanwhile (None: nobody, so every caller is a stranger)."""
        self.limiter = limiter or FailureLimiter()
        self.app: ASGIApp | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: asyncio.Queue[Message] | None = None
        self._lifespan: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        app = self.app
        if app is not None:
            await app(scope, receive, send)
        elif scope["type"] == "http":
            await self._early(scope, send)

    async def _early(self, scope: Scope, send: Send) -> None:
        """Health, readiness or a refusal, from the starting state: the reason only for the
        admin token and the admin and monitor roles, the state word for anyone else, and 401
        for a stranger on any other route."""
        host = header(scope, b"host")
        if not self.policy.host_allowed(host) or not self.policy.origin_allowed(
                header(scope, b"origin"), host):
            await _answer(send, 403, {"error": f"Host {host!r} or its Origin is not this "
                                               "server's"}, retry=False)
            return
        state, reason = self.starting.get()
        path = scope.get("raw_path", b"").split(b"?", 1)[0]
        openai = path.startswith(b"/v1/")
        given = header(scope, b"authorization")
        open_path = scope["method"] == "GET" and path in (b"/api/health", b"/api/ready")
        access = None
        if given is not None:
            access = self.door(given) if self.door is not None else None
            if access is None:
                await self._wrong_token(scope, send, openai)
                return
        elif not open_path:
            await _answer(send, 401, _error(401, STRANGER, openai), retry=False)
            return
        privileged = access is not None and access.role in PRIVILEGED
        if path == b"/api/health" and open_path:
            await _answer(send, 200, {"ok": True, "state": state} | (
                {"reason": reason} if privileged else {}), retry=True)
        elif open_path:
            await _answer(send, 503, {"ready": False, "state": state} | (
                {"reasons": [reason]} if privileged else {}), retry=True)
        else:
            message = unavailable(state, reason if privileged else "")
            await _answer(send, 503, _error(503, message, openai, state) if openai else
                          {"error": message, "state": state}, retry=True)

    async def _wrong_token(self, scope: Scope, send: Send, openai: bool) -> None:
        """401 for a token nobody holds, counted per client; 429 past the limit."""
        client = client_address(scope)
        wait = self.limiter.retry_after(client)
        if wait > 0:
            await _answer(send, 429, _error(429, f"too many wrong tokens from {client}; retry "
                                                 f"in {int(wait) + 1} s", openai),
                          retry=int(wait) + 1)
            return
        self.limiter.failed(client)
        await _answer(send, 401, _error(401, STRANGER, openai), retry=False)

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        """uvicorn's lifespan: started at once; at shutdown, the real application's first."""
        self._loop = asyncio.get_running_loop()
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._lifespan is not None and self._inbox is not None:
                    self._inbox.put_nowait({"type": "lifespan.shutdown"})
                    await self._lifespan
                await send({"type": "lifespan.shutdown.complete"})
                return

    def install(self, app: ASGIApp) -> None:
        """Start `app`'s lifespan on the server's loop, then answer from it (called from
        another thread once the server runs)."""
        if self._loop is None:
            raise KBError("the API server is not running")
        future = asyncio.run_coroutine_threadsafe(self._start(app), self._loop)
        try:
            future.result(LIFESPAN_WAIT_S)
        except TimeoutError:
            future.cancel()
            raise KBError(f"the API did not start within {LIFESPAN_WAIT_S:.0f} s") from None
        self.app = app

    async def _start(self, app: ASGIApp) -> None:
        """Run `app`'s lifespan in a task until shutdown; returns once it started."""
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        started: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def sent(message: Message) -> None:
            kind = message["type"]
            if kind.startswith("lifespan.startup.") and not started.done():
                started.set_result(message.get("message", "") if kind.endswith("failed")
                                   else "")

        async def run() -> None:
            try:
                await app({"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"},
                           "state": {}}, inbox.get, sent)
            finally:
                if not started.done():
                    started.set_result("its lifespan ended before it started")

        inbox.put_nowait({"type": "lifespan.startup"})
        self._inbox, self._lifespan = inbox, asyncio.ensure_future(run())
        failed = await started
        if failed:
            self._inbox = self._lifespan = None
            raise KBError(f"the API could not start: {failed}")


def _error(status: int, message: str, openai: bool, code: str | None = None) -> dict[str, Any]:
    """An error body: {"error": message}, or OpenAI's shape for the /v1 routes."""
    if not openai:
        return {"error": message}
    kind = {401: "authentication_error", 429: "rate_limit_error"}.get(status, "server_error")
    code = code or {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(status)
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}

"""The API's port from the daemon's first instant: 503 with the reason until the stores are open.

A daemon binds its port before it waits for a restore or a command to finish and before it opens
(and maybe migrates) the stores. Meanwhile `Switch` answers from `Starting`: /api/health 200 with
the state (alive), /api/ready 503 naming what runs, every other route 503 with the same reason;
`Listener.install` then hands the same listening server over to the real application (whose
lifespan it runs on the server's loop), so the port never closes between the two.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from psirag_kb.errors import KBError
from psirag_kb.serving.auth import HostPolicy
from psirag_kb.serving.http import header

__all__ = ["RETRY_AFTER_S", "SERVING", "Starting", "Switch", "unavailable"]

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


def unavailable(state: str, reason: str) -> str:
    """The error message of a request refused while the daemon starts."""
    return (f"the daemon is not serving yet ({state}: {reason}); retry in a few seconds "
            "(GET /api/ready answers 200 once it serves)")


async def _answer(send: Send, status: int, payload: dict[str, Any], retry: bool) -> None:
    """A complete JSON response that closes the connection."""
    body = json.dumps(payload).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    if retry:
        headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Switch:
    """ASGI application: the starting answers until `install`, then the real application."""

    def __init__(self, starting: Starting, policy: HostPolicy) -> None:
        self.starting = starting
        self.policy = policy
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
        """Health, readiness or a refusal, from the starting state (no token is known yet:
        nothing beyond the state and its reason is shown)."""
        host = header(scope, b"host")
        if not self.policy.host_allowed(host) or not self.policy.origin_allowed(
                header(scope, b"origin"), host):
            await _answer(send, 403, {"error": f"Host {host!r} or its Origin is not this "
                                               "server's"}, retry=False)
            return
        state, reason = self.starting.get()
        path = scope.get("raw_path", b"").split(b"?", 1)[0]
        if path == b"/api/health" and scope["method"] == "GET":
            await _answer(send, 200, {"ok": True, "state": state, "reason": reason}, retry=False)
        elif path == b"/api/ready" and scope["method"] == "GET":
            await _answer(send, 503, {"ready": False, "state": state, "reasons": [reason]},
                          retry=True)
        elif path.startswith(b"/v1/"):  # the OpenAI-compatible routes' error shape
            await _answer(send, 503, {"error": {"message": unavailable(state, reason),
                                                "type": "server_error", "code": state,
                                                "param": None}}, retry=True)
        else:
            await _answer(send, 503, {"error": unavailable(state, reason), "state": state},
                          retry=True)

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

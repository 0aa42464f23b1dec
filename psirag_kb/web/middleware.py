"""What the page adds to every exchange: security headers out, the Host header checked in."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from psirag_kb.serving.auth import HostPolicy
from psirag_kb.serving.http import header

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


class Headers:
    """ASGI middleware: security headers on every response, Host checked on every request."""

    def __init__(self, inner: ASGIApp, policy: HostPolicy) -> None:
        self.inner = inner
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        host = header(scope, b"host")
        if not self.policy.host_allowed(host):
            await plain(403, "this Host is not a name of this server")(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.inner(scope, receive, sending)


def plain(status: int, text: str) -> Response:
    """A plain-text response."""
    return Response(text, status, media_type="text/plain; charset=utf-8")

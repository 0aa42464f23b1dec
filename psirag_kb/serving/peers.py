"""Where a request comes from: the socket's address, kept before a reverse proxy the operator
allows ([api] forwarded_allow) names its client in X-Forwarded-For."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any, cast

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

__all__ = ["PEER", "Forwarded", "client_address", "socket_peer"]

PEER = "psirag_kb.peer"
"""The scope key holding the connecting socket's address (never a header's)."""


def socket_peer(scope: Mapping[str, Any]) -> str | None:
    """The address of the socket a request came in on (None when unknown)."""
    if PEER in scope:
        return scope[PEER]
    client = scope.get("client")
    return client[0] if client else None


def client_address(scope: Mapping[str, Any]) -> str:
    """The client as far as the operator trusts: the socket's address, or the one an allowed
    reverse proxy forwarded ("?" when unknown); the wrong-token limiter counts by it."""
    client = scope.get("client")
    return client[0] if client else "?"


class Forwarded:
    """ASGI middleware: keeps the socket's address in the scope, then lets uvicorn's
    ProxyHeadersMiddleware take the client and scheme from the forwarded headers of the
    allowed proxies only (none allowed: the headers change nothing)."""

    def __init__(self, inner: ASGIApp, allow: Iterable[str] = ()) -> None:
        networks = []
        for entry in allow:
            network = ipaddress.ip_network(entry.strip(), strict=False)
            networks.append(str(network))
            if isinstance(network, ipaddress.IPv4Network):  # as a dual-stack socket shows it
                networks.append(f"::ffff:{network.network_address}/{96 + network.prefixlen}")
        self.allow = tuple(networks)
        self.inner: ASGIApp = inner
        if networks:  # uvicorn types ASGI apps with its own (narrower) scope types
            self.inner = cast(ASGIApp, ProxyHeadersMiddleware(cast(Any, inner), networks))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            client = scope.get("client")
            scope[PEER] = client[0] if client else None
        await self.inner(scope, receive, send)

"""The socket's address is kept before forwarded headers are believed, and they are believed only
from the listed proxies (IPv4 ones also as a dual-stack socket shows them)."""

from __future__ import annotations

import asyncio
from typing import Any

from psirag_kb.serving.peers import Forwarded, client_address, socket_peer


def seen(allow: tuple[str, ...], peer: str, forwarded_for: str) -> dict[str, Any]:
    """The scope the application gets for a request from `peer` carrying X-Forwarded-For and
    X-Forwarded-Proto: https."""
    got: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        got.update(scope)

    scope = {"type": "http", "client": (peer, 5000), "scheme": "http",
             "headers": [(b"x-forwarded-for", forwarded_for.encode()),
                         (b"x-forwarded-proto", b"https")]}
    asyncio.run(Forwarded(app, allow)(scope, None, None))  # type: ignore[arg-type]
    return got


def test_no_proxy_allowed_changes_nothing() -> None:
    scope = seen((), "127.0.0.1", "127.0.0.2")
    assert client_address(scope) == "127.0.0.1" and socket_peer(scope) == "127.0.0.1"
    assert scope["scheme"] == "http"


def test_an_allowed_proxy_names_the_client_and_the_socket_is_kept() -> None:
    scope = seen(("127.0.0.3",), "127.0.0.3", "10.0.0.9, 127.0.0.3")
    assert client_address(scope) == "10.0.0.9" and socket_peer(scope) == "127.0.0.3"
    assert scope["scheme"] == "https"
    scope = seen(("10.0.0.0/8",), "10.1.2.3", "192.0.2.7, 10.9.9.9")  # the nearest unlisted
    assert client_address(scope) == "192.0.2.7" and socket_peer(scope) == "10.1.2.3"
    scope = seen(("127.0.0.3",), "127.0.0.4", "10.0.0.9")  # another peer: ignored
    assert client_address(scope) == "127.0.0.4" and scope["scheme"] == "http"


def test_an_ipv4_proxy_is_recognised_on_a_dual_stack_socket() -> None:
    scope = seen(("127.0.0.3",), "::ffff:127.0.0.3", "10.0.0.9")
    assert client_address(scope) == "10.0.0.9" and socket_peer(scope) == "::ffff:127.0.0.3"

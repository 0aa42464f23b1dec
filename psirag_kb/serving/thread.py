"""A uvicorn server on its own listening socket, served from a background thread."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Literal

import uvicorn
from starlette.types import ASGIApp

from psirag_kb.errors import KBError
from psirag_kb.serving.http import MAX_HEAD_BYTES, JSONProtocol
from psirag_kb.serving.peers import Forwarded

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0
"""How long a client may take to send a request head or body (then 408 or a close)."""
KEEP_ALIVE_S = 5
"""An idle keep-alive connection is closed after this long."""


class ServedInThread:
    """A uvicorn server on its own listening socket, serving in a background thread from
    `start` until `stop` (the API's and the web page's)."""

    def __init__(self, host: str, port: int, what: str, thread: str) -> None:
        self.what = what
        """What the server is called in errors and the log."""
        self.thread = thread
        self.socket = _listen(host, port)
        self.server_address = self.socket.getsockname()[:2]
        self.server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None

    def serve(self, asgi: ASGIApp, max_connections: int, lifespan: Literal["on", "off"],
              graceful_s: int, forwarded_allow: tuple[str, ...] = ()) -> None:
        """Make the server for `asgi` (each connection's head and keep-alive bounded);
        forwarded headers are believed only from the `forwarded_allow` proxies (uvicorn's
        own default, which believes 127.0.0.1 or $FORWARDED_ALLOW_IPS, is off)."""
        protocol = type("Protocol", (JSONProtocol,), {"head_timeout_s": TIMEOUT_S,
                                                      "max_connections": max_connections})
        config = uvicorn.Config(
            Forwarded(asgi, forwarded_allow), http=protocol, loop="asyncio", lifespan=lifespan,
            log_config=None, proxy_headers=False, forwarded_allow_ips=[],
            access_log=False, timeout_keep_alive=KEEP_ALIVE_S, server_header=False,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES, timeout_graceful_shutdown=graceful_s,
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name=self.thread, daemon=True)

    def _serve(self) -> None:
        assert self.server is not None
        try:
            self.server.run(sockets=[self.socket])
        except BaseException as exc:  # noqa: BLE001 - reported by start
            self._failed = exc
            log.exception("the %s server stopped", self.what)

    def start(self, wait_s: float = 30.0) -> None:
        """Serve in a background thread; returns once the server accepts connections."""
        assert self.server is not None and self._thread is not None
        self._thread.start()
        deadline = time.monotonic() + wait_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise KBError(f"the {self.what} server did not start ({self._failed!r})")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop accepting requests, let the ones in flight end (up to the graceful time),
        close the socket."""
        if self.server is not None:
            self.server.should_exit = True
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(10.0)
        self.socket.close()


def served_url(address: tuple[Any, ...]) -> str:
    """The http URL of a listening socket's (host, port), a wildcard shown as loopback."""
    host, port = address[0], address[1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    if ":" in str(shown):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket (errors say what to change)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(512)
    except OSError as exc:
        sock.close()
        raise KBError(f"cannot listen on {host}:{port} ({exc}); stop what uses that port "
                      "or set [api] port") from exc
    sock.set_inheritable(True)
    return sock


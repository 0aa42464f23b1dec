"""The page's HTTP server: uvicorn in a background thread on its own port, until `stop`."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from psirag_kb.errors import KBError
from psirag_kb.people import People
from psirag_kb.service.api import KEEP_ALIVE_S, TIMEOUT_S, _listen, served_url
from psirag_kb.service.audit import AuditLog
from psirag_kb.service.auth import FailureLimiter, HostPolicy, PersonLimiter
from psirag_kb.service.http import MAX_HEAD_BYTES, JSONProtocol
from psirag_kb.web.app import Web, build_web_app


class WebServer:
    """Serves the page for `daemon` on host:port (0: a free port); `start`, then `stop`."""

    def __init__(self, daemon: Any, host: str, port: int, owner_token: str,
                 people: People | None, limiter: FailureLimiter, session_minutes: int,
                 allowed_hosts: tuple[str, ...] = (), max_connections: int = 256,
                 persons: PersonLimiter | None = None, audit: AuditLog | None = None) -> None:
        self.socket = _listen(host, port)
        self.server_address = self.socket.getsockname()[:2]
        policy = HostPolicy(host, allowed_hosts, port=self.server_address[1])
        self.web = Web(daemon, owner_token, people, limiter, policy, session_minutes, persons,
                       audit=audit)
        protocol = type("Protocol", (JSONProtocol,), {"head_timeout_s": TIMEOUT_S,
                                                      "max_connections": max_connections})
        config = uvicorn.Config(
            build_web_app(self.web), http=protocol, loop="asyncio", lifespan="off",
            log_config=None, access_log=False, timeout_keep_alive=KEEP_ALIVE_S,
            server_header=False, h11_max_incomplete_event_size=MAX_HEAD_BYTES,
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]},
                                        name="psirag-web", daemon=True)

    @property
    def url(self) -> str:
        """The page's address."""
        return served_url(self.server_address) + "/"

    def start(self, wait_s: float = 30.0) -> None:
        """Serve in a background thread; returns once connections are accepted."""
        self._thread.start()
        deadline = time.monotonic() + wait_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise KBError("the web page's server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop serving (streams in flight end within 2 s) and close the socket."""
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(10.0)
        self.socket.close()

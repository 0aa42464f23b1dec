"""The page's HTTP server: uvicorn in a background thread on its own port, until `stop`
(streams in flight end within 2 s)."""

from __future__ import annotations

from typing import Any

from psirag_kb.config import AuthConfig
from psirag_kb.people import People
from psirag_kb.serving.audit import AuditLog
from psirag_kb.serving.auth import FailureLimiter, HostPolicy, PersonLimiter
from psirag_kb.serving.thread import ServedInThread, served_url
from psirag_kb.web.app import build_web_app
from psirag_kb.web.site import Web


class WebServer(ServedInThread):
    """Serves the page for `daemon` on host:port (0: a free port); `start`, then `stop`."""

    def __init__(self, daemon: Any, host: str, port: int, owner_token: str,
                 people: People | None, limiter: FailureLimiter, session_minutes: int,
                 allowed_hosts: tuple[str, ...] = (), max_connections: int = 256,
                 persons: PersonLimiter | None = None, audit: AuditLog | None = None,
                 auth: AuthConfig | None = None, proxy: Any = None,
                 forwarded_allow: tuple[str, ...] = ()) -> None:
        auth = auth or AuthConfig()
        oidc = None
        if auth.oidc is not None:  # the secret is read now: a missing file fails the start
            from psirag_kb.web.oidc import OIDCClient, read_secret

            oidc = OIDCClient(auth.oidc, read_secret(auth.oidc.client_secret_file))
        super().__init__(host, port, "web page's", "psirag-web")
        policy = HostPolicy(host, allowed_hosts, port=self.server_address[1])
        self.web = Web(daemon, owner_token, people, limiter, policy, session_minutes, persons,
                       audit=audit, auth=auth, proxy=proxy, oidc=oidc)
        self.serve(build_web_app(self.web), max_connections, lifespan="off", graceful_s=2,
                   forwarded_allow=forwarded_allow)

    @property
    def url(self) -> str:
        """The page's address."""
        return served_url(self.server_address) + "/"

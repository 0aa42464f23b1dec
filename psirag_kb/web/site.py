"""What every route of the page shares: settings, sessions, templates, a signed-in person.

Who may read what is decided below (the engine answers "not found" for what a person may not
read); the routes only find the session's Access and render. Every response carries a strict
Content-Security-Policy; every POST needs the session's (or the sign-in form's) CSRF token and
is refused when a browser says it comes from another site.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
import anyio.to_thread
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from psirag_kb.access import OWNER, Access
from psirag_kb.config import AuthConfig
from psirag_kb.errors import AccessDenied, KBError, NodeNotFound
from psirag_kb.people import MyTokens, People, SignInRefused
from psirag_kb.search.retrieval import MODES
from psirag_kb.serving.audit import AuditLog
from psirag_kb.serving.auth import FailureLimiter, HostPolicy, PersonLimiter
from psirag_kb.serving.peers import client_address, socket_peer
from psirag_kb.web.render import distinct_names, excerpt, file_name, highlight, title, where
from psirag_kb.web.sessions import Session, Sessions

HERE = Path(__file__).parent
COOKIE = "psirag_session"
MAX_FORM_BYTES = 16_384
MAX_QUERY_CHARS = 2_000
MAX_NEXT_CHARS = 4_096
"""The longest page address kept across sign-in (a longer one signs in to the search page)."""


class WebError(Exception):
    """A request the page answers with an error page and a status code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Web:
    """The page over one daemon: its settings, sessions and templates, and what every route
    does first (find the person, bound a form, render a page or an error)."""

    def __init__(self, daemon: Any, owner_token: str, people: People | None,
                 limiter: FailureLimiter, policy: HostPolicy, session_minutes: int,
                 persons: PersonLimiter | None = None, threads: int = 8,
                 audit: AuditLog | None = None, auth: AuthConfig | None = None,
                 proxy: Any = None, oidc: Any = None) -> None:
        self.auth = auth or AuthConfig()
        self.proxy = proxy
        """The trusted sign-in proxy (psirag_kb.serving.proxy.Proxy), or None."""
        self.oidc = oidc
        """The OpenID provider's client (psirag_kb.web.oidc.OIDCClient), or None."""
        self.mine = MyTokens(people) if people is not None else None
        self.secret = secrets.token_bytes(32)
        """Derives a proxied person's form token (they have no session cookie)."""
        self.daemon = daemon
        self.audit = audit
        self.persons = persons
        self.owner_token = owner_token
        self.people = people
        self.limiter = limiter
        self.policy = policy
        self.sessions = Sessions(min(session_minutes * 60.0, self.auth.session_hours * 3600.0))
        self.threads = anyio.CapacityLimiter(threads)
        self.templates = Environment(loader=FileSystemLoader(HERE / "templates"),
                                     autoescape=select_autoescape(default=True,
                                                                  default_for_string=True))
        self.templates.globals.update(where=where, file_name=file_name, highlight=highlight,
                                     title=title, excerpt=excerpt, distinct_names=distinct_names,
                                     zip=zip)
        self.templates.globals["when"] = lambda stamp: "never" if not stamp else \
            time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))
        self.templates.filters["flat"] = lambda text: " ".join(str(text).split())

    async def call(self, function: Callable[[], Any]) -> Any:
        """Run a daemon call on the worker threads."""
        return await anyio.to_thread.run_sync(function, limiter=self.threads)

    def render(self, request: Request, name: str, code: int = 200,
               session: Session | None = None, **values: Any) -> HTMLResponse:
        """A template as a page (no caching: it shows one person's documents)."""
        html = self.templates.get_template(name).render(
            request=request, session=session, modes=MODES, **values)
        return HTMLResponse(html, code, headers={"Cache-Control": "no-store"})

    def access_of(self, session: Session) -> Access | None:
        """What the signed-in person may read now (None once their token is revoked or they
        are removed)."""
        if session.owner:
            return OWNER
        if self.people is None:
            return None
        if session.kind in ("oidc", "proxy"):
            return self.people.access_of(session.name)
        assert session.token_sha256 is not None
        return self.people.access_by_hash(session.token_sha256)

    def proxied(self, request: Request) -> tuple[Session, Access] | None:
        """The person a trusted sign-in proxy names (None: no proxy, an untrusted peer or no
        header); SignInRefused when their groups grant nothing."""
        if self.proxy is None:
            return None
        # judged on the socket's address, never one a reverse proxy forwarded
        access = self.proxy.access(socket_peer(request.scope), request.headers)
        if access is None:
            return None
        csrf = hmac.new(self.secret, access.name.encode(), "sha256").hexdigest()
        return Session(access.name, None, csrf, float("inf"), "proxy"), access

    def signed_in(self, request: Request) -> tuple[Session, Access] | None:
        """The request's session and Access, or None."""
        try:
            found = self.proxied(request)
        except SignInRefused:
            found = None
        if found is not None:
            return found
        session = self.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            return None
        access = self.access_of(session)
        if access is None:
            self.sessions.close(request.cookies.get(COOKIE))
            return None
        return session, access

    def page(self, view: Callable[..., Any], resume: bool = True) -> Callable[[Request], Any]:
        """A GET view for a signed-in person; others go to the sign-in page, which brings them
        back to this address afterwards (`resume`)."""

        async def endpoint(request: Request) -> Response:
            try:
                found = self.proxied(request)
            except SignInRefused as exc:
                self.audited(None, "signin proxy", client(request), 403)
                return self.error(request, 403, str(exc))
            found = found or self.signed_in(request)
            if found is None:
                back = asked(request) if resume else "/"
                return RedirectResponse("/signin" + ("" if back == "/" else "?" + urlencode(
                    {"next": back})), 303)
            session, access = found
            wait = self.persons.wait(access.name) if self.persons is not None and \
                not session.owner else 0.0
            if wait > 0:  # the API's per-person limit, shared (the owner is never limited)
                assert self.persons is not None  # wait is 0.0 without a limiter
                response = self.error(request, 429, f"more than {self.persons.per_minute} "
                                      f"requests a minute; retry in {int(wait) + 1} s", session)
                response.headers["Retry-After"] = str(int(wait) + 1)
                return response
            try:
                return await view(request, session, access)
            except WebError as exc:
                return self.error(request, exc.status, str(exc), session)
            except NodeNotFound as exc:
                return self.error(request, 404, str(exc), session)
            except AccessDenied as exc:
                return self.error(request, 403, str(exc), session)
            except KBError as exc:
                return self.error(request, 400, str(exc), session)

        return endpoint

    def error(self, request: Request, status: int, message: str,
              session: Session | None = None) -> HTMLResponse:
        """An error page."""
        return self.render(request, "error.html", status, session, status=status,
                           message=message)

    async def form(self, request: Request) -> dict[str, str]:
        """A POSTed urlencoded form (bounded), after the cross-site checks."""
        origin = request.headers.get("origin")
        if request.headers.get("sec-fetch-site") == "cross-site" or not \
                self.policy.origin_allowed(origin, request.headers.get("host")):
            raise WebError(403, "a form from another site is refused")
        length = request.headers.get("content-length", "")
        if not length.isdigit() or int(length) > MAX_FORM_BYTES:
            raise WebError(413, "the form is missing its length or too large")
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise WebError(413, "the form is too large")
        try:
            fields = parse_qs(body.decode("utf-8"), max_num_fields=20)
        except (UnicodeDecodeError, ValueError) as exc:
            raise WebError(400, f"the form cannot be read ({exc})") from None
        return {key: values[0] for key, values in fields.items()}

    def audited(self, person: str | None, action: str, client: str,
                status: int | None = None) -> None:
        """A sign-in or sign-out in audit.jsonl (person None: a token nobody holds)."""
        if self.audit is not None:
            self.audit.record(person, action, status=status, client=client)


def client(request: Request) -> str:
    """The address a request came from: the socket's, or the client an allowed reverse proxy
    forwarded ("?" when unknown)."""
    return client_address(request.scope)


def asked(request: Request) -> str:
    """The address a request asked for: its path and query, as sent."""
    path = request.scope.get("raw_path") or request.url.path.encode()
    query = request.scope.get("query_string", b"")
    return (path + (b"?" + query if query else b"")).decode("latin-1")


def safe_next(raw: str | None) -> str:
    """`raw` when it is a page of this site (a path such as "/?q=..."), else "/": never another
    site ("//host", "/\\host", "https://..."), never a control character a browser would drop."""
    if not raw or len(raw) > MAX_NEXT_CHARS or not raw.startswith("/") or \
            raw.startswith(("//", "/signin", "/signout", "/auth/")) or "\\" in raw or \
            any(ord(c) <= 0x20 or 0x7F <= ord(c) <= 0x9F for c in raw):
        return "/"
    parts = urlsplit(raw)
    if parts.scheme or parts.netloc:
        return "/"
    return raw

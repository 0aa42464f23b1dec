"""The page's routes: thin views over the daemon's methods, each called with the person's Access.

Who may read what is decided below (the engine answers "not found" for what a person may not
read); the routes only find the session's Access and render. Every response carries a strict
Content-Security-Policy; every POST needs the session's (or the sign-in form's) CSRF token and
is refused when a browser says it comes from another site.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
import anyio.to_thread
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from psirag_kb.access import OWNER, Access
from psirag_kb.config import AuthConfig
from psirag_kb.errors import AccessDenied, KBError, NodeNotFound
from psirag_kb.people import MyTokens, People, PeopleError, SignInRefused, UnknownPerson, token_hash
from psirag_kb.search.retrieval import MODES
from psirag_kb.serving.audit import AuditLog
from psirag_kb.serving.auth import FailureLimiter, HostPolicy, PersonLimiter
from psirag_kb.serving.http import header
from psirag_kb.web.render import excerpt, file_name, highlight, title, where
from psirag_kb.web.sessions import Session, Sessions, same_token

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
COOKIE = "psirag_session"
PRE_COOKIE = "psirag_signin"
"""Before sign-in: the sign-in form's CSRF token, matched against this cookie."""
FLOW_COOKIE = "psirag_oidc"
"""During a provider sign-in: a random value binding the flow to this browser. SameSite=Lax
(it must come back on the provider's redirect to /auth/callback), path /auth, used once."""
MAX_TOKEN_JSON_BYTES = 4_096
RESULTS = 10
NEIGHBOURS = 2
CHAT_PASSAGES = 5
"""Passages a chat turn finds (and shows numbered)."""
MAX_FORM_BYTES = 16_384
MAX_QUERY_CHARS = 2_000
MAX_NEXT_CHARS = 4_096
"""The longest page address kept across sign-in (a longer one signs in to the search page)."""
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


class WebError(Exception):
    """A request the page answers with an error page and a status code."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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
            await _plain(403, "this Host is not a name of this server")(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.inner(scope, receive, sending)


def _plain(status: int, text: str) -> Response:
    return Response(text, status, media_type="text/plain; charset=utf-8")


class Web:
    """The page over one daemon: sessions, sign-in and the views."""

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
        self.finishing: dict[str, tuple[str, str, float]] = {}
        """Provider sign-ins verified at /auth/callback, waiting for /auth/finish: flow cookie
        hash -> (person, next page, deadline)."""
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
                                     title=title, excerpt=excerpt)
        self.templates.globals["when"] = lambda stamp: "never" if not stamp else \
            time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))
        self.templates.filters["flat"] = lambda text: " ".join(str(text).split())

    # -- plumbing ---------------------------------------------------------------------------

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
        access = self.proxy.access(request.client.host if request.client else None,
                                   request.headers)
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
                self.audited(None, "signin proxy", _client(request), 403)
                return self.error(request, 403, str(exc))
            found = found or self.signed_in(request)
            if found is None:
                back = _asked(request) if resume else "/"
                return RedirectResponse("/signin" + ("" if back == "/" else "?" + urlencode(
                    {"next": back})), 303)
            session, access = found
            wait = self.persons.wait(access.name) if self.persons is not None and \
                not session.owner else 0.0
            if wait > 0:  # the API's per-person limit, shared (the owner is never limited)
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

    # -- sign in and out --------------------------------------------------------------------

    async def signin_page(self, request: Request) -> Response:
        """GET /signin?next=...: the token form, with a fresh sign-in CSRF token in a cookie
        (a person already signed in goes on to `next`)."""
        back = safe_next(request.query_params.get("next"))
        if self.signed_in(request) is not None:
            return RedirectResponse(back, 303)
        return self.signin_form(request, 200, "", back)

    def signin_form(self, request: Request, status: int, message: str,
                    back: str = "/") -> Response:
        csrf = secrets.token_urlsafe(32)
        response = self.render(request, "signin.html", status, csrf=csrf, message=message,
                               back=back, tokens_on_page=self.auth.tokens_on_page,
                               button=self.oidc.config.button if self.oidc else None,
                               provider=("/auth/login" + ("" if back == "/" else "?" + urlencode(
                                   {"next": back}))) if self.oidc else None)
        response.set_cookie(PRE_COOKIE, csrf, max_age=600, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/signin")
        return response

    async def signin(self, request: Request) -> Response:
        """POST /signin: a right token opens a session; wrong ones meet the limiter (which
        never refuses the right token: it is checked first)."""
        try:
            fields = await self.form(request)
        except WebError as exc:
            return self.error(request, exc.status, str(exc))
        back = safe_next(fields.get("next"))
        if not self.auth.tokens_on_page:
            return self.signin_form(request, 403, "Tokens are not accepted on this page; use "
                                    "the sign-in button.", back)
        if not same_token(fields.get("csrf"), request.cookies.get(PRE_COOKIE) or "\x00"):
            return self.signin_form(request, 403, "The form expired; sign in again.", back)
        token = fields.get("token", "").strip()
        name, digest = self.who(token)
        client = request.client.host if request.client else "?"
        if name is None:
            wait = self.limiter.retry_after(client)
            if wait > 0:  # not audited: the limiter bounds the lines wrong tokens write
                return self.signin_form(request, 429, f"Too many wrong tokens; retry in "
                                                      f"{int(wait) + 1} s.", back)
            self.limiter.failed(client)
            self.audited(None, "signin", client, 401)  # never the token: it may be a typo of one
            return self.signin_form(request, 401, "That token is not accepted.", back)
        session_id, _ = self.sessions.open(name, digest)
        self.audited(name, "signin", client)
        response = RedirectResponse(back, 303)
        response.set_cookie(COOKIE, session_id, max_age=int(self.sessions.lifetime_s),
                            httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        response.delete_cookie(PRE_COOKIE, path="/signin")
        return response

    def audited(self, person: str | None, action: str, client: str,
                status: int | None = None) -> None:
        """A sign-in or sign-out in audit.jsonl (person None: a token nobody holds)."""
        if self.audit is not None:
            self.audit.record(person, action, status=status, client=client)

    def who(self, token: str) -> tuple[str | None, str | None]:
        """(name, token hash) of a token: the owner's api.token has no hash; (None, None) for
        a wrong one."""
        if token and hmac.compare_digest(token.encode("utf-8", "surrogateescape"),
                                         self.owner_token.encode()):
            return OWNER.name, None
        if token and self.people is not None:
            access = self.people.access_for(token)
            if access is not None:
                return access.name, token_hash(token)
        return None, None

    # -- sign in through the OpenID provider ------------------------------------------------

    def redirect_uri(self, request: Request) -> str:
        """<the page's origin>/auth/callback, the origin as the browser reached it."""
        return f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}" \
               "/auth/callback"

    def refused(self, request: Request, status: int, reason: str,
                person: str | None = None) -> Response:
        """A refused provider sign-in: a clear page, no session, a line in audit.jsonl (the
        reason, never the code or a token)."""
        self.audited(person, f"signin oidc refused: {reason[:200]}", _client(request), status)
        response = self.render(request, "signin_refused.html", status, message=reason,
                               button=self.oidc.config.button if self.oidc else None)
        response.delete_cookie(FLOW_COOKIE, path="/auth")
        return response

    async def oidc_login(self, request: Request) -> Response:
        """GET /auth/login?next=...: off to the provider (state, nonce, PKCE), the flow bound
        to this browser by a Lax cookie."""
        if self.oidc is None:
            return self.error(request, 404, "this page signs in with tokens only")
        from psirag_kb.web.oidc import SignInFailed

        back = safe_next(request.query_params.get("next"))
        browser = secrets.token_urlsafe(32)
        oidc = self.oidc
        try:
            url = await self.call(lambda: oidc.start(browser, back, self.redirect_uri(request)))
        except SignInFailed as exc:
            return self.refused(request, 503, str(exc))
        response = RedirectResponse(url, 303)
        response.set_cookie(FLOW_COOKIE, browser, max_age=600, httponly=True, samesite="lax",
                            secure=request.url.scheme == "https", path="/auth")
        return response

    async def oidc_callback(self, request: Request) -> Response:
        """GET /auth/callback?code&state: the provider's answer. Checked, the person signed in
        at the registry; the session itself opens at /auth/finish, reached from this
        site's own page (a same-site navigation, on which the Strict cookie is then sent)."""
        if self.oidc is None:
            return self.error(request, 404, "this page signs in with tokens only")
        from psirag_kb.web.oidc import ProviderDown, SignInFailed, digest

        params = request.query_params
        browser = request.cookies.get(FLOW_COOKIE)
        oidc = self.oidc
        try:
            flow = oidc.take(params.get("state", ""), browser)
            if params.get("error"):
                raise SignInFailed(f"the provider did not sign you in ("
                                   f"{params.get('error', '')[:100]})")
            claims = await self.call(lambda: oidc.finish(params.get("code", ""), flow))
            name, groups = oidc.person(claims)
        except ProviderDown as exc:
            return self.refused(request, 502, str(exc))
        except SignInFailed as exc:
            return self.refused(request, 403, str(exc))
        if self.people is None:
            return self.refused(request, 403, "this server keeps no people")
        people = self.people
        try:
            await self.call(lambda: people.sign_in(name, "oidc", groups, self.auth.groups))
        except PeopleError as exc:
            return self.refused(request, 403, str(exc), name)
        assert browser is not None
        now = time.monotonic()
        self.finishing = {k: v for k, v in self.finishing.items() if v[2] > now}
        self.finishing[digest(browser)] = (name, flow.back, now + 60.0)
        return self.render(request, "signin_finish.html", 200, back=flow.back)

    async def oidc_finish(self, request: Request) -> Response:
        """GET /auth/finish: opens the session of the sign-in this browser just completed
        (once), sets the Strict session cookie and goes on to the page asked for."""
        from psirag_kb.web.oidc import digest

        browser = request.cookies.get(FLOW_COOKIE)
        done = self.finishing.pop(digest(browser), None) if browser else None
        if done is None or done[2] <= time.monotonic():
            return RedirectResponse("/signin", 303)
        name, back, _ = done
        session_id, _ = self.sessions.open(name, None, "oidc")
        self.audited(name, "signin oidc", _client(request))
        response = RedirectResponse(back, 303)
        response.set_cookie(COOKIE, session_id, max_age=int(self.sessions.lifetime_s),
                            httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        response.delete_cookie(FLOW_COOKIE, path="/auth")
        return response

    # -- personal tokens --------------------------------------------------------------------

    async def tokens_page(self, request: Request, session: Session, access: Access) -> Response:
        """GET /tokens: the person's own tokens (name, created, last used)."""
        return self.tokens_view(request, session, access)

    def tokens_view(self, request: Request, session: Session, access: Access,
                    made: dict[str, str] | None = None, message: str = "",
                    status: int = 200) -> Response:
        if self.mine is None or session.owner:
            raise WebError(404, "personal tokens belong to people; the owner uses api.token")
        return self.render(request, "tokens.html", status, session=session,
                           tokens=self.mine.list(access)["tokens"], made=made, message=message)

    async def tokens_make(self, request: Request, session: Session, access: Access) -> Response:
        """POST /tokens (name): a new token, shown this once."""
        fields = await self.session_form(request, session)
        assert self.mine is not None
        try:
            made = self.mine.make(access, fields.get("name", "").strip())
        except PeopleError as exc:
            return self.tokens_view(request, session, access, message=str(exc), status=400)
        self.audited(access.name, "token make", _client(request))
        return self.tokens_view(request, session, access, made=made)

    async def tokens_revoke(self, request: Request, session: Session,
                            access: Access) -> Response:
        """POST /tokens/revoke (name): the token stops working now."""
        fields = await self.session_form(request, session)
        assert self.mine is not None
        try:
            self.mine.revoke(access, fields.get("name", ""))
        except PeopleError as exc:
            return self.tokens_view(request, session, access, message=str(exc), status=404)
        self.audited(access.name, "token revoke", _client(request))
        return RedirectResponse("/tokens", 303)

    async def session_form(self, request: Request, session: Session) -> dict[str, str]:
        """A POSTed form of a signed-in person, its CSRF token checked."""
        if self.mine is None or session.owner:
            raise WebError(404, "personal tokens belong to people; the owner uses api.token")
        fields = await self.form(request)
        if not same_token(fields.get("csrf"), session.csrf):
            raise WebError(403, "the form's token is wrong; reload the page")
        return fields

    async def my_tokens(self, request: Request) -> Response:
        """/api/me/tokens[/<name>] on the page's origin: the page's session with its CSRF token
        in X-CSRF-Token (never cross-site), or a person's token as Bearer."""
        method, name = request.method, request.path_params.get("name")
        allowed = ("DELETE",) if name is not None else ("GET", "POST")
        if method not in allowed:
            return JSONResponse({"error": f"{method} is not allowed here; use "
                                          f"{', '.join(allowed)}"}, 405)
        origin = request.headers.get("origin")
        if request.headers.get("sec-fetch-site") == "cross-site" or not \
                self.policy.origin_allowed(origin, request.headers.get("host")):
            return JSONResponse({"error": "cross-origin requests are refused"}, 403)
        access = await self.token_caller(request)
        if access is None:
            return JSONResponse({"error": "sign in on the page (and send its CSRF token in "
                                          "X-CSRF-Token) or send Authorization: Bearer <token>"},
                                401, headers={"WWW-Authenticate": "Bearer"})
        assert self.mine is not None
        try:
            if method == "GET":
                return JSONResponse(self.mine.list(access))
            if method == "DELETE":
                result = self.mine.revoke(access, str(name))
                self.audited(access.name, "token revoke", _client(request))
                return JSONResponse(result)
            length = request.headers.get("content-length", "")
            if not length.isdigit() or int(length) > MAX_TOKEN_JSON_BYTES:
                return JSONResponse({"error": "send a small JSON body with a Content-Length"},
                                    413)
            try:
                body = json.loads(await request.body())
            except ValueError:
                return JSONResponse({"error": "malformed JSON"}, 400)
            if not isinstance(body, dict) or set(body) != {"name"} or \
                    not isinstance(body["name"], str):
                return JSONResponse({"error": "the body must be {\"name\": \"...\"}"}, 400)
            result = self.mine.make(access, body["name"])
            self.audited(access.name, "token make", _client(request))
            return JSONResponse(result)
        except UnknownPerson as exc:
            return JSONResponse({"error": str(exc)}, 404)
        except PeopleError as exc:
            return JSONResponse({"error": str(exc)}, 400)

    async def token_caller(self, request: Request) -> Access | None:
        """Who calls /api/me/tokens: a person's Bearer token, the proxy's person, or the page's
        session when X-CSRF-Token matches it."""
        if self.mine is None or self.people is None:
            return None
        given = request.headers.get("authorization", "")
        if given.startswith("Bearer "):
            return self.people.access_for(given[len("Bearer "):].strip())
        found = self.signed_in(request)
        if found is None:
            return None
        session, access = found
        if session.owner or not same_token(request.headers.get("x-csrf-token"), session.csrf):
            return None
        return access

    async def signout(self, request: Request) -> Response:
        """POST /signout: ends the session (with its CSRF token)."""
        session = self.sessions.get(request.cookies.get(COOKIE))
        try:
            fields = await self.form(request)
        except WebError as exc:
            return self.error(request, exc.status, str(exc), session)
        if session is None:
            return RedirectResponse("/signin", 303)
        if not same_token(fields.get("csrf"), session.csrf):
            return self.error(request, 403, "the form's token is wrong; reload the page", session)
        self.sessions.close(request.cookies.get(COOKIE))
        self.audited(session.name, "signout", request.client.host if request.client else "?")
        response = RedirectResponse("/signin", 303)
        response.delete_cookie(COOKIE, path="/")
        return response

    # -- views ------------------------------------------------------------------------------

    def folders(self, access: Access) -> list[str]:
        """The folders offered in the filter: the watched ones the person may read, then their
        grants (the engine limits every search to the grants whatever is asked)."""
        shown = [str(f) for f in self.daemon.folders if access.may_read(str(f))]
        return list(dict.fromkeys([*shown, *(access.grants or ())]))

    async def search(self, request: Request, session: Session, access: Access) -> Response:
        """GET /?q=...&in=...&mode=...: the search box and, with a query, the results."""
        params = request.query_params
        q = params.get("q", "")[:MAX_QUERY_CHARS]
        mode = params.get("mode") or ""
        inside = params.get("in") or ""
        if mode and mode not in MODES:
            raise WebError(400, f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        if inside and (not os.path.isabs(inside) or "\x00" in inside):
            raise WebError(400, "the folder filter takes an absolute path")
        values: dict[str, Any] = {"q": q, "mode": mode, "inside": inside,
                                  "folders": self.folders(access), "result": None}
        if q.strip():
            within = [inside] if inside else None

            def run() -> dict[str, Any]:
                result = self.daemon.query(q, mode or None, RESULTS, within=within,
                                           access=access)
                for item in result["results"]:
                    item["above"] = self.above(int(item["chunk_id"]), access)
                return result

            values["result"] = await self.call(run)
        return self.render(request, "search.html", session=session, **values)

    def above(self, chunk_id: int, access: Access) -> list[dict[str, Any]]:
        """The topic path above a passage ([] while the tree does not hold it yet)."""
        try:
            return list(self.daemon.path(chunk_id, access=access)["path"])
        except NodeNotFound:
            return []

    async def source(self, request: Request, session: Session, access: Access) -> Response:
        """GET /source/<id>: a passage among its neighbours, where it is, and a download."""
        chunk_id = _number(request.path_params["chunk_id"], "passage")
        found = await self.call(lambda: self.daemon.chunk(chunk_id, NEIGHBOURS, access=access))
        above = await self.call(lambda: self.above(chunk_id, access))
        q = request.query_params.get("q", "")[:MAX_QUERY_CHARS]
        before = [n for n in found.get("neighbours", []) if n["offset"] < 0]
        after = [n for n in found.get("neighbours", []) if n["offset"] > 0]
        return self.render(request, "source.html", session=session, chunk=found, q=q,
                           before=before, after=after, above=above,
                           downloadable=bool(found.get("path")))

    async def download(self, request: Request, session: Session, access: Access) -> Response:
        """GET /download/<id>: the original file as an attachment, never rendered."""
        chunk_id = _number(request.path_params["chunk_id"], "passage")
        found = await self.call(lambda: self.daemon.original(chunk_id, access=access))
        path = Path(found["path"])
        if not path.is_file():
            raise WebError(404, f"{file_name(found['source'])} is no longer on disk")
        name = file_name(found["source"])
        return FileResponse(path, media_type="application/octet-stream",
                            content_disposition_type="attachment", filename=name,
                            headers={"Cache-Control": "no-store"})

    async def answer(self, request: Request, session: Session, access: Access) -> Response:
        """GET /answer?q=...: with JavaScript (js=1) a page that streams the steps; without, the
        whole answer once it is ready."""
        q = request.query_params.get("q", "")[:MAX_QUERY_CHARS]
        streamed = request.query_params.get("js") == "1"
        values: dict[str, Any] = {"q": q, "streamed": streamed, "answer": None, "steps": []}
        if q.strip() and not streamed:
            steps: list[dict[str, Any]] = []
            result = await self.call(lambda: self.daemon.answer(q, None, steps.append,
                                                                access=access))
            values |= {"answer": shaped(result), "steps": steps}
        if q.strip() and streamed:
            values["stream"] = "/answer/stream?" + urlencode({"q": q})
        return self.render(request, "answer.html", session=session, **values)

    async def answer_stream(self, request: Request, session: Session,
                            access: Access) -> Response:
        """GET /answer/stream?q=...: server-sent events, one `step` per retrieval, then the
        rendered `answer` (or an `failed` message)."""
        q = request.query_params.get("q", "")[:MAX_QUERY_CHARS]
        if not q.strip():
            raise WebError(400, "the question is empty")
        fragment = self.templates.get_template("answer_body.html")
        return StreamingResponse(self.events(q, access, fragment), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})  # nginx: pass each step

    async def events(self, q: str, access: Access, fragment: Any) -> AsyncIterator[bytes]:
        """The agent's steps as they complete, then its answer."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any] | None] = asyncio.Queue()

        def emit(kind: str, value: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

        def run() -> None:
            try:
                result = self.daemon.answer(q, None, lambda s: emit("step", s), access=access)
                emit("answer", fragment.render(answer=shaped(result)))
            except KBError as exc:
                emit("failed", str(exc))
            except Exception as exc:  # noqa: BLE001 - a failing answer never stops the server
                log.exception("streamed answer failed")
                emit("failed", f"internal error ({type(exc).__name__}); see daemon.log")
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        worker = asyncio.ensure_future(self.call(run))
        count = 0
        while (item := await queue.get()) is not None:
            kind, value = item
            if kind == "step":
                count += 1
                value = {"n": count, "query": str(value.get("query", "")),
                         "passages": len(value.get("passages") or []),
                         "action": str(value.get("action") or "retrieve")}
            yield f"event: {kind}\ndata: {json.dumps(value)}\n\n".encode()
        await worker

    async def tree(self, request: Request, session: Session, access: Access) -> Response:
        """GET /tree and /tree/<node>: a node's abstract and its children, down to passages."""
        raw = request.path_params.get("node_id")
        node_id = None if raw is None else _number(raw, "topic", signed=True)
        node = await self.call(lambda: self.daemon.node(node_id, access=access))
        return self.render(request, "tree.html", session=session, node=node)

    async def status(self, request: Request, session: Session, access: Access) -> Response:
        """GET /status: files by state, problems and freshness, as far as the person may read."""
        status = await self.call(lambda: self.daemon.status(access=access))
        return self.render(request, "status.html", session=session, info=status,
                           everything=access.everything)

    # -- issue 32: the chat view (branch i32b) ----------------------------------------------

    async def chat(self, request: Request, session: Session, access: Access) -> Response:
        """GET /chat: the person's conversations and a box that starts a new one."""
        listed = await self.call(lambda: self.daemon.conversations(access=access))
        return self.render(request, "chat.html", session=session, current=None, turns=[],
                           conversations=listed["conversations"])

    async def chat_open(self, request: Request, session: Session, access: Access) -> Response:
        """GET /chat/<id>: one of the person's conversations, its turns and the box that
        continues it (anyone else's id is "not found", as an id that never existed)."""
        ident = _conversation(request.path_params["conversation"])
        found, listed = await self.call(lambda: (
            self.daemon.conversation(ident, access=access),
            self.daemon.conversations(access=access)))
        return self.render(request, "chat.html", session=session, current=found,
                           turns=[chat_turn(t) for t in found["turns"]],
                           conversations=listed["conversations"])

    async def chat_ask(self, request: Request, session: Session, access: Access) -> Response:
        """POST /chat and /chat/<id>: the question `q` asked as the next turn (a new
        conversation without an id), then back to the conversation's page."""
        fields = await self.form(request)
        if not same_token(fields.get("csrf"), session.csrf):
            raise WebError(403, "the form's token is wrong; reload the page")
        q = fields.get("q", "").strip()[:MAX_QUERY_CHARS]
        if not q:
            raise WebError(400, "the question is empty")
        raw = request.path_params.get("conversation")
        ident = None if raw is None else _conversation(raw)

        def run() -> str:
            target = ident or self.daemon.new_conversation("", access=access)["id"]
            self.daemon.ask(q, conversation=target, mode="agent", k=CHAT_PASSAGES,
                            access=access)
            return target

        target = await self.call(run)
        return RedirectResponse(f"/chat/{target}#turn-last", 303)


def chat_turn(turn: dict[str, Any]) -> dict[str, Any]:
    """A stored turn as the chat page shows it: numbered passages, the answer's [n] linked to
    their source view, passages no longer readable marked as withheld."""
    passages = []
    for index, passage in enumerate(turn.get("passages") or [], start=1):
        passages.append({**passage, "number": int(passage.get("number") or index),
                         "id": passage.get("chunk_id")})
    numbers = {p["number"]: p for p in passages if not p.get("withheld")}
    answer = turn.get("answer")
    return {**turn, "passages": passages,
            "answer_html": _cited(answer, numbers) if isinstance(answer, str) and answer
            else None}


def _conversation(raw: str) -> str:
    """A conversation id from a page address (404 for one that cannot be an id)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", raw):
        raise WebError(404, f"no conversation {raw!r}")
    return raw


def shaped(result: dict[str, Any]) -> dict[str, Any]:
    """An agent result as the page shows it: MCP's shape (the same note without an LLM), with
    the answer's [n] markers linked to their citations."""
    from psirag_kb.serving.shapes import answer_result

    out = dict(answer_result(result))
    numbers = {int(c.get("number") or i + 1): c for i, c in enumerate(out["citations"])}
    out["answer_html"] = _cited(out.get("answer") or "", numbers)
    return out


def _cited(text: str, numbers: dict[int, Any]) -> Markup:
    """The answer escaped, each known [n] made a link to its source view."""
    escaped = str(escape(text))

    def link(match: re.Match[str]) -> str:
        cited = numbers.get(int(match.group(1)))
        if cited is None:
            return match.group(0)
        return f'<a class="cite" href="/source/{int(cited["id"])}">[{int(match.group(1))}]</a>'

    return Markup(re.sub(r"\[(\d{1,4})\]", link, escaped))


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"


def _asked(request: Request) -> str:
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


def _number(raw: str, what: str, signed: bool = False) -> int:
    if not re.fullmatch(r"-?\d{1,18}" if signed else r"\d{1,18}", raw):
        raise WebError(404, f"no {what} {raw}")
    return int(raw)


def build_web_app(web: Web) -> ASGIApp:
    """The page's ASGI application: routes, static files, security headers."""
    routes = [
        Route("/", web.page(web.search)),
        Route("/signin", web.signin_page, methods=["GET"]),
        Route("/signin", web.signin, methods=["POST"]),
        Route("/signout", web.signout, methods=["POST"]),
        Route("/source/{chunk_id}", web.page(web.source)),
        Route("/download/{chunk_id}", web.page(web.download)),
        Route("/answer", web.page(web.answer)),
        Route("/answer/stream", web.page(web.answer_stream, resume=False)),
        Route("/tree", web.page(web.tree)),
        Route("/tree/{node_id}", web.page(web.tree)),
        Route("/status", web.page(web.status)),
        Route("/auth/login", web.oidc_login, methods=["GET"]),
        Route("/auth/callback", web.oidc_callback, methods=["GET"]),
        Route("/auth/finish", web.oidc_finish, methods=["GET"]),
        Route("/tokens", web.page(web.tokens_page), methods=["GET"]),
        Route("/tokens", web.page(web.tokens_make), methods=["POST"]),
        Route("/tokens/revoke", web.page(web.tokens_revoke), methods=["POST"]),
        Route("/api/me/tokens", web.my_tokens, methods=["GET", "POST"]),
        Route("/api/me/tokens/{name}", web.my_tokens, methods=["DELETE"]),
        Route("/chat", web.page(web.chat), methods=["GET"]),
        Route("/chat", web.page(web.chat_ask), methods=["POST"]),
        Route("/chat/{conversation}", web.page(web.chat_open), methods=["GET"]),
        Route("/chat/{conversation}", web.page(web.chat_ask), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Headers(Starlette(routes=routes), web.policy)

"""Signing in and out: the token form, and the OpenID provider's redirect flow."""

from __future__ import annotations

import hmac
import secrets
import time
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from psirag_kb.access import OWNER
from psirag_kb.people import PeopleError, token_hash
from psirag_kb.web.sessions import same_token
from psirag_kb.web.site import COOKIE, Web, WebError, client, safe_next

PRE_COOKIE = "psirag_signin"
"""Before sign-in: the sign-in form's CSRF token, matched against this cookie."""
FLOW_COOKIE = "psirag_oidc"
"""During a provider sign-in: a random value binding the flow to this browser. SameSite=Lax
(it must come back on the provider's redirect to /auth/callback), path /auth, used once."""


class TokenSignIn:
    """/signin with a token (the owner's api.token or a person's), and /signout."""

    def __init__(self, web: Web) -> None:
        self.web = web

    async def signin_page(self, request: Request) -> Response:
        """GET /signin?next=...: the token form, with a fresh sign-in CSRF token in a cookie
        (a person already signed in goes on to `next`)."""
        back = safe_next(request.query_params.get("next"))
        if self.web.signed_in(request) is not None:
            return RedirectResponse(back, 303)
        return self.signin_form(request, 200, "", back)

    def signin_form(self, request: Request, status: int, message: str,
                    back: str = "/") -> Response:
        """The sign-in page with a message, its CSRF token set in a cookie for /signin."""
        csrf = secrets.token_urlsafe(32)
        oidc = self.web.oidc
        response = self.web.render(request, "signin.html", status, csrf=csrf, message=message,
                                   back=back, tokens_on_page=self.web.auth.tokens_on_page,
                                   button=oidc.config.button if oidc else None,
                                   provider=("/auth/login" + ("" if back == "/" else "?" +
                                             urlencode({"next": back}))) if oidc else None)
        response.set_cookie(PRE_COOKIE, csrf, max_age=600, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/signin")
        return response

    async def signin(self, request: Request) -> Response:
        """POST /signin: a right token opens a session; wrong ones meet the limiter (which
        never refuses the right token: it is checked first)."""
        try:
            fields = await self.web.form(request)
        except WebError as exc:
            return self.web.error(request, exc.status, str(exc))
        back = safe_next(fields.get("next"))
        if not self.web.auth.tokens_on_page:
            return self.signin_form(request, 403, "Tokens are not accepted on this page; use "
                                    "the sign-in button.", back)
        if not same_token(fields.get("csrf"), request.cookies.get(PRE_COOKIE) or "\x00"):
            return self.signin_form(request, 403, "The form expired; sign in again.", back)
        token = fields.get("token", "").strip()
        name, digest = self.who(token)
        peer = client(request)
        if name is None:
            wait = self.web.limiter.retry_after(peer)
            if wait > 0:  # not audited: the limiter bounds the lines wrong tokens write
                return self.signin_form(request, 429, f"Too many wrong tokens; retry in "
                                                      f"{int(wait) + 1} s.", back)
            self.web.limiter.failed(peer)
            self.web.audited(None, "signin", peer, 401)  # never the token: it may be a typo of one
            return self.signin_form(request, 401, "That token is not accepted.", back)
        # a new id at every sign-in; the one this browser held (maybe planted) ends now
        self.web.sessions.close(request.cookies.get(COOKIE))
        session_id, _ = self.web.sessions.open(name, digest)
        self.web.audited(name, "signin", peer)
        response = RedirectResponse(back, 303)
        response.set_cookie(COOKIE, session_id, max_age=int(self.web.sessions.lifetime_s),
                            httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        response.delete_cookie(PRE_COOKIE, path="/signin")
        return response

    def who(self, token: str) -> tuple[str | None, str | None]:
        """(name, token hash) of a token: the owner's api.token has no hash; (None, None) for
        a wrong one."""
        if token and hmac.compare_digest(token.encode("utf-8", "surrogateescape"),
                                         self.web.owner_token.encode()):
            return OWNER.name, None
        if token and self.web.people is not None:
            access = self.web.people.access_for(token)
            if access is not None:
                return access.name, token_hash(token)
        return None, None

    async def signout(self, request: Request) -> Response:
        """POST /signout: ends the session (with its CSRF token)."""
        session = self.web.sessions.get(request.cookies.get(COOKIE))
        try:
            fields = await self.web.form(request)
        except WebError as exc:
            return self.web.error(request, exc.status, str(exc), session)
        if session is None:
            return RedirectResponse("/signin", 303)
        if not same_token(fields.get("csrf"), session.csrf):
            return self.web.error(request, 403, "the form's token is wrong; reload the page",
                                  session)
        self.web.sessions.close(request.cookies.get(COOKIE))
        self.web.audited(session.name, "signout", client(request))
        response = RedirectResponse("/signin", 303)
        response.delete_cookie(COOKIE, path="/")
        return response


class ProviderSignIn:
    """/auth/login, /auth/callback and /auth/finish: signing in at the OpenID provider."""

    def __init__(self, web: Web) -> None:
        self.web = web
        self.finishing: dict[str, tuple[str, str, float]] = {}
        """Provider sign-ins verified at /auth/callback, waiting for /auth/finish: flow cookie
        hash -> (person, next page, deadline)."""

    def redirect_uri(self, request: Request) -> str:
        """<the page's origin>/auth/callback, the origin as the browser reached it."""
        return f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}" \
               "/auth/callback"

    def refused(self, request: Request, status: int, reason: str,
                person: str | None = None) -> Response:
        """A refused provider sign-in: a clear page, no session, a line in audit.jsonl (the
        reason, never the code or a token)."""
        self.web.audited(person, f"signin oidc refused: {reason[:200]}", client(request), status)
        oidc = self.web.oidc
        response = self.web.render(request, "signin_refused.html", status, message=reason,
                                   button=oidc.config.button if oidc else None)
        response.delete_cookie(FLOW_COOKIE, path="/auth")
        return response

    async def oidc_login(self, request: Request) -> Response:
        """GET /auth/login?next=...: off to the provider (state, nonce, PKCE), the flow bound
        to this browser by a Lax cookie."""
        if self.web.oidc is None:
            return self.web.error(request, 404, "this page signs in with tokens only")
        from psirag_kb.web.oidc import SignInFailed

        back = safe_next(request.query_params.get("next"))
        browser = secrets.token_urlsafe(32)
        oidc = self.web.oidc
        try:
            url = await self.web.call(lambda: oidc.start(browser, back, self.redirect_uri(request)))
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
        if self.web.oidc is None:
            return self.web.error(request, 404, "this page signs in with tokens only")
        from psirag_kb.web.oidc import ProviderDown, SignInFailed, digest

        params = request.query_params
        browser = request.cookies.get(FLOW_COOKIE)
        oidc = self.web.oidc
        try:
            flow = oidc.take(params.get("state", ""), browser)
            if params.get("error"):
                raise SignInFailed(f"the provider did not sign you in ("
                                   f"{params.get('error', '')[:100]})")
            claims = await self.web.call(lambda: oidc.finish(params.get("code", ""), flow))
            name, groups = oidc.person(claims)
        except ProviderDown as exc:
            return self.refused(request, 502, str(exc))
        except SignInFailed as exc:
            return self.refused(request, 403, str(exc))
        if self.web.people is None:
            return self.refused(request, 403, "this server keeps no people")
        people = self.web.people
        try:
            await self.web.call(lambda: people.sign_in(name, "oidc", groups, self.web.auth.groups))
        except PeopleError as exc:
            return self.refused(request, 403, str(exc), name)
        assert browser is not None
        now = time.monotonic()
        self.finishing = {k: v for k, v in self.finishing.items() if v[2] > now}
        self.finishing[digest(browser)] = (name, flow.back, now + 60.0)
        return self.web.render(request, "signin_finish.html", 200, back=flow.back)

    async def oidc_finish(self, request: Request) -> Response:
        """GET /auth/finish: opens the session of the sign-in this browser just completed
        (once), sets the Strict session cookie and goes on to the page asked for."""
        from psirag_kb.web.oidc import digest

        browser = request.cookies.get(FLOW_COOKIE)
        done = self.finishing.pop(digest(browser), None) if browser else None
        if done is None or done[2] <= time.monotonic():
            return RedirectResponse("/signin", 303)
        name, back, _ = done
        self.web.sessions.close(request.cookies.get(COOKIE))  # a new id at every sign-in
        session_id, _ = self.web.sessions.open(name, None, "oidc")
        self.web.audited(name, "signin oidc", client(request))
        response = RedirectResponse(back, 303)
        response.set_cookie(COOKIE, session_id, max_age=int(self.web.sessions.lifetime_s),
                            httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        response.delete_cookie(FLOW_COOKIE, path="/auth")
        return response

"""A person's own tokens: the /tokens pages, and the JSON /api/me/tokens on the page's origin."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from psirag_kb.access import Access
from psirag_kb.people import PeopleError
from psirag_kb.serving import mytokens
from psirag_kb.serving.ops import Op
from psirag_kb.web.sessions import Session, same_token
from psirag_kb.web.site import Web, WebError, client

MAX_TOKEN_JSON_BYTES = 4_096


def answered(answer: mytokens.Answer) -> Response:
    """A shared operation's answer as the page's JSON response."""
    return JSONResponse(answer.payload, answer.status)


class TokenPages:
    """/tokens: a person lists, makes and revokes their tokens (the owner has api.token)."""

    def __init__(self, web: Web) -> None:
        self.web = web

    async def tokens_page(self, request: Request, session: Session, access: Access) -> Response:
        """GET /tokens: the person's own tokens (name, created, last used)."""
        return self.tokens_view(request, session, access)

    def tokens_view(self, request: Request, session: Session, access: Access,
                    made: dict[str, str] | None = None, message: str = "",
                    status: int = 200) -> Response:
        """The tokens page, with a token just made or a message."""
        if self.web.mine is None or session.owner:
            raise WebError(404, "personal tokens belong to people; the owner uses api.token")
        return self.web.render(request, "tokens.html", status, session=session,
                               tokens=self.web.mine.list(access)["tokens"], made=made,
                               message=message)

    async def tokens_make(self, request: Request, session: Session, access: Access) -> Response:
        """POST /tokens (name): a new token, shown this once."""
        fields = await self.session_form(request, session)
        assert self.web.mine is not None
        try:
            made = self.web.mine.make(access, fields.get("name", "").strip())
        except PeopleError as exc:
            return self.tokens_view(request, session, access, message=str(exc), status=400)
        self.web.audited(access.name, "token make", client(request))
        return self.tokens_view(request, session, access, made=made)

    async def tokens_revoke(self, request: Request, session: Session,
                            access: Access) -> Response:
        """POST /tokens/revoke (name): the token stops working now."""
        fields = await self.session_form(request, session)
        assert self.web.mine is not None
        try:
            self.web.mine.revoke(access, fields.get("name", ""))
        except PeopleError as exc:
            return self.tokens_view(request, session, access, message=str(exc), status=404)
        self.web.audited(access.name, "token revoke", client(request))
        return RedirectResponse("/tokens", 303)

    async def session_form(self, request: Request, session: Session) -> dict[str, str]:
        """A POSTed form of a signed-in person, its CSRF token checked."""
        if self.web.mine is None or session.owner:
            raise WebError(404, "personal tokens belong to people; the owner uses api.token")
        fields = await self.web.form(request)
        if not same_token(fields.get("csrf"), session.csrf):
            raise WebError(403, "the form's token is wrong; reload the page")
        return fields


class TokenAPI:
    """/api/me/tokens[/<name>] on the page's origin, for the page's script or a Bearer token:
    the table's operations served by serving.mytokens, as the API serves them; only finding
    the caller (and reading a small body) is the page's."""

    def __init__(self, web: Web) -> None:
        self.web = web

    def routes(self) -> list[Route]:
        """One route per path of the operations, for every method (one without an operation
        is answered 405 in the API's words, not Starlette's)."""
        return [Route(path, _Path(self, by_method), methods=None)
                for path, by_method in mytokens.by_path().items()]

    async def my_tokens(self, request: Request, by_method: dict[str, Op]) -> Response:
        """/api/me/tokens[/<name>] on the page's origin: the page's session with its CSRF token
        in X-CSRF-Token (never cross-site), or a person's token as Bearer."""
        entry = by_method.get(request.method)
        if entry is None:
            refused = answered(mytokens.not_allowed(request.method, request.url.path,
                                                    by_method))
            refused.headers["Allow"] = ", ".join(sorted(by_method))
            return refused
        origin = request.headers.get("origin")
        if request.headers.get("sec-fetch-site") == "cross-site" or not \
                self.web.policy.origin_allowed(origin, request.headers.get("host")):
            return JSONResponse({"error": "cross-origin requests are refused"}, 403)
        access = await self.token_caller(request)
        if access is None:
            return JSONResponse({"error": "sign in on the page (and send its CSRF token in "
                                          "X-CSRF-Token) or send Authorization: Bearer <token>"},
                                401, headers={"WWW-Authenticate": "Bearer"})
        assert self.web.mine is not None
        body: Any = None
        if entry.body is not None:
            length = request.headers.get("content-length", "")
            if not length.isdigit() or int(length) > MAX_TOKEN_JSON_BYTES:
                return JSONResponse({"error": "send a small JSON body with a Content-Length"},
                                    413)
            try:
                body = json.loads(await request.body())
            except (UnicodeDecodeError, ValueError) as exc:
                return JSONResponse({"error": f"malformed JSON: {exc}"}, 400)
            except RecursionError:
                return JSONResponse({"error": "malformed JSON: nested too deeply"}, 400)
        where = client(request)

        def audited(caller: Access, action: str, name: str) -> None:
            if self.web.audit is not None:
                self.web.audit.record(caller.name, action, name, client=where)

        return answered(mytokens.serve(self.web.mine, entry, access,
                                       dict(request.path_params), body, audited))

    async def token_caller(self, request: Request) -> Access | None:
        """Who calls /api/me/tokens: a person's Bearer token, the proxy's person, or the page's
        session when X-CSRF-Token matches it."""
        if self.web.mine is None or self.web.people is None:
            return None
        given = request.headers.get("authorization", "")
        if given.startswith("Bearer "):
            return self.web.people.access_for(given[len("Bearer "):].strip())
        found = self.web.signed_in(request)
        if found is None:
            return None
        session, access = found
        if session.owner or not same_token(request.headers.get("x-csrf-token"), session.csrf):
            return None
        return access


class _Path:
    """A path's handler as an ASGI app (so that its route takes every method)."""

    def __init__(self, api: TokenAPI, by_method: dict[str, Op]) -> None:
        self.api, self.by_method = api, by_method

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.api.my_tokens(Request(scope, receive), self.by_method)
        await response(scope, receive, send)

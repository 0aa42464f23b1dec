"""The page's ASGI application: each address routed to the handler of its job."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from psirag_kb.web.chat import Chat
from psirag_kb.web.middleware import Headers
from psirag_kb.web.signin import ProviderSignIn, TokenSignIn
from psirag_kb.web.site import HERE, Web
from psirag_kb.web.tokens import TokenAPI, TokenPages
from psirag_kb.web.views import Views


def build_web_app(web: Web) -> ASGIApp:
    """The page's ASGI application: routes, static files, security headers."""
    signin, provider = TokenSignIn(web), ProviderSignIn(web)
    tokens, api, views, chat = TokenPages(web), TokenAPI(web), Views(web), Chat(web)
    routes = [
        Route("/", web.page(views.search)),
        _by_method("/signin", GET=signin.signin_page, POST=signin.signin),
        Route("/signout", signin.signout, methods=["POST"]),
        Route("/source/{chunk_id}", web.page(views.source)),
        Route("/download/{chunk_id}", web.page(views.download)),
        Route("/answer", web.page(views.answer)),
        Route("/answer/stream", web.page(views.answer_stream, resume=False)),
        Route("/tree", web.page(views.tree)),
        Route("/tree/{node_id}", web.page(views.tree)),
        Route("/map", web.page(views.map)),
        Route("/status", web.page(views.status)),
        Route("/auth/login", provider.oidc_login, methods=["GET"]),
        Route("/auth/callback", provider.oidc_callback, methods=["GET"]),
        Route("/auth/finish", provider.oidc_finish, methods=["GET"]),
        _by_method("/tokens", GET=web.page(tokens.tokens_page),
                   POST=web.page(tokens.tokens_make)),
        Route("/tokens/revoke", web.page(tokens.tokens_revoke), methods=["POST"]),
        *api.routes(),
        _by_method("/chat", GET=web.page(chat.chat), POST=web.page(chat.chat_ask)),
        _by_method("/chat/{conversation}", GET=web.page(chat.chat_open),
                   POST=web.page(chat.chat_ask)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Headers(Starlette(routes=routes), web.policy)


def _by_method(path: str, **handlers: Callable[[Request], Awaitable[Response]]) -> Route:
    """One route for a path with a handler per method: a method none serves is 405 with an
    `Allow` naming them all (two routes of one path would name only the first one's)."""
    async def endpoint(request: Request) -> Response:
        return await handlers["GET" if request.method == "HEAD" else request.method](request)

    return Route(path, endpoint, methods=list(handlers))

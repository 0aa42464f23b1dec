"""The page's ASGI application: each address routed to the handler of its job."""

from __future__ import annotations

from starlette.applications import Starlette
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
        Route("/signin", signin.signin_page, methods=["GET"]),
        Route("/signin", signin.signin, methods=["POST"]),
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
        Route("/tokens", web.page(tokens.tokens_page), methods=["GET"]),
        Route("/tokens", web.page(tokens.tokens_make), methods=["POST"]),
        Route("/tokens/revoke", web.page(tokens.tokens_revoke), methods=["POST"]),
        *api.routes(),
        Route("/chat", web.page(chat.chat), methods=["GET"]),
        Route("/chat", web.page(chat.chat_ask), methods=["POST"]),
        Route("/chat/{conversation}", web.page(chat.chat_open), methods=["GET"]),
        Route("/chat/{conversation}", web.page(chat.chat_ask), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Headers(Starlette(routes=routes), web.policy)

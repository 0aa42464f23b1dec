"""The people operations: an admin's users and each person's own tokens (the table lets only
admins reach /api/users)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from starlette.requests import Request
from starlette.responses import Response

from psirag_kb.access import Access
from psirag_kb.people import MyTokens, Users
from psirag_kb.service.guard import HTTPError, reply
from psirag_kb.serving import mytokens
from psirag_kb.serving.ops import Op
from psirag_kb.serving.requests import Body, parse

if TYPE_CHECKING:
    from psirag_kb.service.endpoints import Endpoints

__all__ = ["HANDLERS"]
# the bodies these operations take are request Body models (cast: Op.body is any BaseModel)


def _users(ctx: Endpoints) -> Users:
    if ctx.users is None:
        raise HTTPError(404, "this server keeps no people")
    return ctx.users


def _mine(ctx: Endpoints) -> MyTokens:
    if ctx.mine is None:
        raise HTTPError(404, "this server keeps no people")
    return ctx.mine


async def users_list(ctx: Endpoints, request: Request, access: Access, entry: Op,
                     params: dict[str, Any]) -> Response:
    """GET /api/users."""
    return reply(200, await ctx.call(_users(ctx).list))


async def users_add(ctx: Endpoints, request: Request, access: Access, entry: Op,
                    params: dict[str, Any]) -> Response:
    """POST /api/users."""
    users = _users(ctx)
    assert entry.body is not None
    body = parse(cast("type[Body]", entry.body), await ctx.body(request)).args()
    ctx.audited(access, "users add", body["name"])
    return reply(200, await ctx.call(
        lambda: users.add(body["name"], body["role"] or "reader", body["read"] or [])))


async def users_revoke(ctx: Endpoints, request: Request, access: Access, entry: Op,
                       params: dict[str, Any]) -> Response:
    """DELETE /api/users/<name>: their conversations go too."""
    users = _users(ctx)
    ctx.audited(access, "users revoke", params["name"])
    revoked = await ctx.call(users.revoke, params["name"])
    await ctx.call(ctx.app.person_removed, params["name"])
    return reply(200, revoked)


async def users_rotate(ctx: Endpoints, request: Request, access: Access, entry: Op,
                       params: dict[str, Any]) -> Response:
    """POST /api/users/<name>/rotate."""
    users = _users(ctx)
    ctx.audited(access, "users rotate", params["name"])
    return reply(200, await ctx.call(users.rotate, params["name"]))


async def users_regrant(ctx: Endpoints, request: Request, access: Access, entry: Op,
                        params: dict[str, Any]) -> Response:
    """POST /api/users/<name>/grant or /ungrant."""
    users = _users(ctx)
    action = entry.path.rsplit("/", 1)[1]
    ctx.audited(access, f"users {action}", params["name"])
    assert entry.body is not None
    read = parse(cast("type[Body]", entry.body), await ctx.body(request)).args()["read"]
    change = users.grant if action == "grant" else users.ungrant
    return reply(200, await ctx.call(change, params["name"], read))


async def my_tokens(ctx: Endpoints, request: Request, access: Access, entry: Op,
                    params: dict[str, Any]) -> Response:
    """GET, POST /api/me/tokens and DELETE /api/me/tokens/<name> (serving.mytokens, which
    the page's origin serves too)."""
    mine = _mine(ctx)
    body = await ctx.body(request) if entry.body is not None else None
    answer = await ctx.call(mytokens.serve, mine, entry, access, params, body, ctx.audited)
    return reply(answer.status, answer.payload)


HANDLERS = {"users_list": users_list, "users_add": users_add, "users_revoke": users_revoke,
            "users_rotate": users_rotate, "users_grant": users_regrant,
            "users_ungrant": users_regrant, "my_tokens": my_tokens,
            "my_token_make": my_tokens, "my_token_revoke": my_tokens}

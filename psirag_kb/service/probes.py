"""The operations of the daemon itself: liveness, readiness, metrics and this API's OpenAPI
document."""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from psirag_kb.access import Access
from psirag_kb.service.guard import HTTPError, reply
from psirag_kb.service.metrics import CONTENT_TYPE
from psirag_kb.serving.openapi import openapi as document
from psirag_kb.serving.ops import OPS, Op

if TYPE_CHECKING:
    from psirag_kb.service.endpoints import Endpoints

__all__ = ["HANDLERS"]


async def health(ctx: Endpoints, request: Request, access: Access | None, entry: Op,
                 params: dict[str, Any]) -> Response:
    """GET /api/health: without a token only `ok`, for a person no server paths."""
    found = ctx.app.health()
    state = request.scope.get("state", {})
    if not state.get("authorized", True):
        found = {"ok": found.get("ok", True)}
    elif not getattr(state.get("access"), "everything", True):
        found.pop("data_dir", None)  # a person's grants never show the server's paths
    return reply(200, found)


async def ready(ctx: Endpoints, request: Request, access: Access | None, entry: Op,
                params: dict[str, Any]) -> Response:
    """GET /api/ready: 503 with the reasons while not ready."""
    reasons = await ctx.call(ctx.app.ready)
    if reasons:
        return reply(503, {"ready": False, "reasons": reasons}, headers={"Retry-After": "5"})
    return reply(200, {"ready": True})


async def metrics_text(ctx: Endpoints, request: Request, access: Access | None, entry: Op,
                       params: dict[str, Any]) -> Response:
    """GET /metrics."""
    if ctx.metrics is None:
        raise HTTPError(404, "this server keeps no metrics")
    return Response(await ctx.call(ctx.metrics.render), 200, media_type=CONTENT_TYPE)


async def openapi(ctx: Endpoints, request: Request, access: Access | None, entry: Op,
                  params: dict[str, Any]) -> Response:
    """GET /api/openapi.json."""
    return reply(200, document(OPS, _version()))


def _version() -> str:
    """The installed package's version (the OpenAPI document's info.version)."""
    try:
        return importlib.metadata.version("psirag-kb")
    except importlib.metadata.PackageNotFoundError:
        return "0"


HANDLERS = {"health": health, "ready": ready, "metrics_text": metrics_text,
            "openapi": openapi}

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
from psirag_kb.service.starting import PRIVILEGED, RETRY_AFTER_S, SERVING
from psirag_kb.serving.openapi import openapi as document
from psirag_kb.serving.ops import OPS, Op

if TYPE_CHECKING:
    from psirag_kb.service.endpoints import Endpoints

__all__ = ["HANDLERS"]


def privileged(access: Access | None) -> bool:
    """Whether the caller may learn the daemon's internals (its pid, paths and reasons): the
    admin token, an admin or a monitor."""
    return access is not None and access.role in PRIVILEGED


async def health(ctx: Endpoints, request: Request, access: Access | None, entry: Op,
                 params: dict[str, Any]) -> Response:
    """GET /api/health: the state word, and for an admin or a monitor the pid (and for one
    granted everything the data directory)."""
    found = ctx.app.health()
    if not privileged(access):
        return reply(200, {"ok": found.get("ok", True), "state": found.get("state", SERVING)})
    if access is not None and not access.everything:
        found.pop("data_dir", None)  # a monitor's grants never show the server's paths
    return reply(200, found)


async def ready(ctx: Endpoints, request: Request, access: Access | None, entry: Op,
                params: dict[str, Any]) -> Response:
    """GET /api/ready: 200, or 503 with Retry-After while an index is rebuilt (the reasons
    for an admin or a monitor)."""
    reasons = await ctx.call(ctx.app.ready)
    if not reasons:
        return reply(200, {"ready": True, "state": SERVING})
    shown = {"reasons": reasons} if privileged(access) else {}
    return reply(503, {"ready": False, "state": "rebuilding", **shown},
                 headers={"Retry-After": str(RETRY_AFTER_S)})


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

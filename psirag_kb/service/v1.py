"""The OpenAI-compatible operations on /v1: the one model, and chat completions answered in
agent mode (streamed as server-sent events when asked)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from psirag_kb.access import Access
from psirag_kb.errors import KBError
from psirag_kb.service.guard import HTTPError, reply
from psirag_kb.serving import openai_compat as chat
from psirag_kb.serving.ops import Op

if TYPE_CHECKING:
    from psirag_kb.service.endpoints import Endpoints

__all__ = ["HANDLERS", "KEEP_ALIVE_EVENT_S"]

log = logging.getLogger(__name__)

KEEP_ALIVE_EVENT_S = 10.0
"""A streamed chat completion sends a comment this often while its answer is worked on."""


async def v1_models(ctx: Endpoints, request: Request, access: Access, entry: Op,
                    params: dict[str, Any]) -> Response:
    """GET /v1/models."""
    return reply(200, chat.models())


async def v1_model(ctx: Endpoints, request: Request, access: Access, entry: Op,
                   params: dict[str, Any]) -> Response:
    """GET /v1/models/<id>."""
    if params["model"] != chat.MODEL:
        raise HTTPError(404, f"no model {params['model']!r}; this server has {chat.MODEL!r}")
    return reply(200, chat.model_entry())


async def v1_chat(ctx: Endpoints, request: Request, access: Access, entry: Op,
                  params: dict[str, Any]) -> Response:
    """POST /v1/chat/completions."""
    try:
        asked = chat.parse(await ctx.body(request))
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None
    if asked.model != chat.MODEL:
        raise HTTPError(404, f"no model {asked.model!r}; this server has {chat.MODEL!r}")
    if not asked.stream:
        result = await ctx.call(lambda: _ask(ctx, asked, access))
        return reply(200, chat.completion(asked, result))
    return StreamingResponse(_events(ctx, asked, access), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache",
                                      "X-Accel-Buffering": "no"})  # nginx: pass each chunk


def _ask(ctx: Endpoints, asked: chat.ChatRequest, access: Access) -> dict[str, Any]:
    """The last user message asked after the earlier ones, in agent mode (the agent's answer
    with an LLM, the passages found without)."""
    return ctx.app.ask(asked.question, history=asked.history, mode="agent", access=access)


async def _events(ctx: Endpoints, asked: chat.ChatRequest,
                  access: Access) -> AsyncIterator[bytes]:
    """The opening chunk at once, keep-alive comments while the answer is worked on, then its
    chunks (or an error event: the status line is sent by then)."""
    stream = chat.ChunkStream(asked)
    yield stream.first()
    worker = asyncio.ensure_future(ctx.call(lambda: _ask(ctx, asked, access)))
    while not (await asyncio.wait({worker}, timeout=KEEP_ALIVE_EVENT_S))[0]:
        yield stream.KEEP_ALIVE
    try:
        result = worker.result()
    except KBError as exc:
        events = stream.failed(str(exc))
    except Exception as exc:  # noqa: BLE001 - a failing request never stops the server
        log.exception("streamed chat completion failed")
        events = stream.failed(f"internal error ({type(exc).__name__}); see daemon.log",
                               "server_error")
    else:
        events = stream.rest(result)
    for event in events:
        yield event


HANDLERS = {"v1_models": v1_models, "v1_model": v1_model, "v1_chat": v1_chat}

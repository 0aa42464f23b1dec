"""The search operations served beyond a plain call: a query measured, the agent's answer
streamed as NDJSON."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from psirag_kb.access import Access
from psirag_kb.errors import KBError
from psirag_kb.service.guard import reply
from psirag_kb.serving.ops import Op
from psirag_kb.serving.requests import Body, parse

if TYPE_CHECKING:
    from psirag_kb.service.endpoints import Endpoints

__all__ = ["HANDLERS"]
# the bodies these operations take are request Body models (cast: Op.body is any BaseModel)

log = logging.getLogger(__name__)


async def query(ctx: Endpoints, request: Request, access: Access | None, entry: Op,
                params: dict[str, Any]) -> Response:
    """POST /api/query, its time observed by mode."""
    args = params | await ctx.arguments(request, entry)
    started = time.perf_counter()
    result = await ctx.invoke(entry, access, args)
    if ctx.metrics is not None:
        ctx.metrics.observe_query(str(result.get("mode") or args.get("mode") or ""),
                                  time.perf_counter() - started)
    return reply(200, result)


async def answer(ctx: Endpoints, request: Request, access: Access | None, entry: Op,
                 params: dict[str, Any]) -> Response:
    """POST /api/answer: NDJSON, one {"step"} line per agent step, then the answer."""
    assert entry.body is not None and access is not None
    body = parse(cast("type[Body]", entry.body), await ctx.body(request)).args()
    return StreamingResponse(_lines(ctx, body["text"], body["k"], access),
                             media_type="application/x-ndjson",
                             headers={"Cache-Control": "no-cache"})


async def _lines(ctx: Endpoints, text: str, k: int | None,
                 access: Access) -> AsyncIterator[bytes]:
    """The agent's steps as they complete, then its answer or error."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def emit(line: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(lines.put_nowait, line)

    def run() -> None:
        try:
            emit({"answer": ctx.app.answer(text, k, lambda s: emit({"step": s}),
                                           access=access)})
        except KBError as exc:
            emit({"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a failing request never stops the server
            log.exception("streamed answer failed")
            emit({"error": f"internal error ({type(exc).__name__}); see daemon.log"})
        finally:
            loop.call_soon_threadsafe(lines.put_nowait, None)

    worker = asyncio.ensure_future(ctx.call(run))
    while (line := await lines.get()) is not None:
        yield json.dumps(line).encode("utf-8") + b"\n"
    await worker


HANDLERS = {"query": query, "answer": answer}

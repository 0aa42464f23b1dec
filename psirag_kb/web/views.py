"""The page's views: search, a passage and its file, the answer, the topic tree, the status."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse

from psirag_kb.access import Access
from psirag_kb.errors import KBError, NodeNotFound, TreeEmpty
from psirag_kb.search.retrieval import MODES
from psirag_kb.serving.activity import progress, series
from psirag_kb.web.mapdraw import COLOURINGS, Drawing, area_id, label_of, short
from psirag_kb.web.plots import chart, duration, legend
from psirag_kb.web.render import file_name, shaped
from psirag_kb.web.sessions import Session
from psirag_kb.web.site import MAX_QUERY_CHARS, Web, WebError

log = logging.getLogger(__name__)

RESULTS = 10
NEIGHBOURS = 2


class Views:
    """The GET views of a signed-in person, each over one daemon call with their Access."""

    def __init__(self, web: Web) -> None:
        self.web = web

    def folders(self, access: Access) -> list[str]:
        """The folders offered in the filter: the watched ones the person may read, then their
        grants (the engine limits every search to the grants whatever is asked)."""
        shown = [str(f) for f in self.web.daemon.folders if access.may_read(str(f))]
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
                result = self.web.daemon.query(q, mode or None, RESULTS, within=within,
                                               access=access)
                for item in result["results"]:
                    item["above"] = self.above(int(item["chunk_id"]), access)
                return result

            values["result"] = await self.web.call(run)
        return self.web.render(request, "search.html", session=session, **values)

    def above(self, chunk_id: int, access: Access) -> list[dict[str, Any]]:
        """The topic path above a passage ([] while the tree does not hold it yet)."""
        try:
            return list(self.web.daemon.path(chunk_id, access=access)["path"])
        except NodeNotFound:
            return []

    async def source(self, request: Request, session: Session, access: Access) -> Response:
        """GET /source/<id>: a passage among its neighbours, where it is, and a download."""
        chunk_id = number(request.path_params["chunk_id"], "passage")
        daemon = self.web.daemon
        found = await self.web.call(lambda: daemon.chunk(chunk_id, NEIGHBOURS, access=access))
        above = await self.web.call(lambda: self.above(chunk_id, access))
        q = request.query_params.get("q", "")[:MAX_QUERY_CHARS]
        before = [n for n in found.get("neighbours", []) if n["offset"] < 0]
        after = [n for n in found.get("neighbours", []) if n["offset"] > 0]
        return self.web.render(request, "source.html", session=session, chunk=found, q=q,
                               before=before, after=after, above=above,
                               downloadable=bool(found.get("path")))

    async def download(self, request: Request, session: Session, access: Access) -> Response:
        """GET /download/<id>: the original file as an attachment, never rendered."""
        chunk_id = number(request.path_params["chunk_id"], "passage")
        found = await self.web.call(lambda: self.web.daemon.original(chunk_id, access=access))
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
            result = await self.web.call(lambda: self.web.daemon.answer(q, None, steps.append,
                                                                        access=access))
            values |= {"answer": shaped(result), "steps": steps}
        if q.strip() and streamed:
            values["stream"] = "/answer/stream?" + urlencode({"q": q})
        return self.web.render(request, "answer.html", session=session, **values)

    async def answer_stream(self, request: Request, session: Session,
                            access: Access) -> Response:
        """GET /answer/stream?q=...: server-sent events, one `step` per retrieval, then the
        rendered `answer` (or an `failed` message)."""
        q = request.query_params.get("q", "")[:MAX_QUERY_CHARS]
        if not q.strip():
            raise WebError(400, "the question is empty")
        fragment = self.web.templates.get_template("answer_body.html")
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
                result = self.web.daemon.answer(q, None, lambda s: emit("step", s), access=access)
                emit("answer", fragment.render(answer=shaped(result)))
            except KBError as exc:
                emit("failed", str(exc))
            except Exception as exc:  # noqa: BLE001 - a failing answer never stops the server
                log.exception("streamed answer failed")
                emit("failed", f"internal error ({type(exc).__name__}); see daemon.log")
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        worker = asyncio.ensure_future(self.web.call(run))
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
        node_id = None if raw is None else number(raw, "topic", signed=True)
        try:
            node = await self.web.call(lambda: self.web.daemon.node(node_id, access=access))
        except TreeEmpty:
            return await self.no_tree(request, session, access, "Topics")
        return self.web.render(request, "tree.html", session=session, node=node)

    async def no_tree(self, request: Request, session: Session, access: Access,
                      title: str) -> Response:
        """Why there is no topic tree to show yet (nothing indexed, the first ingest running,
        a rebuild), with the running jobs' progress for those who see the daemon's work."""
        status = await self.web.call(lambda: self.web.daemon.status(access=access))
        activity = getattr(self.web.daemon, "activity", None)
        jobs = activity_view(status, activity, time.time())["jobs"] if access.everything and \
            activity is not None else []
        return self.web.render(request, "no_tree.html", session=session, title=title,
                               chunks=int(status.get("chunks") or 0),
                               tree=status.get("tree") or {}, jobs=jobs)

    async def map(self, request: Request, session: Session, access: Access) -> Response:
        """GET /map?node=&chunk=&colour=: the topic map of a node (the root by default) as far
        as the person may read, a passage's area and path marked (`chunk`)."""
        params = request.query_params
        node_id = number(params["node"], "topic") if params.get("node") else None
        chunk_id = number(params["chunk"], "passage") if params.get("chunk") else None
        colouring = params.get("colour") or "folder"
        if colouring not in COLOURINGS:
            raise WebError(400, f"unknown colouring {colouring!r}; choose one of "
                           f"{', '.join(COLOURINGS)}")
        keep = {k: v for k, v in (("colour", "" if colouring == "folder" else colouring),
                                  ("chunk", str(chunk_id or ""))) if v}
        try:
            top = await self.web.call(lambda: self.web.daemon.topic_map(node_id, access=access))
        except TreeEmpty:
            return await self.no_tree(request, session, access, "Topic map")
        path = await self.web.call(lambda: self.above(chunk_id, access)) if chunk_id else []
        drawing = Drawing(top, colouring, self.folders(access), [n["id"] for n in path],
                          keep=keep, passage=chunk_id if path else None)
        return self.web.render(request, "map.html", session=session, top=top, path=path,
                               chunk_id=chunk_id, drawing=drawing, colouring=colouring,
                               at_top=node_id is None,
                               keep=keep, label_of=label_of, area_id=area_id, short=short)

    async def status(self, request: Request, session: Session, access: Access) -> Response:
        """GET /status: files by state, problems and freshness, as far as the person may read."""
        status = await self.web.call(lambda: self.web.daemon.status(access=access))
        activity = getattr(self.web.daemon, "activity", None)
        drawn = activity_view(status, activity, time.time()) if access.everything and \
            activity is not None else None
        return self.web.render(request, "status.html", session=session, info=status,
                               everything=access.everything, activity=drawn)


def activity_view(status: dict[str, Any], activity: Any, now: float) -> dict[str, Any]:
    """The daemon's last hour as charts, and its long jobs with their progress."""
    samples = activity.history()
    drawn = series(samples)
    routes = drawn["routes"]
    return {
        "charts": [chart("Ingest", {"chunks/s": drawn["ingest"]}, now, "chunks/s"),
                   chart("Writer queue", {"tasks": drawn["writer_queue"]}, now, "tasks"),
                   chart("Query latency", {"mean": drawn["latency_ms"]}, now, "ms"),
                   chart("Requests by route", routes, now, "/min")],
        "routes": legend(list(routes)),
        "jobs": [job | {"left": duration(job.get("eta_s"))} for job in
                 progress(status, activity.running_jobs(), samples, now)],
    }


def number(raw: str, what: str, signed: bool = False) -> int:
    """A number from a page address (404 for one that cannot be a `what`)."""
    if not re.fullmatch(r"-?\d{1,18}" if signed else r"\d{1,18}", raw):
        raise WebError(404, f"no {what} {raw}")
    return int(raw)

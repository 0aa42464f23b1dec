"""The knowledge base as an MCP server: search, fetch, answer, browse and status tools."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Protocol

import anyio.from_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from psirag_kb.errors import KBError
from psirag_kb.search.retrieval import MODES
from psirag_kb.serving.shapes import (
    AnswerResult,
    Fetched,
    NodeResult,
    SearchResult,
    StatusResult,
    answer_result,
    fetched,
    node_result,
    search_result,
    status_result,
)

log = logging.getLogger(__name__)

MAX_K = 100
MAX_NEIGHBOURS = 5

INSTRUCTIONS = (
    "psirag-kb is the user's own knowledge base: the documents in their indexed folders (notes, "
    "papers, docs, code), searchable by meaning and by keyword. Call `search` first, then "
    "`fetch` a result's id to read its full passage and the text around it; `answer` drafts a "
    "cited answer, `browse` walks the topic tree, `status` says what is indexed and how fresh."
)
SEARCH = (
    "Search the user's indexed documents; returns ranked passages, each with an `id` for "
    "`fetch`, its `source` file, its `location` (the page of a PDF, the slide, the sheet and rows "
    "of a spreadsheet, the paragraphs and heading of a document, the notebook cell, the mail "
    "part; lines [first, last] of a text file), a score and a ~300-character snippet. Use `path` "
    "to search only inside a folder or file."
)
FETCH = (
    "Read one search result in full: the passage's text, source and location, plus up to 5 "
    "passages before and after it in the same file with `neighbours`."
)
ANSWER = (
    "Answer a question from the documents: with an LLM configured, a written answer and the "
    "passages it cites; without one, the passages several rounds of retrieval found (answer it "
    "yourself from them). Slower than `search`; prefer `search` + `fetch` for lookups."
)
BROWSE = (
    "Browse the topic tree: a node's abstract (key phrases or a summary of everything below "
    "it) and its children, the root by default. Pass a child's `node` to go down; a child "
    "chunk's `id` works with `fetch`."
)
STATUS = (
    "What the knowledge base holds and how fresh it is: files by state, chunks, files that "
    "failed or were skipped (and why), pending work and stale indexes."
)
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)


class Backend(Protocol):
    """What the tools ask of a knowledge base (a KBClient, or the daemon object)."""

    def query(self, text: str, mode: str | None = None, k: int | None = None,
              summarize: bool = False, within: list[str] | None = None) -> dict[str, Any]: ...
    def chunk(self, chunk_id: int, neighbours: int = 0) -> dict[str, Any]: ...
    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]: ...
    def node(self, node_id: int | None = None) -> dict[str, Any]: ...
    def status(self) -> dict[str, Any]: ...
    def ask(self, question: str, *, history: list[Any] | None = None,
            mode: str | None = None, k: int | None = None,
            within: list[str] | None = None) -> dict[str, Any]: ...


HISTORY = (
    "the conversation so far, oldest first: the earlier questions as strings (or "
    "{role, content} messages); a follow-up such as \"what are its options?\" is then "
    "searched with the subject of the earlier turns")
MAX_HISTORY = 50


def _history(history: list[Any] | None) -> list[dict[str, Any]] | None:
    """The `history` argument as messages (a string is an earlier question)."""
    if not history:
        return None
    if len(history) > MAX_HISTORY:
        raise ToolError(f"history holds at most {MAX_HISTORY} turns")
    return [{"role": "user", "content": item} if isinstance(item, str) else item
            for item in history]


@contextmanager
def _reported() -> Iterator[None]:
    """Turn a knowledge-base error into a tool error the assistant reads."""
    try:
        yield
    except KBError as exc:
        raise ToolError(str(exc)) from exc


def within(path: str | list[str] | None, remote: bool = False) -> list[str] | None:
    """Absolute, normalised paths from a search's `path` argument (None: everything); `~` is
    this machine's home, so it is left alone for a remote daemon."""
    if path is None:
        return None
    raws = [path] if isinstance(path, str) else list(path)
    out = []
    for raw in raws:
        text = raw.strip() if remote else os.path.expanduser(raw.strip())
        if not os.path.isabs(text):
            raise ToolError(f"path {raw!r} must be an absolute path of an indexed folder or "
                            "file, such as /home/me/notes")
        out.append(os.path.normpath(text))
    return out or None


def _progress(ctx: Context | None) -> Callable[[dict[str, Any]], None]:
    """An agent step callback (on a worker thread) that reports each retrieval as progress."""
    count = 0

    def on_step(step: dict[str, Any]) -> None:
        nonlocal count
        count += 1
        if ctx is None:
            return
        try:
            anyio.from_thread.run(ctx.report_progress, count, None,
                                  f"retrieval {count}: {step.get('query', '')}")
        except Exception as exc:  # progress is a courtesy; the answer must not fail for it
            log.debug("progress not reported: %s", exc)

    return on_step


def http_access(ctx: Context | None) -> dict[str, Any]:
    """The `access` keyword of an MCP call over the daemon's HTTP: the Access the guard found
    for the request's bearer token (a call without one is refused, never the owner's)."""
    request = None
    if ctx is not None:
        try:
            request = ctx.request_context.request
        except ValueError:
            request = None
    scope = getattr(request, "scope", None) or {}
    access = scope.get("state", {}).get("access")
    if access is None:
        raise ToolError("this MCP call carries no accepted bearer token")
    return {"access": access}


def build_server(backend: Backend,
                 access_of: Callable[[Context | None], dict[str, Any]] | None = None
                 ) -> MCPServer:
    """An MCP server whose tools call `backend` (a KBClient or the daemon object); with
    `access_of` (the daemon's /mcp: `http_access`) each call passes the caller's Access on."""

    def person(ctx: Context | None) -> dict[str, Any]:
        return {} if access_of is None else access_of(ctx)

    # WARNING: the SDK configures the root logger when nothing has (cli.py and daemon.py have)
    server = MCPServer("psirag-kb", instructions=INSTRUCTIONS, log_level="WARNING")

    _search_tool(server, backend, person)
    _fetch_tool(server, backend, person)
    _answer_tool(server, backend, person)
    _browse_tool(server, backend, person)
    _status_tool(server, backend, person)
    return server


def _search_tool(server: MCPServer, backend: Backend,
                 person: Callable[[Context | None], dict[str, Any]]) -> None:
    """Register the `search` tool."""
    @server.tool(description=SEARCH, annotations=READ_ONLY)
    def search(
        query: Annotated[str, Field(description="the question or search terms; \"quoted text\" "
                                                "must occur in every result as written")],
        k: Annotated[int, Field(description=f"number of results, 1-{MAX_K}",
                                json_schema_extra={"minimum": 1, "maximum": MAX_K})] = 10,
        mode: Annotated[str, Field(
            description="hybrid (default: keywords and meaning fused), tree, sparse (BM25 "
                        "keywords), dense (meaning)",
            json_schema_extra={"enum": list(MODES)})] = "hybrid",
        path: Annotated[str | list[str] | None, Field(
            description="only search inside these absolute folder or file paths")] = None,
        history: Annotated[list[str | dict[str, Any]] | None, Field(description=HISTORY)] = None,
        ctx: Context | None = None,
    ) -> SearchResult:
        """Ranked passages for a query."""
        if mode not in MODES:
            raise ToolError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}, not {k}")
        paths = within(path, remote=bool(getattr(backend, "remote", False)))
        # backends without the filter still search
        extra: dict[str, Any] = {"within": paths} if paths else {}
        extra |= person(ctx)
        earlier = _history(history)
        with _reported():
            if earlier:
                return search_result(backend.ask(query, history=earlier, mode=mode, k=k,
                                                 **extra))
            return search_result(backend.query(query, mode=mode, k=k, **extra))



def _fetch_tool(server: MCPServer, backend: Backend,
                person: Callable[[Context | None], dict[str, Any]]) -> None:
    """Register the `fetch` tool."""
    @server.tool(description=FETCH, annotations=READ_ONLY)
    def fetch(
        id: Annotated[str, Field(description="a result id from search (or a chunk id from "
                                             "browse)")],
        neighbours: Annotated[int, Field(
            description=f"passages to add before and after it, 0-{MAX_NEIGHBOURS}",
            json_schema_extra={"minimum": 0, "maximum": MAX_NEIGHBOURS})] = 0,
        ctx: Context | None = None,
    ) -> Fetched:
        """One passage in full, with its neighbours."""
        if not id.strip().isdigit():
            raise ToolError(f"id {id!r} is not a result id; ids are the digits search returns")
        if not 0 <= neighbours <= MAX_NEIGHBOURS:
            raise ToolError(f"neighbours must be between 0 and {MAX_NEIGHBOURS}, not "
                            f"{neighbours}")
        with _reported():
            return fetched(backend.chunk(int(id), neighbours, **person(ctx)))



def _answer_tool(server: MCPServer, backend: Backend,
                 person: Callable[[Context | None], dict[str, Any]]) -> None:
    """Register the `answer` tool."""
    @server.tool(description=ANSWER, annotations=READ_ONLY)
    def answer(
        question: Annotated[str, Field(description="the question, in a full sentence")],
        history: Annotated[list[str | dict[str, Any]] | None, Field(description=HISTORY)] = None,
        ctx: Context | None = None,
    ) -> AnswerResult:
        """The agent's answer or the passages it found."""
        if not question.strip():
            raise ToolError("the question is empty")
        earlier = _history(history)
        with _reported():
            if earlier:
                return answer_result(backend.ask(question, history=earlier, mode="agent",
                                                 **person(ctx)))
            return answer_result(backend.answer(question, on_step=_progress(ctx),
                                                **person(ctx)))



def _browse_tool(server: MCPServer, backend: Backend,
                 person: Callable[[Context | None], dict[str, Any]]) -> None:
    """Register the `browse` tool."""
    @server.tool(description=BROWSE, annotations=READ_ONLY)
    def browse(
        node: Annotated[int | None, Field(
            description="an abstract node's id (from a child's `node`); omit for the root")]
        = None,
        ctx: Context | None = None,
    ) -> NodeResult:
        """A tree node's abstract and children."""
        with _reported():
            return node_result(backend.node(node, **person(ctx)))



def _status_tool(server: MCPServer, backend: Backend,
                 person: Callable[[Context | None], dict[str, Any]]) -> None:
    """Register the `status` tool."""
    @server.tool(description=STATUS, annotations=READ_ONLY)
    def status(ctx: Context | None = None) -> StatusResult:
        """Counts, problems and freshness."""
        with _reported():
            return status_result(backend.status(**person(ctx)))

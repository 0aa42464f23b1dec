"""The MCP tools' logic over a fake backend, through the SDK's in-process client."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError

from psirag_kb.errors import ChunkNotFound, KBError
from psirag_kb.service.mcp import build_server, within
from psirag_kb.serving.shapes import (
    NO_LLM_NOTE,
    answer_result,
    location,
    node_result,
    search_result,
    snippet,
    status_result,
)

PASSAGE = {"rank": 1, "score": 0.123456, "source": "/notes/a.md", "lines": [3, 7],
           "text": "alpha beta", "chunk_id": 12, "path": "/notes/a.md"}


class FakeBackend:
    """Records calls; answers in the shapes the real clients return."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.fail: Exception | None = None

    def _called(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((name, args, kwargs))
        if self.fail is not None:
            raise self.fail

    def query(self, text: str, mode: str | None = None, k: int | None = None,
              summarize: bool = False, **kwargs: Any) -> dict[str, Any]:
        self._called("query", text, mode=mode, k=k, **kwargs)
        return {"query": text, "mode": mode, "results": [PASSAGE] * (k or 1),
                "degraded": ["bm25"]}

    def chunk(self, chunk_id: int, neighbours: int = 0) -> dict[str, Any]:
        self._called("chunk", chunk_id, neighbours)
        return {"chunk_id": chunk_id, "source": "/notes/a.md", "path": "/notes/a.md",
                "lines": [3, 7], "text": "alpha beta",
                "neighbours": [{"chunk_id": 11, "lines": [1, 2], "text": "before", "offset": -1}]}

    def answer(self, text: str, k: int | None = None, on_step: Any = None) -> dict[str, Any]:
        self._called("answer", text)
        for number in (1, 2):
            on_step({"query": f"{text} {number}", "passages": []})
        return {"mode": "agent", "query": text, "answer": "alpha", "status": "answered",
                "citations": [{**PASSAGE, "number": 1}], "steps": [], "hops": 2, "message": "",
                "results": [PASSAGE]}

    def ask(self, question: str, **kwargs: Any) -> dict[str, Any]:
        self._called("ask", question, **kwargs)
        searched = f"{question} (resolved)"
        found = (self.answer(searched, on_step=lambda _step: None) if kwargs.get("mode") == "agent"
                 else self.query(searched, kwargs.get("mode"), kwargs.get("k")))
        return found | {"searched": searched, "rewrite": "offline"}

    def node(self, node_id: int | None = None) -> dict[str, Any]:
        self._called("node", node_id)
        return {"id": 5, "layer": 2, "abstract": "root words", "dirty": True, "parent": None,
                "leaves": 3, "children": [
                    {"id": 4, "kind": "node", "leaves": 2, "abstract": "x " * 400,
                     "dirty": False},
                    {"id": 12, "kind": "leaf", "leaves": 1, "abstract": "alpha beta",
                     "source": "/notes/a.md", "lines": [3, 7]}]}

    def status(self) -> dict[str, Any]:
        self._called("status")
        return {"data_dir": "/data", "files": {"indexed": 2, "skipped": 0, "failed": 0},
                "chunks": 3, "problems": [], "generation": 4, "tree": {"state": "ok"},
                "abstracts": {"dirty": 1, "last_run": None}, "indexes": {},
                "writer": {"queued": 0}}


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


async def call(backend: FakeBackend, name: str, **arguments: Any) -> Any:
    async with Client(build_server(backend)) as client:
        return await client.call_tool(name, arguments)


def test_snippet_is_one_line_cut_at_a_word():
    assert snippet("a  b\n\nc") == "a b c"
    long = snippet("word " * 200)
    assert long.endswith("…") and len(long) <= 301 and "  " not in long
    assert snippet("x" * 500).startswith("x" * 300)


def test_search_result_passes_on_the_note_of_a_quote_found_nowhere():
    note = 'no indexed text contains "x y"'
    out = search_result({"query": '"x y"', "mode": "hybrid", "results": [], "note": note})
    assert out["results"] == [] and out["note"] == note
    assert "note" not in search_result({"query": "x", "mode": "hybrid", "results": [PASSAGE]})


def test_location_prefers_the_document_location_then_a_page_then_lines():
    assert location({"lines": [3, 7]}) == {"lines": [3, 7]}
    assert location({"lines": [3, 7], "location": None}) == {"lines": [3, 7]}
    assert location({"lines": [3, 7], "page": 2}) == {"page": 2}
    assert location({"lines": None}) is None and location({}) is None
    for where in ({"slide": 3, "title": "Results"}, {"sheet": "Q1", "rows": [2, 41]},
                  {"pages": [4, 5]}, {"paragraphs": [14, 19], "heading": "Results"},
                  {"section": "ch2.xhtml", "paragraph": 12}, {"cell": 4, "type": "code"},
                  {"part": "body"}):
        assert location({"lines": [3, 7], "location": where}) == where


@pytest.mark.asyncio
async def test_search_and_fetch_show_where_in_the_document(backend):
    deck = {**PASSAGE, "source": "/d/report.pptx", "location": {"slides": [2, 3], "title": "Q1"}}
    backend.query = lambda text, **kwargs: {"query": text, "mode": "hybrid", "results": [deck]}
    backend.chunk = lambda chunk_id, neighbours=0: {
        **deck, "neighbours": [{"chunk_id": 11, "lines": [1, 2], "text": "before", "offset": -1,
                                "location": {"sheet": "Q1 2024", "rows": [2, 41]}}]}
    found = (await call(backend, "search", query="quarter")).structured_content
    assert found["results"][0]["location"] == {"slides": [2, 3], "title": "Q1"}
    fetched = (await call(backend, "fetch", id="12", neighbours=1)).structured_content
    assert fetched["location"] == {"slides": [2, 3], "title": "Q1"}
    assert fetched["neighbours"][0]["location"] == {"sheet": "Q1 2024", "rows": [2, 41]}


def test_within_takes_absolute_paths_only(monkeypatch):
    monkeypatch.setenv("HOME", "/home/me")
    assert within(None) is None and within([]) is None
    assert within("/notes/") == ["/notes"]
    assert within(["~/papers", "/a/../b"]) == ["/home/me/papers", "/b"]
    with pytest.raises(ToolError, match="absolute path"):
        within("notes")


def test_answer_result_cites_when_answered_and_lists_passages_otherwise():
    answered = answer_result({"query": "q", "answer": "a", "status": "answered",
                              "citations": [{**PASSAGE, "number": 2}], "message": "",
                              "results": [PASSAGE]})
    assert answered["citations"] == [{"id": "12", "source": "/notes/a.md",
                                      "location": {"lines": [3, 7]}, "text": "alpha beta",
                                      "number": 2}]
    assert answered["passages"] == [] and "note" not in answered
    base = {"query": "q", "answer": None, "status": "no_llm", "citations": [PASSAGE],
            "results": [PASSAGE]}
    off = answer_result(base | {"message": "no LLM is configured ([llm] enabled = false ...); "
                                           "these are passages from 2 retrieval(s)"})
    assert off["note"] == NO_LLM_NOTE and off["citations"] == []
    assert [p["id"] for p in off["passages"]] == ["12"]
    down = answer_result(base | {"message": "Ollama at http://x is not reachable"})
    assert down["note"] == "Ollama at http://x is not reachable"


def test_node_result_separates_nodes_to_browse_from_chunks_to_fetch():
    node = node_result(FakeBackend().node())
    assert node["node"] == 5 and node["stale"] is True and node["parent"] is None
    inner, leaf = node["children"]
    assert inner["kind"] == "node" and inner["node"] == 4 and "id" not in inner
    assert len(inner["abstract"]) <= 301
    assert leaf == {"kind": "chunk", "id": "12", "leaves": 1, "abstract": "alpha beta",
                    "source": "/notes/a.md", "location": {"lines": [3, 7]}}


def test_status_result_is_compact_and_adds_the_daemon_when_there_is_one():
    problems = [{"path": f"/n/{i}", "state": "skipped", "reason": "empty file", "x": 1}
                for i in range(25)]
    status = status_result(FakeBackend().status() | {
        "problems": problems, "indexes": {"bm25": {"state": "stale"}, "dense": {"state": "ok"}},
        "daemon": {"pid": 9, "url": "http://h:1", "queue": 3, "processed": 40,
                   "errors": ["a", "b", "c", "d"]},
        "watch": ["/n"], "last_change": 17.5})
    assert status["problems_total"] == 25 and len(status["problems"]) == 20
    assert set(status["problems"][0]) == {"path", "state", "reason"}
    fresh = status["freshness"]
    assert fresh["stale_indexes"] == ["bm25"] and fresh["dirty_abstracts"] == 1
    assert fresh["queue"] == 3 and fresh["recent_errors"] == ["b", "c", "d"]
    assert fresh["served_by"] == "daemon pid 9 at http://h:1" and fresh["watch"] == ["/n"]
    assert fresh["last_change"] == 17.5
    assert "queue" not in status_result(FakeBackend().status())["freshness"]


@pytest.mark.asyncio
async def test_search_passes_a_path_only_when_one_is_given(backend):
    result = await call(backend, "search", query="alpha", k=2)
    assert not result.is_error
    assert backend.calls[-1] == ("query", ("alpha",), {"mode": "hybrid", "k": 2})
    found = result.structured_content
    assert found["degraded"] == ["bm25"] and len(found["results"]) == 2
    assert found["results"][0] == {"id": "12", "source": "/notes/a.md",
                                   "location": {"lines": [3, 7]}, "score": 0.1235,
                                   "snippet": "alpha beta"}
    await call(backend, "search", query="alpha", mode="sparse", path=["/notes/", "/b"])
    assert backend.calls[-1][2] == {"mode": "sparse", "k": 10, "within": ["/notes", "/b"]}


@pytest.mark.asyncio
async def test_invalid_arguments_never_reach_the_backend(backend):
    for name, arguments in [("search", {"query": "a", "mode": "agent"}),
                            ("search", {"query": "a", "k": 1000}),
                            ("search", {"query": "a", "path": "rel/dir"}),
                            ("fetch", {"id": "-3"}), ("fetch", {"id": "1", "neighbours": -1}),
                            ("answer", {"question": "  "})]:
        result = await call(backend, name, **arguments)
        assert result.is_error and result.content[0].text.startswith(
            f"Error executing tool {name}: "), arguments
    assert backend.calls == []


@pytest.mark.asyncio
async def test_knowledge_base_errors_become_tool_errors_with_their_message(backend):
    backend.fail = ChunkNotFound("no chunk 12: search again")
    result = await call(backend, "fetch", id="12")
    assert result.is_error and "no chunk 12: search again" in result.content[0].text
    backend.fail = KBError("the tree is empty: ingest some documents first")
    result = await call(backend, "browse")
    assert result.is_error and "the tree is empty" in result.content[0].text
    backend.fail = RuntimeError("secret internals")
    result = await call(backend, "status")
    assert result.is_error and "secret" not in result.content[0].text


@pytest.mark.asyncio
async def test_fetch_browse_and_answer_shapes(backend):
    fetched = (await call(backend, "fetch", id=" 12", neighbours=1)).structured_content
    assert backend.calls[-1] == ("chunk", (12, 1), {})
    assert fetched["neighbours"] == [{"id": "11", "offset": -1, "location": {"lines": [1, 2]},
                                      "text": "before"}]
    await call(backend, "browse", node=4)
    assert backend.calls[-1] == ("node", (4,), {})
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async with Client(build_server(backend)) as client:
        result = await client.call_tool("answer", {"question": "why?"},
                                        progress_callback=on_progress)
    assert result.structured_content["answer"] == "alpha"
    assert result.structured_content["citations"][0]["number"] == 1
    assert progress == [(1, "retrieval 1: why? 1"), (2, "retrieval 2: why? 2")]


def test_a_passage_from_a_vanished_folder_says_so() -> None:
    from psirag_kb.serving.shapes import passage

    row = {"chunk_id": 3, "source": "/d/a.md", "score": 1.0, "text": "okapi", "lines": [1, 2],
           "location": None}
    assert "unavailable" not in passage(row)
    gone = passage(row | {"unavailable": {"since": 0.0, "reason": "folder /d is missing"}})
    assert gone["unavailable"].startswith("since ") and gone["unavailable"].endswith(
        ": folder /d is missing")


@pytest.mark.asyncio
async def test_search_and_answer_take_the_earlier_turns(backend):
    history = ["What is Helgrind?", {"role": "assistant", "content": "A thread checker."}]
    found = (await call(backend, "search", query="its options?", k=1,
                        history=history)).structured_content
    name, args, kwargs = backend.calls[0]
    assert (name, args) == ("ask", ("its options?",))
    assert kwargs["history"] == [{"role": "user", "content": "What is Helgrind?"},
                                 {"role": "assistant", "content": "A thread checker."}]
    assert found["searched"] == "its options? (resolved)"
    answered = (await call(backend, "answer", question="and its options?",
                           history=["What is Helgrind?"])).structured_content
    assert [c for c in backend.calls if c[0] == "ask"][-1][2]["mode"] == "agent"
    assert answered["searched"] == "and its options? (resolved)"
    backend.calls.clear()
    plain = (await call(backend, "search", query="alpha", k=1)).structured_content
    assert backend.calls[0][0] == "query" and "searched" not in plain
    too_long = await call(backend, "search", query="x", history=["q"] * 51)
    assert too_long.is_error

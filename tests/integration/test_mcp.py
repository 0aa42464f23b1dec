"""`psirag-kb mcp` over stdio: a real knowledge base, the real model, the SDK's own client."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from conftest import NOTES, FakeEmbedder
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult

from psirag_kb.config import Config
from psirag_kb.errors import ChunkNotFound, KBError
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.client import LocalClient

TOPICS = [
    "Sundials tell the time from the shadow of a gnomon. Their hour lines depend on the "
    "latitude, and they drift from clock time through the year by up to a quarter of an hour.",
    "Beekeepers smoke a hive before opening it. The smoke masks the alarm pheromone of the "
    "guard bees, so the colony stays calm while frames of honeycomb are lifted out.",
    "Glaciers form where snow accumulates faster than it melts, compressing over centuries into "
    "dense ice. The ice flows slowly downhill under its own weight, carving valleys and leaving "
    "moraines of rock behind when it retreats.",
    "The printing press with movable type was introduced in Mainz around 1450. It made books "
    "cheaper and spread literacy, pamphlets and new ideas across Europe within a few decades.",
    "Octopuses have three hearts and blue copper-based blood. Two hearts pump blood through the "
    "gills while the third pumps it through the rest of the body, and it stops while they swim.",
    "Lighthouses once burned whale oil behind Fresnel lenses. A keeper trimmed the wicks every "
    "night and wound the clockwork that turned the lens until the electric lamp replaced him.",
    "The Hanseatic League joined merchant towns around the Baltic. Its warehouses in London, "
    "Bergen and Novgorod traded furs, timber, grain and dried cod for centuries.",
    "A suspension bridge hangs its deck from vertical cables. These are attached to main cables "
    "draped between towers and anchored at each end in massive concrete blocks.",
    "Fermented soybeans give miso its savoury depth. The paste ages for months in cedar barrels "
    "before it is stirred into soups, glazes and dressings.",
]
"""Paragraphs of one long file on topics of their own (several chunks, for neighbours)."""

HISTORY = "\n\n".join(TOPICS) + "\n"

CITED = "Thought: passage [1] says the tern flies from pole to pole.\nAnswer: from pole to pole"


def write_corpus(folder: Path) -> Path:
    """The shared notes (volcano in a subfolder), a long file and an empty file."""
    for name, text in NOTES.items():
        path = folder / ("geo" if name == "volcano.txt" else "") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (folder / "topics.md").write_text(HISTORY)
    (folder / "empty.txt").write_text("")
    return folder


class Session:
    """A connected SDK client driven from synchronous tests through a blocking portal."""

    def __init__(self, portal: BlockingPortal, client: Client, errors: list[Exception],
                 stderr: Path) -> None:
        self.portal, self.client, self.errors, self.stderr = portal, client, errors, stderr

    def call(self, name: str, **arguments: Any) -> CallToolResult:
        """Call one tool and wait for its result."""
        return self.portal.call(self.client.call_tool, name, arguments)

    def ok(self, name: str, **arguments: Any) -> dict[str, Any]:
        """A tool's structured result, failing the test on a tool error."""
        result = self.call(name, **arguments)
        assert not result.is_error, (result.content, self.stderr.read_text())
        assert result.structured_content is not None
        return result.structured_content


@contextmanager
def served(data_dir: Path, home: Path, config_file: Path | None = None) -> Iterator[Session]:
    """`python -m psirag_kb --data-dir DATA mcp` as the SDK's stdio client launches it."""
    home.mkdir(parents=True, exist_ok=True)
    args = ["-m", "psirag_kb", "--data-dir", str(data_dir)]
    if config_file is not None:
        args += ["--config", str(config_file)]
    params = StdioServerParameters(
        command=sys.executable, args=[*args, "mcp"], cwd=str(home),
        # only these and the SDK's defaults (PATH, USER, ...) reach the server: no token, no
        # OLLAMA_HOST, the test's own HOME
        env={"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")},
    )
    errors: list[Exception] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):  # a stdout line that is not a protocol message
            errors.append(message)

    stderr = home / "server.stderr"
    with stderr.open("w") as errlog, start_blocking_portal() as portal:
        client = Client(stdio_client(params, errlog=errlog), message_handler=on_message,
                        read_timeout_seconds=120)
        with portal.wrap_async_context_manager(client) as connected:
            yield Session(portal, connected, errors, stderr)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("mcp") / "notes")


def build(data_dir: Path, corpus: Path, embedder: Any) -> None:
    """Ingest the corpus in-process, then let go of the data directory."""
    with KnowledgeBase(Config().with_data_dir(data_dir), embedder=embedder) as kb:
        report = kb.ingest([corpus])
        assert report.added == len(NOTES) + 1 and report.skipped == 1


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, corpus: Path, minilm) -> Iterator[Session]:
    root = tmp_path_factory.mktemp("mcp-server")
    build(root / "data", corpus, minilm)
    with served(root / "data", root / "home") as session:
        yield session



def test_lists_the_five_tools_with_usable_schemas(server):
    tools = {t.name: t for t in server.portal.call(server.client.list_tools).tools}
    assert {"search", "fetch", "answer", "browse", "status"} <= set(tools)
    search = tools["search"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["mode"]["enum"] == ["auto", "hybrid", "tree", "sparse", "dense"]
    assert search["properties"]["k"]["maximum"] == 100
    assert tools["fetch"].input_schema["required"] == ["id"]
    assert tools["answer"].input_schema["required"] == ["question"]
    assert "ctx" not in tools["answer"].input_schema["properties"]
    assert not tools["status"].input_schema.get("required")
    assert all(t.output_schema and t.description for t in tools.values())
    assert all(t.annotations.read_only_hint for t in tools.values())
    assert "fetch" in server.client.instructions and "search" in server.client.instructions


def test_search_puts_the_right_file_first(server, corpus):
    found = server.ok("search", query="Which bird migrates from pole to pole?", k=3)
    assert found["mode"] == "hybrid" and 1 <= len(found["results"]) <= 3
    top = found["results"][0]
    assert top["source"] == str(corpus / "birds.md")
    assert top["id"].isdigit() and top["location"]["lines"][0] >= 1
    assert "arctic tern" in top["snippet"] and len(top["snippet"]) <= 301
    assert isinstance(top["score"], float)
    sparse = server.ok("search", query="stratovolcano Sicily", mode="sparse", k=1)
    assert sparse["results"][0]["source"] == str(corpus / "geo" / "volcano.txt")
    assert not server.call("search", query="cedar barrels", k=100).is_error


def test_fetch_returns_the_full_text_and_its_neighbours(server, corpus):
    hit = server.ok("search", query="Octopuses have three hearts and blue blood", k=1)
    result = hit["results"][0]
    assert result["source"] == str(corpus / "topics.md")
    chunk = server.ok("fetch", id=result["id"], neighbours=1)
    assert chunk["id"] == result["id"] and chunk["source"] == result["source"]
    assert "three hearts" in chunk["text"]
    first, last = result["location"]["lines"]  # a result may span touching chunks
    assert first <= chunk["location"]["lines"][0] <= chunk["location"]["lines"][1] <= last
    assert [n["offset"] for n in chunk["neighbours"]] == [-1, 1]
    text = (corpus / "topics.md").read_text()
    before, after = chunk["neighbours"]
    assert text.index(before["text"]) < text.index(chunk["text"]) < text.index(after["text"])
    assert before["location"]["lines"][1] <= chunk["location"]["lines"][0]
    alone = server.ok("fetch", id=result["id"])
    assert alone["neighbours"] == [] and alone["text"] == chunk["text"]


def test_bad_arguments_are_tool_errors_and_the_server_goes_on(server):
    for name, arguments, words in [
        ("search", {"query": "tern", "mode": "fuzzy"}, "hybrid, tree, sparse, dense"),
        ("search", {"query": "tern", "k": 0}, "between 1 and 100"),
        ("search", {"query": "tern", "k": 101}, "between 1 and 100"),
        ("search", {"query": "   "}, "empty"),
        ("search", {"query": "tern", "path": "notes/birds.md"}, "absolute path"),
        ("fetch", {"id": "99999"}, "no chunk 99999"),
        ("fetch", {"id": "9" * 30}, "no chunk 999"),
        ("fetch", {"id": "tern"}, "not a result id"),
        ("fetch", {"id": "1", "neighbours": 9}, "between 0 and 5"),
        ("browse", {"node": 987654}, "no tree node 987654"),
    ]:
        result = server.call(name, **arguments)
        assert result.is_error, (name, arguments)
        assert words in result.content[0].text, result.content[0].text
    assert server.ok("search", query="sourdough starter", k=1)["results"]


def test_search_within_a_folder_or_file(server, corpus):
    folder = server.ok("search", query="arctic tern", k=5, path=str(corpus / "geo"))
    assert folder["results"] and {r["source"] for r in folder["results"]} == {
        str(corpus / "geo" / "volcano.txt")}
    assert folder["within"] == [str(corpus / "geo")]
    files = [str(corpus / "birds.md"), str(corpus / "bread.rst")]
    both = server.ok("search", query="yeast", k=5, path=files)
    assert {r["source"] for r in both["results"]} <= set(files)


def test_browse_shows_the_root_and_goes_down(server):
    root = server.ok("browse")
    assert {"node", "layer", "abstract", "stale", "parent", "leaves", "children"} <= set(root)
    assert root["parent"] is None and root["leaves"] >= 6 and root["children"]
    for child in root["children"]:
        assert child["kind"] in ("node", "chunk") and isinstance(child["abstract"], str)
        assert ("node" in child) == (child["kind"] == "node")
        assert ("id" in child) == (child["kind"] == "chunk")
    inner = [c for c in root["children"] if c["kind"] == "node"]
    if inner:
        below = server.ok("browse", node=inner[0]["node"])
        assert below["parent"] == root["node"] and below["leaves"] == inner[0]["leaves"]
    chunks = [c for c in root["children"] if c["kind"] == "chunk"]
    if chunks:
        assert server.ok("fetch", id=chunks[0]["id"])["source"] == chunks[0]["source"]


def test_status_says_what_is_indexed_and_how_fresh(server, corpus):
    status = server.ok("status")
    assert status["files"]["indexed"] == len(NOTES) + 1 and status["files"]["skipped"] == 1
    assert status["chunks"] >= len(NOTES) + 3  # the topics are several chunks
    assert status["problems_total"] == 1
    assert status["problems"] == [{"path": str(corpus / "empty.txt"), "state": "skipped",
                                   "reason": "empty file"}]
    fresh = status["freshness"]
    assert fresh["generation"] >= 1 and fresh["tree"] == "ok" and fresh["stale_indexes"] == []
    assert fresh["dirty_abstracts"] >= 0 and fresh["writer_queued"] == 0


def test_answer_without_an_llm_gives_passages_and_says_so(server, corpus):
    result = server.ok("answer", question="Which bird flies from pole to pole every year?")
    assert result["status"] == "no_llm" and result["answer"] is None
    assert result["note"] == ("no LLM is configured; these are the passages multi-round "
                              "retrieval found")
    assert result["citations"] == [] and result["passages"]
    assert str(corpus / "birds.md") in [p["source"] for p in result["passages"][:3]]
    assert all(p["id"].isdigit() and p["text"] for p in result["passages"])


def test_stdout_carried_nothing_but_protocol(server):
    server.ok("search", query="glacier moraines", mode="dense", k=2)  # the model is loaded
    assert server.errors == [], server.stderr.read_text()


def test_answer_with_an_llm_cites_its_passages(tmp_path, corpus, minilm, fake_ollama):
    fake_ollama.script(fn=lambda body: CITED)
    config = tmp_path / "config.toml"
    config.write_text(f'[llm]\nenabled = true\nhost = "{fake_ollama.url}"\ntimeout_s = 20.0\n')
    build(tmp_path / "data", corpus, minilm)
    with served(tmp_path / "data", tmp_path / "home", config) as session:
        result = session.ok("answer", question="Where does the arctic tern migrate?")
    assert result["status"] == "answered" and result["answer"] == "from pole to pole"
    assert result["passages"] == [] and "note" not in result
    cited = result["citations"][0]
    assert cited["number"] == 1 and cited["source"] == str(corpus / "birds.md")
    assert "arctic tern" in cited["text"] and cited["location"]["lines"][0] >= 1
    assert any("Where does the arctic tern migrate?" in chat.text for chat in fake_ollama.chats)


# -- KnowledgeBase.chunk, the library side of fetch ------------------------------------------


@pytest.fixture
def small_kb(config: Config, tmp_path: Path) -> Iterator[KnowledgeBase]:
    (tmp_path / "topics.md").write_text(HISTORY)
    with KnowledgeBase(config, embedder=FakeEmbedder()) as kb:
        kb.ingest([tmp_path / "topics.md"])
        yield kb


def test_chunk_reads_a_chunk_and_the_ones_around_it(small_kb, tmp_path):
    ids = [int(i) for i in small_kb.stores.store.chunk_ids()]  # one new file: ids in file order
    assert len(ids) >= 3
    first = small_kb.chunk(ids[0], neighbours=2)
    assert first["source"] == first["path"] == str(tmp_path / "topics.md")
    assert [n["offset"] for n in first["neighbours"]] == [1, 2]
    middle = small_kb.chunk(ids[1], neighbours=1)
    assert [(n["chunk_id"], n["offset"]) for n in middle["neighbours"]] == [(ids[0], -1),
                                                                            (ids[2], 1)]
    assert middle["neighbours"][0]["lines"][1] <= middle["lines"][0]
    assert small_kb.chunk(ids[1])["neighbours"] == []
    assert LocalClient(small_kb).chunk(ids[1], 1) == middle


def test_chunk_errors_name_the_problem(small_kb):
    for unknown in (424242, 0, -1, 2**70):
        with pytest.raises(ChunkNotFound, match=f"no chunk {unknown}"):
            small_kb.chunk(unknown)
    with pytest.raises(KBError, match="neighbours must be 0 or more"):
        small_kb.chunk(1, neighbours=-1)

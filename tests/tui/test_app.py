"""The TUI driven through Textual's Pilot against a fake client."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import pytest
from textual.widgets import OptionList, Select, Static, Tree
from waiting import wait_until_async

from tui.app import PsiragApp
from tui.format import editor_command
from tui.screens.base import Banner
from tui.screens.help import HelpScreen
from tui.screens.query import QueryScreen
from tui.screens.status import StatusScreen
from tui.screens.tree import TreeScreen

from .conftest import make_app
from .fakes import MEMORY, FakeClient

SIZE = (80, 24)


def text_of(widget: Static) -> str:
    """What a Static shows, without styles."""
    return str(widget.render())


async def until(pilot: Any, condition: Callable[[], Any], timeout: float = 15.0) -> None:
    """Let the app run until the condition holds (the shared wait, pausing the pilot)."""
    await wait_until_async(condition, timeout, 0.02, "the app's condition", pause=pilot.pause)


async def ask(pilot: Any, text: str) -> None:
    await pilot.click("#query")
    for key in text:
        await pilot.press("space" if key == " " else key)
    await pilot.press("enter")


def options(app: PsiragApp) -> list[str]:
    listing = app.screen.query_one("#results", OptionList)
    return [str(listing.get_option_at_index(n).prompt) for n in range(listing.option_count)]


@pytest.mark.asyncio
async def test_the_first_view_shows_the_top_of_the_tree(app: PsiragApp,
                                                        client: FakeClient) -> None:
    async with app.run_test(size=(100, 24)) as pilot:
        chunk = app.screen.query_one("#chunk", Static)
        await until(pilot, lambda: "What the knowledge base holds" in text_of(chunk))
        shown = text_of(chunk)
        assert "3 passages" in shown and "F3" in shown
        # the root's topics, the largest first, a stale one marked
        first, second = shown.index("reference counting"), shown.index("http caches")
        assert first < second and "(updating)" in shown[first:second]
        await ask(pilot, "python memory")  # an answer replaces the overview
        await until(pilot, lambda: len(options(app)) == 3)
        assert "What the knowledge base holds" not in text_of(chunk)


@pytest.mark.asyncio
async def test_a_failed_overview_keeps_the_hint_quietly(app: PsiragApp,
                                                        client: FakeClient) -> None:
    client.fail = "no tree"
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        assert text_of(app.screen.query_one("#chunk", Static)) == "Type a query and press enter."
        assert not text_of(app.screen.query_one(Banner))


@pytest.mark.asyncio
async def test_query_results_and_tree_path(app: PsiragApp, client: FakeClient) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "python memory")
        await until(pilot, lambda: len(options(app)) == 3)
        assert "/docs/python/memory.md:3-9" in options(app)[0]
        assert "/docs/web/http.pdf p. 4" in options(app)[1]  # a location, not lines
        assert "hotpot:Ada_Lovelace" in options(app)[2]
        screen = app.screen
        chunk = screen.query_one("#chunk", Static)
        assert "cyclic garbage collector" in text_of(chunk)
        treepath = screen.query_one("#treepath", Static)
        await until(pilot, lambda: "garbage collector" in text_of(treepath))
        shown = text_of(treepath)
        assert shown.index("python, memory, web") < shown.index("reference counting")
        await pilot.press("ctrl+r", "down")
        await until(pilot, lambda: "HTTP caches keep" in text_of(chunk))
        assert text_of(chunk).startswith("/docs/web/http.pdf p. 4  score 0.501")
        await until(pilot, lambda: "http caches, responses" in text_of(treepath))
        assert ("path", 22) in client.calls
        assert ("query", ("python memory", "auto", False)) in client.calls


@pytest.mark.asyncio
async def test_modes_agent_and_summarize(app: PsiragApp, client: FakeClient) -> None:
    async with app.run_test(size=SIZE) as pilot:
        mode = app.screen.query_one("#mode", Select)
        for _ in range(5):
            await pilot.press("ctrl+n")
        assert mode.value == "agent"
        await ask(pilot, "memory")
        answer = app.screen.query_one("#answer", Static)
        await until(pilot, lambda: "Python counts references" in text_of(answer))
        shown = text_of(answer)
        assert "1. 'python memory' → 2 found: memory.md, http.pdf → answer" in shown
        assert "[1] /docs/python/memory.md:3-9 (chunk 11)" in shown
        assert len(options(app)) == 1
        client.agent = {"query": "memory", "mode": "agent", "results": []}
        await pilot.press("up", "enter")  # the box is empty once asked: up brings it back
        await until(pilot, lambda: "does not support agent mode" in text_of(answer))
        await pilot.press("ctrl+n")
        assert mode.value == "summarize"
        await pilot.press("up", "enter")
        await until(pilot, lambda: "node 90: reference counting" in text_of(answer))
        assert "No summary  (no_llm)" in text_of(answer)
        assert ("query", ("memory", None, True)) in client.calls
        await pilot.press("ctrl+n")
        await pilot.press("up", "enter")
        await until(pilot, lambda: not answer.display)


class StreamingClient(FakeClient):
    """In-process style: agent answers stream their steps through `answer(on_step=...)`."""

    def __init__(self) -> None:
        super().__init__()
        self.go_on = threading.Event()

    def answer(self, text: str, k: int | None = None, on_step: Any = None) -> dict[str, Any]:
        result = self.query(text, mode="agent")
        on_step(result["steps"][0])
        assert self.go_on.wait(10)
        return result


@pytest.mark.asyncio
async def test_agent_steps_stream_in() -> None:
    client = StreamingClient()
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        app.screen.query_one("#mode", Select).value = "agent"
        await ask(pilot, "memory")
        answer = app.screen.query_one("#answer", Static)
        await until(pilot, lambda: "'python memory' → 2 found" in text_of(answer))
        assert "Working…" in text_of(answer)
        client.go_on.set()
        await until(pilot, lambda: "Python counts references" in text_of(answer))


@pytest.mark.asyncio
async def test_switch_screens_tree_status_help(app: PsiragApp, client: FakeClient) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        assert isinstance(app.screen, TreeScreen)
        tree = app.screen.query_one(Tree)
        await until(pilot, lambda: len(tree.root.children) == 2)
        assert "python, memory, web" in str(tree.root.label)
        stale, fresh = tree.root.children
        assert "2 leaves" in str(stale.label) and "stale" in str(stale.label)
        assert "stale" not in str(fresh.label)
        assert not stale.children  # loaded only when expanded
        stale.expand()
        await until(pilot, lambda: len(stale.children) == 2
                    and "chunk 11" in str(stale.children[0].label))
        assert "/docs/python/memory.md:3-9" in str(stale.children[0].label)
        assert ("node", 90) in client.calls and ("node", 91) not in client.calls

        await pilot.press("f4")
        assert isinstance(app.screen, StatusScreen)
        status = app.screen.query_one("#status", Static)
        await until(pilot, lambda: "Watched folders" in text_of(status))
        shown = text_of(status)
        for expected in ("/docs", "12 indexed", "failed /docs/broken.pdf: the PDF is encrypted",
                         "queue 3", "dirty abstracts 1", "maintain", "Ollama is not reachable",
                         "LLM off"):
            assert expected in shown, expected
        calls = len([c for c in client.calls if c[0] == "status"])
        await until(pilot, lambda: len([c for c in client.calls if c[0] == "status"]) > calls)

        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        assert "Open" not in text_of(app.screen.query_one("#help-keys", Static))
        assert "^o" in text_of(app.screen.query_one("#help-keys", Static))
        await pilot.press("escape")
        await pilot.press("f2")
        assert isinstance(app.screen, QueryScreen)


@pytest.mark.asyncio
async def test_a_failing_call_shows_an_error_not_a_crash(app: PsiragApp,
                                                         client: FakeClient) -> None:
    client.fail = "the index is corrupt: run `psirag-kb ingest` again"
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "memory")
        banner = app.screen.query_one(Banner)
        await until(pilot, lambda: banner.display)
        assert "auto query failed: the index is corrupt" in text_of(banner)
        assert not app.screen.query_one("#results", OptionList).loading
        client.fail = None
        await pilot.press("enter")
        await until(pilot, lambda: not banner.display)
        assert len(options(app)) == 3
        await pilot.press("f3")
        client.fail = "boom"
        await pilot.press("r")
        await until(pilot, lambda: "could not be loaded" in str(app.screen.query_one(Tree)
                                                              .root.label))
    assert app.return_code in (0, None)


@pytest.mark.asyncio
async def test_no_tree_yet_reads_as_a_notice_not_a_failure(app: PsiragApp,
                                                           client: FakeClient) -> None:
    client.no_tree = True
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        banner = app.screen.query_one(Banner)
        await until(pilot, lambda: "no topic tree yet" in text_of(banner))
        assert "failed" not in text_of(banner)
        assert "no topic tree yet" in str(app.screen.query_one(Tree).root.label)
        client.no_tree = False
        await pilot.press("r")
        await until(pilot, lambda: app.screen.query_one(Tree).root.children)
    assert app.return_code in (0, None)


@pytest.mark.asyncio
async def test_daemon_gone_then_back(app: PsiragApp, client: FakeClient) -> None:
    async with app.run_test(size=SIZE) as pilot:
        client.down = True
        await ask(pilot, "memory")
        banner = app.screen.query_one(Banner)
        await until(pilot, lambda: "went away" in text_of(banner))
        assert app.problem and "not answering" in app.sub_title
        await pilot.press("f4")
        status_banner = app.screen.query_one(Banner)
        await until(pilot, lambda: "went away" in text_of(status_banner))
        client.down = False
        await until(pilot, lambda: not app.problem)
        await until(pilot, lambda: not status_banner.display)
        await until(pilot, lambda: "Watched folders" in text_of(app.screen.query_one("#status")))
        await pilot.press("f2")
        await pilot.press("enter")
        await until(pilot, lambda: len(options(app)) == 3)
        assert not app.screen.query_one(Banner).display


@pytest.mark.asyncio
async def test_editor_key_opens_the_file_at_its_line(app: PsiragApp, client: FakeClient,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path) -> None:
    note = tmp_path / "memory.md"
    note.write_text("x\n" * 10)
    ran: list[list[str]] = []
    monkeypatch.setenv("EDITOR", "myedit --wait")
    monkeypatch.setattr("tui.app.subprocess.run", lambda cmd, check: ran.append(cmd))
    monkeypatch.setattr(PsiragApp, "suspend", lambda self: nullcontext())
    monkeypatch.setitem(MEMORY, "path", str(note))
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "memory")
        await until(pilot, lambda: len(options(app)) == 3)
        await pilot.press("ctrl+o")
        assert ran == [["myedit", "--wait", "+3", str(note)]]
        await pilot.press("ctrl+r", "end", "ctrl+o")  # a corpus passage has no file
        assert len(ran) == 1


def test_editor_command_forms() -> None:
    assert editor_command("vim", "/a.md", 7) == ["vim", "+7", "/a.md"]
    assert editor_command("code --wait", "/a.md", 7) == ["code", "--wait", "-g", "/a.md:7"]
    assert editor_command("hx", "/a.md", 7) == ["hx", "/a.md:7"]
    assert editor_command("nano", "/a.md", None) == ["nano", "/a.md"]


@pytest.mark.asyncio
async def test_a_query_note_shows_in_the_banner(app: PsiragApp, client: FakeClient) -> None:
    real = client.query
    note = "the tree is rebuilding: these results come from BM25 and the dense index"
    client.query = lambda *args, **kwargs: real(*args, **kwargs) | {"note": note}  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await ask(pilot, "python memory")
        await until(pilot, lambda: len(options(app)) == 3)
        banner = app.screen.query_one(Banner)
        await until(pilot, lambda: banner.display)
        assert "the tree is rebuilding" in text_of(banner)
        client.query = real  # type: ignore[method-assign]
        await pilot.press("up", "enter")
        await until(pilot, lambda: not banner.display)

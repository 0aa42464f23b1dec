"""The tree screen's topic map (the current node's children as bars sized by passages, enter
going down) and a conversation whose box is empty again once a question is asked."""

from __future__ import annotations

import pytest
from textual.widgets import Input, Static, Tree

from tui.app import PsiragApp
from tui.format import blocks_text

from .conftest import make_app
from .fakes import FakeClient
from .test_app import SIZE, ask, text_of, until
from .test_conversation import TalkingClient


def test_bars_are_in_proportion_to_passages() -> None:
    children = [{"id": 1, "kind": "node", "leaves": 30, "label": "python, memory"},
                {"id": 2, "kind": "node", "leaves": 10, "label": "<b>web</b> [red]x[/red]"},
                {"id": 7, "kind": "leaf", "leaves": 1, "source": "/docs/a.md"}]
    lines = blocks_text(children, 40, marked=2).plain.splitlines()
    assert lines[0] == "  python, memory" and lines[2] == "▶ <b>web</b> [red]x[/red]"
    assert lines[4] == "  a.md"
    bars = [line.count("█") for line in lines[1::2]]
    assert bars[0] == 3 * bars[1] or abs(bars[0] - 3 * bars[1]) <= 2
    assert bars[2] >= 1 and "30 (73%)" in lines[1]


@pytest.mark.asyncio
async def test_the_tree_screen_draws_the_children_and_enter_goes_down(
        client: FakeClient) -> None:
    app: PsiragApp = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        tree = app.screen.query_one(Tree)
        blocks = app.screen.query_one("#blocks", Static)
        await until(pilot, lambda: len(tree.root.children) == 2)
        await until(pilot, lambda: "python, memory" in text_of(blocks))
        shown = text_of(blocks)
        assert "2 (67%)" in shown and "1 (33%)" in shown and "http caches" in shown
        await pilot.press("down")  # the first child: its siblings, it marked
        await until(pilot, lambda: "▶" in text_of(blocks))
        await pilot.press("enter")  # down: its own children
        await until(pilot, lambda: "memory.md" in text_of(blocks))
        assert "http caches" not in text_of(blocks)


@pytest.mark.asyncio
async def test_the_box_is_empty_once_asked_and_a_follow_up_stays_apart() -> None:
    talking = TalkingClient()
    app: PsiragApp = make_app(talking)
    async with app.run_test(size=(110, 30)) as pilot:
        await pilot.pause()
        box = app.screen.query_one("#query", Input)
        shown = app.screen.query_one("#conversation", Static)
        await ask(pilot, "What is memory")
        assert box.value == ""  # at once, before the answer
        await ask(pilot, "How do they free it")
        await until(pilot, lambda: "2. How do they free it" in text_of(shown))
        asked = [arg[0] for name, arg in talking.calls if name == "ask"]
        assert asked[-1] == "How do they free it" and "What is memory" in asked
        assert "1. What is memory" in text_of(shown)  # the earlier turn stays above

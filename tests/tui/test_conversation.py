"""The query screen keeps a conversation: each question is a turn of it (a follow-up searched as
the knowledge base rewrote it, "searched: ..." shown), earlier turns stay visible, and ctrl+t
starts a new one."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from textual.widgets import Static

from tui.app import PsiragApp

from .conftest import make_app
from .fakes import MEMORY, FakeClient
from .test_app import ask, options, text_of, until


class TalkingClient(FakeClient):
    """The fake client with conversations: a follow-up ("they", "it") gets the subject of the
    first question of its conversation added, as the real rewrite would."""

    def __init__(self) -> None:
        super().__init__()
        self.talks: dict[str, list[str]] = {}

    def new_conversation(self, title: str = "") -> dict[str, Any]:
        self._check("new_conversation", title)
        ident = f"c{len(self.talks) + 1}"
        self.talks[ident] = []
        return {"id": ident, "title": title, "turns": 0}

    def ask(self, question: str, conversation: str | None = None,
            history: list[Any] | None = None, mode: str | None = None, k: int | None = None,
            within: list[str] | None = None) -> dict[str, Any]:
        self._check("ask", (question, conversation, mode))
        earlier = self.talks[conversation]
        searched = question
        if earlier and any(w in question.lower().split() for w in ("they", "it", "its")):
            searched = f"{question} {earlier[0].split()[0]}"
        earlier.append(question)
        rows = [copy.deepcopy(MEMORY)] if "memory" in searched.lower() else []
        return {"query": searched, "mode": mode or "hybrid", "results": rows,
                "question": question, "searched": searched,
                "rewrite": "as_is" if searched == question else "offline",
                "conversation": conversation, "turn": len(earlier)}


@pytest.fixture
def talking() -> TalkingClient:
    return TalkingClient()


@pytest.mark.asyncio
async def test_follow_ups_continue_the_conversation_until_a_new_one(
        talking: TalkingClient) -> None:
    app: PsiragApp = make_app(talking)
    async with app.run_test(size=(110, 30)) as pilot:
        await pilot.pause()
        shown = app.screen.query_one("#conversation", Static)
        shortcut = app.screen.active_bindings["ctrl+t"].binding
        assert shortcut.description == "New chat" and shortcut.show  # shown in the footer
        await ask(pilot, "memory management")
        await until(pilot, lambda: len(options(app)) == 1)
        assert "1. memory management" in text_of(shown)
        await ask(pilot, "how do they free cycles")
        await until(pilot, lambda: "2. how do they free cycles" in text_of(shown))
        conversation = text_of(shown)
        assert "searched: how do they free cycles memory" in conversation
        assert conversation.index("1. memory") < conversation.index("2. how")  # both visible
        assert len(options(app)) == 1  # found through the rewritten query
        asks = [arg for name, arg in talking.calls if name == "ask"]
        assert [c for _, c, _ in asks] == ["c1", "c1"]
        # ctrl+t: the next question starts a new conversation, with no earlier turns
        await pilot.press("ctrl+t")
        await until(pilot, lambda: not text_of(shown))
        await ask(pilot, "how do they free cycles")
        await until(pilot, lambda: "1. how do they free cycles" in text_of(shown))
        assert "searched:" not in text_of(shown) and "2." not in text_of(shown)
        await until(pilot, lambda: options(app) == [])
        asks = [arg for name, arg in talking.calls if name == "ask"]
        assert asks[-1][1] == "c2" and len(talking.talks) == 2


@pytest.mark.asyncio
async def test_a_client_without_conversations_still_searches(client: FakeClient) -> None:
    app = make_app(client)
    async with app.run_test(size=(110, 30)) as pilot:
        await pilot.pause()
        await ask(pilot, "python memory")
        await until(pilot, lambda: len(options(app)) == 3)
        assert not text_of(app.screen.query_one("#conversation", Static))

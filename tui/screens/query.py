"""The Query screen: input, mode, ranked results, the selected chunk and its path up the tree."""

from __future__ import annotations

import os
from typing import Any

from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Header, Input, OptionList, Select, Static
from textual.widgets.option_list import Option
from textual.worker import get_current_worker

from .. import format as fmt
from .. import keys
from ..messages import AgentStep, Failed, OverviewLoaded, PathFound, QueryDone
from .base import FAILED, Banner, KBScreen

MODES = ("auto", "hybrid", "tree", "sparse", "dense", "agent", "summarize")


class QueryScreen(KBScreen):
    """Ask, browse the ranked results, read a chunk and where it sits in the tree."""

    BINDINGS = keys.QUERY

    def __init__(self) -> None:
        super().__init__()
        self.results: list[dict[str, Any]] = []
        self.words: list[str] = []
        self.current: dict[str, Any] | None = None
        self.steps: list[dict[str, Any]] = []
        self.conversation: str | None = None
        """The stored conversation the next question continues (None: a new one)."""
        self.turns: list[dict[str, Any]] = []
        """The conversation's turns so far, as shown above the answer."""
        self.asking = ""
        """The question asked and not answered yet (shown after the turns)."""
        self.last = ""
        """The last question asked (up in the empty box brings it back)."""

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="talk", classes="-empty"):  # the turns above the box, as a chat
            yield Static(id="conversation", classes="-empty")
        with Horizontal(id="bar"):
            yield Input(placeholder="Ask or search, then enter", id="query")
            yield Select([(m, m) for m in MODES], value=MODES[0], allow_blank=False, id="mode")
        yield Banner(id="banner", classes="-empty")
        with Horizontal(id="body"):
            yield OptionList(id="results")
            with VerticalScroll(id="detail"):
                yield Static(id="answer", classes="-empty")
                yield Static(id="treepath")
                yield Static("Type a query and press enter.", id="chunk")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#query", Input).focus()
        self.load_overview()

    @work(thread=True, exclusive=True, exit_on_error=False, group="overview")
    def load_overview(self) -> None:
        """Fetch the top of the tree for the first view (what the knowledge base holds)."""
        root = self.call("overview", lambda client: client.node(None))
        if root is not FAILED:
            self.post_message(OverviewLoaded(root))

    @on(OverviewLoaded)
    def show_overview(self, message: OverviewLoaded) -> None:
        if self.current is None and not self.results:  # no query answered yet
            self.query_one("#chunk", Static).update(fmt.overview_text(message.node))

    # -- querying ---------------------------------------------------------------------------

    @on(Input.Submitted, "#query")
    def submit(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        mode = str(self.query_one("#mode", Select).value)
        event.input.value = ""  # asked: a follow-up typed at once starts afresh
        self.asking = self.last = text
        self.show_conversation()
        self.query_one("#results", OptionList).loading = True
        self.steps = []
        if mode == "agent":
            answer = self.query_one("#answer", Static)
            answer.update(fmt.answer_text({"status": "working", "steps": []}, "agent"))
            answer.remove_class("-empty")
        self.run_query(text, mode, self.conversation)

    @work(thread=True, exclusive=True, exit_on_error=False, group="query")
    def run_query(self, text: str, mode: str, conversation: str | None = None) -> None:
        def ask(client: Any) -> dict[str, Any]:
            if mode == "summarize":
                return client.query(text, summarize=True)
            if callable(getattr(client, "ask", None)):  # a turn of the conversation
                talk = conversation or client.new_conversation()["id"]
                return client.ask(text, conversation=talk, mode=mode)
            stream = getattr(client, "answer", None)  # steps stream in as they complete
            if mode == "agent" and callable(stream):
                return stream(text, on_step=lambda step: self.post_message(AgentStep(step)))
            return client.query(text, mode=mode)

        result = self.call(f"{mode} query", ask)
        if result is not FAILED and not get_current_worker().is_cancelled:
            self.post_message(QueryDone(text, mode, result))

    @on(AgentStep)
    def agent_step(self, message: AgentStep) -> None:
        self.steps.append(message.step)
        progress = {"status": "working", "steps": self.steps}
        self.query_one("#answer", Static).update(fmt.answer_text(progress, "agent"))

    @on(QueryDone)
    def show_results(self, message: QueryDone) -> None:
        self.clear_error()
        result = message.result
        self.words = fmt.terms(str(result.get("searched") or message.text))
        if result.get("conversation"):
            self.conversation = str(result["conversation"])
            self.turns.append(fmt.turn_entry(message.text, result))
        if self.asking == message.text:
            self.asking = ""
        self.show_conversation()
        if result.get("note") and not self.app.problem:  # e.g. the tree is rebuilding
            self.query_one(Banner).say(str(result["note"]), "info")
        answer = self.query_one("#answer", Static)
        written = fmt.answer_text(result, message.mode)
        answer.update(written or "")
        answer.set_class(written is None, "-empty")
        rows = fmt.citation_results(result)
        self.results = rows
        listing = self.query_one("#results", OptionList)
        listing.loading = False
        listing.clear_options()
        listing.add_options(Option(fmt.result_label(r, self.words), id=str(n))
                            for n, r in enumerate(rows))
        self.current = None
        self.query_one("#treepath", Static).update("")
        if rows:
            listing.highlighted = 0
            self.show(0)
        else:
            self.query_one("#chunk", Static).update(f"No passages for {message.text!r}.")

    @on(Failed)
    def query_failed(self, message: Failed) -> None:
        if message.what == "overview":  # the first view keeps its hint; queries may still work
            message.prevent_default()
            return
        if message.what == "tree path":
            self.query_one("#treepath", Static).update(f"Path up the tree: {message.error}")
            message.prevent_default()
            return
        self.query_one("#results", OptionList).loading = False
        box = self.query_one("#query", Input)
        if self.asking and not box.value:  # back in the box, to ask again
            box.value = self.asking
        self.asking = ""
        self.show_conversation()
        if message.what.startswith("agent"):
            message.error += " (agent mode needs the agent API and an LLM)"

    # -- the selected result ----------------------------------------------------------------

    @on(OptionList.OptionHighlighted, "#results")
    @on(OptionList.OptionSelected, "#results")
    def selected(self, event: OptionList.OptionHighlighted | OptionList.OptionSelected) -> None:
        if event.option_index is not None:
            self.show(event.option_index)

    def show(self, index: int) -> None:
        """Show one result's full chunk and look up its path up the tree."""
        if not 0 <= index < len(self.results) or self.results[index] is self.current:
            return
        self.current = result = self.results[index]
        self.query_one("#chunk", Static).update(fmt.chunk_text(result, self.words))
        chunk_id = result.get("chunk_id")
        treepath = self.query_one("#treepath", Static)
        if chunk_id is None:
            treepath.update("")
            return
        treepath.update("Path up the tree: loading…")
        self.find_path(int(chunk_id))

    @work(thread=True, exclusive=True, exit_on_error=False, group="path")
    def find_path(self, chunk_id: int) -> None:
        path = self.call("tree path", lambda client: client.path(chunk_id))
        if path is not FAILED and not get_current_worker().is_cancelled:
            self.post_message(PathFound(chunk_id, path))

    @on(PathFound)
    def show_path(self, message: PathFound) -> None:
        if self.current is None or self.current.get("chunk_id") != message.chunk_id:
            return
        self.query_one("#treepath", Static).update(fmt.tree_path(message.path))

    def show_conversation(self) -> None:
        """The conversation's turns above the answer (the last one's query searched)."""
        shown = self.query_one("#conversation", Static)
        shown.update(fmt.conversation_text(self.turns, self.asking))
        empty = not self.turns and not self.asking
        shown.set_class(empty, "-empty")
        talk = self.query_one("#talk", VerticalScroll)
        talk.set_class(empty, "-empty")
        talk.scroll_end(animate=False)

    def on_key(self, event: events.Key) -> None:
        """Up in the empty query box: the last question again (to ask it in another mode)."""
        box = self.query_one("#query", Input)
        if event.key == "up" and box.has_focus and not box.value and self.last:
            box.value = self.last
            box.cursor_position = len(self.last)
            event.stop()

    # -- actions ----------------------------------------------------------------------------

    def action_new_conversation(self) -> None:
        """Forget the conversation: the next question starts a new one."""
        self.conversation = None
        self.turns = []
        self.asking = ""
        self.show_conversation()
        self.query_one("#query", Input).value = ""
        self.query_one("#query", Input).focus()
        self.notify("The next question starts a new conversation.", title="new chat")

    def action_next_mode(self) -> None:
        select = self.query_one("#mode", Select)
        select.value = MODES[(MODES.index(str(select.value)) + 1) % len(MODES)]

    def action_focus_input(self) -> None:
        self.query_one("#query", Input).focus()

    def action_focus_results(self) -> None:
        self.query_one("#results", OptionList).focus()

    def action_open_editor(self) -> None:
        result = self.current
        if result is None:
            self.notify("Select a result first.", severity="warning")
            return
        path = result.get("path")
        if not path or not os.path.isfile(path):
            self.notify(f"{result.get('source')} is not a file here (a corpus passage?)",
                        severity="warning")
            return
        lines = None if result.get("location") else result.get("lines")  # lines of a text file
        self.app.open_in_editor(path, lines[0] if lines else None)

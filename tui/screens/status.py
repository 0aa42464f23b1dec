"""The Status screen: folders, files and their problems, queue, abstracts, jobs, LLM; live."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.timer import Timer
from textual.widgets import Footer, Header, Static

from .. import format as fmt
from .. import keys
from ..messages import Reconnected, StatusLoaded
from .base import FAILED, Banner, KBScreen


class StatusScreen(KBScreen):
    """What the knowledge base and its daemon are doing, refreshed on a timer while shown."""

    BINDINGS = keys.STATUS

    def __init__(self) -> None:
        super().__init__()
        self.timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Banner(id="banner", classes="-empty")
        with VerticalScroll(id="status-body"):
            yield Static("loading the status…", id="status")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        self.timer = self.set_interval(self.app.status_interval, self.action_refresh)
        self.action_refresh()

    def on_screen_suspend(self) -> None:
        if self.timer is not None:
            self.timer.pause()

    def on_screen_resume(self) -> None:
        if self.timer is not None:
            self.timer.resume()
            self.action_refresh()

    def action_refresh(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="status")
    def load(self) -> None:
        status = self.call("status", lambda client: client.status())
        if status is not FAILED:
            self.post_message(StatusLoaded(status))

    @on(StatusLoaded)
    def show(self, message: StatusLoaded) -> None:
        self.clear_error()
        markup = fmt.status_markup(message.status, self.app.connection.where, self.app.clock())
        self.query_one("#status", Static).update(markup)

    @on(Reconnected)
    def reconnected(self) -> None:
        self.action_refresh()

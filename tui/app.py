"""The psirag-kb Textual app: Query, Tree and Status screens over one KBClient."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App, SuspendNotSupported
from textual.reactive import reactive
from textual.timer import Timer

from . import keys
from .connection import Connection, Reconnect
from .format import editor_command
from .messages import Disconnected, Reconnected
from .screens.help import HelpScreen
from .screens.query import QueryScreen
from .screens.status import StatusScreen
from .screens.tree import TreeScreen

RECONNECT_S = 2.0
STATUS_S = 2.0


class PsiragApp(App[None]):
    """Ask the knowledge base, browse its tree, watch its status."""

    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "psirag-kb"
    BINDINGS = keys.APP
    MODES = {"query": QueryScreen, "tree": TreeScreen, "status": StatusScreen}
    DEFAULT_MODE = "query"
    ENABLE_COMMAND_PALETTE = False

    problem: reactive[str] = reactive("")
    """Why the daemon is not answering; empty while connected."""

    def __init__(self, client: Any, reconnect: Reconnect | None = None, *,
                 clock: Callable[[], float] = time.time, status_interval: float = STATUS_S,
                 reconnect_interval: float = RECONNECT_S) -> None:
        super().__init__()
        self.connection = Connection(client, reconnect)
        self.clock = clock
        self.status_interval = status_interval
        self.reconnect_interval = reconnect_interval
        self._reconnecting: Timer | None = None

    def on_mount(self) -> None:
        self.sub_title = self.connection.where
        self.set_interval(self.status_interval, self.follow_where)

    def follow_where(self) -> None:
        """Show where the knowledge base is now (an in-process one handed over to a daemon)."""
        where = self.connection.where
        if self.problem or self._reconnecting is not None or self.sub_title == where:
            return
        self.sub_title = where
        self.notify(f"now using {where}", title="knowledge base")

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    # -- a daemon that goes away ------------------------------------------------------------

    @on(Disconnected)
    def disconnected(self, message: Disconnected) -> None:
        if self._reconnecting is not None:
            return
        self.problem = message.reason
        self.sub_title = f"{self.connection.where} (not answering)"
        self.notify(message.reason, title="daemon gone", severity="error", timeout=10)
        self._reconnecting = self.set_interval(self.reconnect_interval, self.reconnect)

    @work(thread=True, exclusive=True, exit_on_error=False, group="reconnect")
    def reconnect(self) -> None:
        if self.connection.lost and self.connection.reconnect():
            self.post_message(Reconnected())

    @on(Reconnected)
    def reconnected(self) -> None:
        if self._reconnecting is None:  # a second worker's late news
            return
        self._reconnecting.stop()
        self._reconnecting = None
        self.problem = ""
        self.sub_title = self.connection.where
        self.notify(f"connected to {self.connection.where} again", title="daemon back")
        if self.screen_stack:
            self.screen.post_message(Reconnected())

    # -- editor -----------------------------------------------------------------------------

    def open_in_editor(self, path: str, line: int | None) -> None:
        """Suspend the app and run $EDITOR (or $VISUAL, or vi) on a file at a line."""
        editor = os.environ.get("EDITOR") or os.environ.get("VISUAL") or "vi"
        command = editor_command(editor, path, line)
        try:
            with self.suspend():
                subprocess.run(command, check=False)
        except SuspendNotSupported:
            self.notify("this terminal cannot hand over to an editor", severity="error")
        except OSError as exc:
            self.notify(f"cannot run {command[0]}: {exc}; set $EDITOR", severity="error")


def run(client: Any, reconnect: Reconnect | None = None) -> None:
    """Run the app until the user quits."""
    app = PsiragApp(client, reconnect)
    try:
        app.run()
    finally:
        app.connection.close()

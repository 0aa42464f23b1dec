"""What every screen shares: the banner for errors and the connection, safe client calls."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from textual import on
from textual.screen import Screen
from textual.widgets import Static

from psirag_kb.errors import KBError, TreeEmpty

from ..connection import DaemonGone
from ..messages import Disconnected, Failed

log = logging.getLogger(__name__)

FAILED = object()
"""What `call` returns when the call failed (and a Failed message was posted)."""


class Banner(Static):
    """One line above the body for an error or a lost connection; hidden when empty."""

    def say(self, text: str, level: str = "error") -> None:
        self.set_class(not text, "-empty")
        self.set_class(level == "error", "-error")
        self.set_class(level == "info", "-info")
        self.update(text)


class KBScreen(Screen):
    """A screen that talks to the knowledge base through the app's connection."""

    def on_mount(self) -> None:
        self.watch(self.app, "problem", self._show_problem, init=True)

    def _show_problem(self, problem: str) -> None:
        banner = self.query_one(Banner)
        if problem:
            banner.say(problem, "error")
        elif banner.has_class("-gone"):
            banner.say("")
        banner.set_class(bool(problem), "-gone")

    def call(self, what: str, request: Callable[[Any], Any]) -> Any:
        """In a worker thread: `request(client)`, or FAILED after posting why."""
        try:
            return self.app.connection.request(request)
        except DaemonGone as exc:
            self.post_message(Failed(what, str(exc), gone=True))
            self.app.post_message(Disconnected(str(exc)))
        except TreeEmpty as exc:
            self.post_message(Failed(what, str(exc), passing=True))
        except KBError as exc:
            self.post_message(Failed(what, str(exc)))
        except Exception as exc:  # noqa: BLE001 - a bug shows as an error, never a traceback
            log.exception("%s failed", what)
            self.post_message(Failed(what, f"unexpected {type(exc).__name__}: {exc}"))
        return FAILED

    @on(Failed)
    def show_failure(self, message: Failed) -> None:
        """An error in the banner and a notification (the connection banner says it for a loss)."""
        if message.gone:
            return
        if message.passing:
            self.query_one(Banner).say(message.error)
            return
        self.query_one(Banner).say(f"{message.what} failed: {message.error}")
        self.notify(message.error, title=f"{message.what} failed", severity="error", timeout=8)

    def clear_error(self) -> None:
        """Hide the banner unless the connection is lost."""
        if not self.app.problem:
            self.query_one(Banner).say("")

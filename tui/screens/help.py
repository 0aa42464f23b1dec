"""Help: every key binding, from tui/keys.py."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from .. import keys


def bindings_text() -> Text:
    """Screen, key and what it does, one binding a line."""
    out = Text()
    for screen, bindings in keys.SCREENS.items():
        rows = [(b.key.replace("ctrl+", "^").replace(",", " "),
                 b.description or b.action.replace("_", " ")) for b in bindings]
        rows += keys.EXTRA.get(screen, [])
        for number, (key, what) in enumerate(rows):
            out.append(f"{screen if number == 0 else '':<12}", style="bold")
            out.append(f"{key:<13}", style="bold")
            out.append(f"{what}\n")
    return out


class HelpScreen(ModalScreen[None]):
    """The key bindings over the current screen; escape closes."""

    BINDINGS = keys.HELP

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static("[b]psirag-kb keys[/b]  (escape closes)\n", id="help-title")
            yield Static(bindings_text(), id="help-keys")

    def action_close(self) -> None:
        self.dismiss()

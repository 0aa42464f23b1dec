"""Every key binding of the TUI, in one place; the Help screen is rendered from these lists."""

from __future__ import annotations

from textual.binding import Binding

APP = [
    Binding("f1", "help", "Help"),
    Binding("f2", "switch_mode('query')", "Query"),
    Binding("f3", "switch_mode('tree')", "Tree"),
    Binding("f4", "switch_mode('status')", "Status"),
    Binding("ctrl+q", "quit", "Quit", priority=True),
]

QUERY = [
    Binding("ctrl+n", "next_mode", "Mode"),
    Binding("ctrl+o", "open_editor", "Edit"),
    Binding("ctrl+t", "new_conversation", "New chat"),
    Binding("escape", "focus_input", "Search", show=False),
    Binding("ctrl+r", "focus_results", "Results", show=False),
]

TREE = [
    Binding("r", "reload", "Reload"),
    Binding("ctrl+o", "open_editor", "Edit"),
]

STATUS = [
    Binding("r", "refresh", "Refresh"),
]

HELP = [
    Binding("escape,f1,q", "close", "Close"),
]

SCREENS = {
    "Everywhere": APP,
    "Query": QUERY,
    "Tree": TREE,
    "Status": STATUS,
}

EXTRA = {
    "Query": [("enter", "run the query / show the selected result (a follow-up of the "
                        "questions before it, until ctrl+t starts a new conversation)"),
              ("up", "in the empty box: the last question again"),
              ("tab", "move between input, mode, results and details"),
              ("up/down", "move through the results")],
    "Tree": [("enter/space", "expand or collapse a node; the bars at the right show its "
                             "children sized by passages")],
}

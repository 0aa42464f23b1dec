"""Messages workers post; `@on` handlers alone change widgets."""

from __future__ import annotations

from typing import Any

from textual.message import Message


class _Local(Message, bubble=False):
    """Handled by the screen (or app) it is posted to; never bubbles up."""


class Failed(_Local):
    """A call failed; `what` names it, `error` says why; `passing` when it is a state that
    passes rather than a fault (no topic tree before the first ingest ends)."""

    def __init__(self, what: str, error: str, gone: bool = False, passing: bool = False) -> None:
        super().__init__()
        self.what = what
        self.error = error
        self.gone = gone
        self.passing = passing


class QueryDone(_Local):
    """The answer to a query."""

    def __init__(self, text: str, mode: str, result: dict[str, Any]) -> None:
        super().__init__()
        self.text = text
        self.mode = mode
        self.result = result


class AgentStep(_Local):
    """One finished step of an agent answer that is still being worked on."""

    def __init__(self, step: dict[str, Any]) -> None:
        super().__init__()
        self.step = step


class PathFound(_Local):
    """A chunk's path up the tree, root first."""

    def __init__(self, chunk_id: int, path: list[dict[str, Any]]) -> None:
        super().__init__()
        self.chunk_id = chunk_id
        self.path = path


class NodeLoaded(_Local):
    """A tree node with its children for the Tree widget node `target` (None: the root);
    `node` None when loading it failed."""

    def __init__(self, target: Any, node: dict[str, Any] | None) -> None:
        super().__init__()
        self.target = target
        self.node = node


class OverviewLoaded(_Local):
    """The root of the tree with its children, for the query screen's first view."""

    def __init__(self, node: dict[str, Any]) -> None:
        super().__init__()
        self.node = node


class StatusLoaded(_Local):
    """The knowledge base's status."""

    def __init__(self, status: dict[str, Any]) -> None:
        super().__init__()
        self.status = status


class Disconnected(_Local):
    """The daemon stopped answering."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class Reconnected(_Local):
    """The daemon answers again."""

"""What one ingest call did: counts, problems and time by stage."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

Progress = Callable[[int, int, str], None]
"""progress(done, total, current item)"""


@dataclass
class IngestReport:
    """What one ingest call did."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    renamed: int = 0
    skipped: int = 0
    failed: int = 0
    chunks_embedded: int = 0
    chunks_kept: int = 0
    unavailable: int = 0
    """Indexed files marked unavailable because their folder vanished (their chunks stay)."""
    restored: int = 0
    """Unavailable files found again unchanged: indexed again, nothing read or embedded."""
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    """(path, state, reason) of skipped and failed files, and of indexed files with a note
    (PDF pages that need OCR)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time by stage: read (and chunk), embed, store, tree."""
    tree_build: dict[str, Any] | None = None
    """The whole-tree build this call ran, if any: leaves, seconds, pair mode."""
    compute: dict[str, Any] | None = None
    """Where a pipelined ingest read and embedded (with [compute] ray_address set): "ray" with
    the cluster's address, workers, nodes, files, chunks and rates, or "local" and why."""

    def timed(self, stage: str, seconds: float) -> None:
        """Add time to a stage."""
        self.seconds[stage] = round(self.seconds.get(stage, 0.0) + seconds, 3)

    def merge(self, other: IngestReport) -> None:
        """Add a committed batch's counts, problems and times."""
        for item in fields(self):  # every count, so a new counter is never left out
            if item.type in ("int", int):
                setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))
        self.problems.extend(other.problems)
        for stage, seconds in other.seconds.items():
            self.timed(stage, seconds)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        data = dict(self.__dict__)
        data["problems"] = [{"path": p, "state": s, "reason": r} for p, s, r in self.problems]
        return data

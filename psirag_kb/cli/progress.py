"""Progress on stderr: a transient bar on a terminal, for indexing and abstract writing."""

from __future__ import annotations

import sys
import time
from typing import Any

PROGRESS_LOG_S = 30.0
"""Seconds between the progress lines `maintain` logs without a terminal."""


class ProgressBar:
    """A rich progress bar on a terminal, silence otherwise; with `speed` it shows a text of
    rate and time left, else the time elapsed."""

    def __init__(self, label: str, speed: bool = False) -> None:
        self.bar = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            last = TextColumn("{task.fields[speed]}") if speed else TimeElapsedColumn()
            self.bar = Progress("[progress.description]{task.description}", BarColumn(),
                                MofNCompleteColumn(), last, console=Console(stderr=True),
                                transient=True)
            self.task = self.bar.add_task(label, total=None, speed="")

    def __enter__(self) -> ProgressBar:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, done: int, total: int, speed: str = "") -> None:
        """Move the bar to `done` of `total`."""
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total, speed=speed)

    def __call__(self, done: int, total: int, current: str) -> None:
        self.update(done, total)


def abstract_speed(progress: dict[str, Any]) -> str:
    """The rate, time left, failures and per-host rates of an abstract run."""
    eta = progress["eta_s"]
    speed = f"{progress['rate_per_s']:.2f} nodes/s, " + (
        "ETA ?" if eta is None else f"ETA {int(eta) // 60}:{int(eta) % 60:02d}")
    if progress["failed"]:
        speed += f", {progress['failed']} failed"
    hosts = progress.get("hosts") or []
    if len(hosts) > 1:
        speed += ", " + " ".join(f"{h['host'].split('://')[-1]} {h['rate_per_s']:.2f}/s"
                                 for h in hosts)
    return speed


class AbstractBar:
    """While open, abstract regeneration shows nodes done, rate and ETA on a terminal, and an
    interruption says how many abstracts were kept (with `kb` None: shows what `show` gets)."""

    def __init__(self, kb: Any) -> None:
        self.kb = kb
        self.bar = ProgressBar("abstracts", speed=True)
        self.logged = -PROGRESS_LOG_S

    def __enter__(self) -> AbstractBar:
        if self.kb is not None:
            self.kb.abstract_job.on_progress = self.show
        self.bar.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.bar.__exit__()
        if self.kb is None:
            return
        self.kb.abstract_job.on_progress = None
        if kind is KeyboardInterrupt:
            done = self.kb.abstract_job.last_result.get("regenerated", 0)
            print(f"abstracts kept: {done} written before the interruption", file=sys.stderr)

    def show(self, progress: dict[str, Any]) -> None:
        """Draw one progress snapshot of the abstract job (a line now and then without a
        terminal)."""
        if not progress.get("running"):
            return
        speed = abstract_speed(progress)
        handled = progress["done"] + progress["failed"] + progress["skipped"]
        if self.bar.bar is not None:
            self.bar.update(handled, progress["total"], speed)
            return
        now = time.monotonic()
        if now - self.logged >= PROGRESS_LOG_S or handled >= progress["total"]:
            self.logged = now
            print(f"abstracts: {handled}/{progress['total']} nodes, {speed}", file=sys.stderr,
                  flush=True)

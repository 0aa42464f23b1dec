"""One way for tests to wait: poll a condition until it holds, or fail at a deadline saying what
was awaited. Use it instead of sleeping "long enough" and instead of hand-written deadline loops.

The deadline is only a guard against a hang: a test must never pass or fail by how fast the
machine is, so give a timeout that a loaded machine meets with room to spare.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

TIMEOUT_S = 15.0
"""The default deadline of one wait."""
INTERVAL_S = 0.05
"""The default pause between two looks at the condition."""


class _Deadline:
    def __init__(self, timeout: float, message: str) -> None:
        self.end = time.monotonic() + timeout
        self.timeout = timeout
        self.message = message

    def passed(self) -> bool:
        return time.monotonic() >= self.end

    def fail(self, last: Any) -> AssertionError:
        return AssertionError(f"{self.message or 'condition'} not met within {self.timeout:g} s "
                              f"(last value {last!r})")


def wait_until(predicate: Callable[[], T], timeout: float = TIMEOUT_S,
               interval: float = INTERVAL_S, message: str = "") -> T:
    """Call `predicate` until it returns a true value, and return that value; raise
    AssertionError with `message` when it has not by `timeout` seconds. An exception raised by
    the predicate (an assertion checked on every look, say) propagates at once."""
    deadline = _Deadline(timeout, message)
    while True:
        last = predicate()
        if last:
            return last
        if deadline.passed():
            raise deadline.fail(last)
        time.sleep(interval)


async def wait_until_async(predicate: Callable[[], T], timeout: float = TIMEOUT_S,
                           interval: float = INTERVAL_S, message: str = "",
                           pause: Callable[[float], Awaitable[Any]] | None = None) -> T:
    """`wait_until` inside an event loop: between looks it awaits `pause(interval)` (a Textual
    pilot's `pause`, so the app runs meanwhile; asyncio.sleep by default)."""
    deadline = _Deadline(timeout, message)
    pause = pause or asyncio.sleep
    while True:
        last = predicate()
        if last:
            return last
        if deadline.passed():
            raise deadline.fail(last)
        await pause(interval)


class ManualClock:
    """A stand-in for the `time` module of product code that reads `time.monotonic()`: its
    monotonic clock moves only when a test moves it (`now += seconds`), so that a quiet period
    or a window is crossed exactly when the test says, however slow the machine. Install it with
    `monkeypatch.setattr(f"{SomeClass.__module__}.time", ManualClock())`; `time()` and `sleep()`
    stay real."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    @staticmethod
    def time() -> float:
        return time.time()

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(seconds)

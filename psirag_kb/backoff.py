"""Exponential back-off: the wait after failures in a row, doubling up to a longest wait."""

from __future__ import annotations


class Backoff:
    """Waits of `first` seconds after one failure, doubling with each further one up to
    `longest`; counts the failures in a row itself (`next_delay`, `reset`) or is told them."""

    def __init__(self, first: float, longest: float) -> None:
        self.first = first
        self.longest = longest
        self.failures = 0

    def delay(self, failures: int) -> float:
        """The wait after `failures` (one or more) failures in a row."""
        return min(self.longest, self.first * 2 ** (failures - 1))

    def next_delay(self) -> float:
        """Count one more failure in a row and return the wait after it."""
        self.failures += 1
        return self.delay(self.failures)

    def reset(self) -> None:
        """Forget the failures: the next wait is `first` again."""
        self.failures = 0

"""Exponential back-off: doubling waits, capped, counted or told."""

from __future__ import annotations

from psirag_kb.backoff import Backoff


def test_waits_double_up_to_the_longest_and_start_over_after_a_reset() -> None:
    backoff = Backoff(2.0, 10.0)
    assert [backoff.next_delay() for _ in range(5)] == [2.0, 4.0, 8.0, 10.0, 10.0]
    backoff.reset()
    assert backoff.next_delay() == 2.0


def test_a_told_count_gives_the_same_wait_as_counting() -> None:
    backoff = Backoff(30.0, 3600.0)
    assert [backoff.delay(n) for n in range(1, 10)] == [
        min(3600.0, 30.0 * 2 ** (n - 1)) for n in range(1, 10)]

"""The local Ray cluster's ports: distinct, so no two of its components are given one."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ray_helpers import _free_ports  # noqa: E402


def test_ports_chosen_together_are_distinct_and_avoid_the_taken_ones() -> None:
    taken = set(_free_ports(3))
    for _ in range(20):
        ports = _free_ports(7, taken)
        assert len(set(ports)) == 7 and not taken & set(ports)

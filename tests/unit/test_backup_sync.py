"""`sync_file`: a torn copy made while the source changed is made byte-equal to the source by
rewriting only the blocks that differ (how a backup brings DuckDB's pre-copied file up to date
on the writer)."""

from __future__ import annotations

import os
from pathlib import Path

from psirag_kb.storage.backup import sync_file


def test_only_the_blocks_that_differ_are_written(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    data = bytearray(os.urandom(10 * 4096 + 100))
    source.write_bytes(data)
    assert sync_file(source, target, block=4096) == len(data)  # no copy yet: a whole copy
    assert target.read_bytes() == data
    data[5000] ^= 0xFF  # one block changed, and the file grew by a partial block
    data += os.urandom(3000)
    source.write_bytes(data)
    assert sync_file(source, target, block=4096) == 4096 + 3100  # the changed and the last
    assert target.read_bytes() == data
    assert sync_file(source, target, block=4096) == 0  # equal already: nothing written


def test_a_longer_or_torn_target_ends_equal_to_the_source(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    data = os.urandom(8192 * 3)
    source.write_bytes(data)
    target.write_bytes(os.urandom(8192) + data[8192:] + os.urandom(5000))  # first block torn
    assert sync_file(source, target, block=8192) == 8192
    assert target.read_bytes() == data

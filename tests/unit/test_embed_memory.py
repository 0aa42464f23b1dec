"""Embedding slices hand the allocator's free memory back to the system between them."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from psirag_kb.config import Config
from psirag_kb.ingest import reading
from psirag_kb.ingest.memory import release_free_memory
from psirag_kb.ingest.report import IngestReport
from psirag_kb.storage.records import ChunkRow


class _Fake:
    """Unit vectors of a fixed size; a fake embedder for this unit test only."""

    name = "fake"
    dim = 4

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.ones((len(texts), self.dim), dtype=np.float32)
        return out / 2.0


def _rows(count: int) -> list[ChunkRow]:
    return [ChunkRow(i, "s", 0, 1, 1, 1, f"text {i}", f"h{i}") for i in range(count)]


def test_every_slice_releases_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(reading, "release_free_memory", lambda: calls.append(1) or True)
    rows = _rows(2 * reading.EMBED_SLICE + 1)
    reading.BatchReader(Config(), _Fake()).embed(rows, IngestReport())
    assert len(calls) == 3
    assert all(row.vector is not None for row in rows)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_works_on_glibc() -> None:
    assert release_free_memory() is True

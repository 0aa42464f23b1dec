"""Closing the store while other threads still read through it."""

from __future__ import annotations

import threading
from pathlib import Path

from psirag_kb.storage.store import Store


def close_while_reading(store: Store) -> int:
    """Close `store` while a thread reads its meta table in a loop; the reads made."""
    started, stop = threading.Event(), threading.Event()
    reads: list[int] = []

    def read() -> None:
        while not stop.is_set():
            try:
                reads.append(len(store.meta()))
            except Exception:  # noqa: BLE001 - the closed connection ends the reader
                return
            started.set()

    reader = threading.Thread(target=read)
    reader.start()
    started.wait()
    try:
        store.close()
    finally:
        stop.set()
        reader.join()
    return len(reads)


def test_close_waits_out_a_reader_making_cursors(tmp_path: Path) -> None:
    """DuckDB refuses to close a connection while another thread makes a cursor of it: the
    store's close waits for a gap instead of failing (a tree rebuild reads as the KB closes)."""
    for _ in range(5):
        assert close_while_reading(Store(tmp_path / "kb.duckdb", "m", lambda: 8)) > 0

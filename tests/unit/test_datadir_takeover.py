"""The takeover protocol of a data directory: a daemon asks an in-process session to hand over."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from waiting import wait_until

from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.service.client import open_local
from psirag_kb.storage.datadir import (
    DAEMON,
    SESSION,
    TAKEOVER_FILE,
    DataDirLock,
    holder,
    takeover_requested,
)


def test_a_waiting_daemon_asks_the_session_and_takes_over(tmp_path: Path) -> None:
    session = DataDirLock(tmp_path)
    assert session.try_acquire(SESSION, "mcp") is None
    found = holder(tmp_path)
    assert (found.role, found.name, found.pid) == (SESSION, "mcp", os.getpid())
    assert found.describe() == f"psirag-kb mcp (pid {os.getpid()})"
    daemon = DataDirLock(tmp_path)
    stop = threading.Event()
    waiter = threading.Thread(target=daemon.acquire, args=(DAEMON, None, stop), daemon=True)
    waiter.start()
    wait_until(lambda: takeover_requested(tmp_path) == os.getpid(), 10, 0.01,
               "the waiting daemon's takeover request")
    session.release()  # what the session does once its stores are closed
    waiter.join(10)
    assert not waiter.is_alive()
    assert holder(tmp_path).role == DAEMON
    assert not (tmp_path / TAKEOVER_FILE).exists()
    daemon.release()


def test_a_request_of_a_dead_process_is_ignored(tmp_path: Path) -> None:
    (tmp_path / TAKEOVER_FILE).write_text("999999999\n")
    assert takeover_requested(tmp_path) is None


def test_a_command_names_the_session_instead_of_waiting(tmp_path: Path) -> None:
    session = DataDirLock(tmp_path)
    assert session.try_acquire(SESSION, "tui") is None
    try:
        with pytest.raises(KBError, match=r"psirag-kb tui \(pid \d+\).*psirag-kb daemon"):
            open_local(Config().with_data_dir(tmp_path))
    finally:
        session.release()

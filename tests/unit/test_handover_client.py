"""The handover client's logic over fakes: calls in flight during a handover are asked again of
the daemon, and calls made meanwhile wait for it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from psirag_kb.config import Config
from psirag_kb.service import handover
from psirag_kb.service.client import LocalClient
from psirag_kb.storage.datadir import request_takeover


class SlowKB:
    """Answers queries in-process; a query marked slow waits until the stores close, then fails
    as a closed DuckDB connection would."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.started = threading.Event()

    def query(self, text: str, **_kwargs: Any) -> dict[str, Any]:
        if text == "slow":
            self.started.set()
            self.closed.wait(10)
            raise RuntimeError("Connection already closed")
        return {"query": text, "served_by": "in-process"}

    def close(self) -> None:
        self.closed.set()


class Daemon:
    """Stands in for the daemon's HTTPClient."""

    url = "http://127.0.0.1:1"

    def query(self, text: str, **_kwargs: Any) -> dict[str, Any]:
        return {"query": text, "served_by": "daemon"}

    def health(self) -> dict[str, Any]:
        return {"pid": 1}

    def close(self) -> None:
        pass


def test_a_call_cut_short_by_the_handover_is_answered_by_the_daemon(tmp_path: Path,
                                                                    monkeypatch) -> None:
    monkeypatch.setattr(handover, "DRAIN_S", 0.2)
    monkeypatch.setattr(handover, "POLL_S", 0.02)
    monkeypatch.setattr(handover, "running_daemon", lambda *a, **k: Daemon())
    kb = SlowKB()
    client = handover.HandoverClient(Config().with_data_dir(tmp_path), LocalClient(kb), "mcp")
    try:
        assert client.query("fast")["served_by"] == "in-process"
        answers: list[dict[str, Any]] = []
        slow = threading.Thread(target=lambda: answers.append(client.query("slow")))
        slow.start()
        assert kb.started.wait(10)
        request_takeover(tmp_path)  # a daemon asks (this process stands in for it)
        slow.join(10)
        assert answers == [{"query": "slow", "served_by": "daemon"}]
        assert kb.closed.is_set() and client.url == Daemon.url
        assert client.query("next")["served_by"] == "daemon"
    finally:
        client.close()


def test_a_session_whose_daemon_never_comes_reopens_in_process(tmp_path: Path,
                                                               monkeypatch) -> None:
    monkeypatch.setattr(handover, "POLL_S", 0.02)
    monkeypatch.setattr(handover, "running_daemon", lambda *a, **k: None)
    reopened = LocalClient(SlowKB())
    monkeypatch.setattr(handover, "open_local", lambda *a, **k: reopened)
    first = SlowKB()
    client = handover.HandoverClient(Config().with_data_dir(tmp_path), LocalClient(first), "tui")
    try:
        request_takeover(tmp_path)
        assert first.closed.wait(10)  # handing over
        (tmp_path / "takeover.request").unlink()  # the daemon gave up (stopped while waiting)
        wait_until(lambda: client.inner is reopened, 10, message="the session reopened")
        assert client.query("x")["served_by"] == "in-process"
    finally:
        client.close()


def test_a_request_no_daemon_acts_on_is_dropped_and_the_session_reopens(tmp_path: Path,
                                                                        monkeypatch) -> None:
    monkeypatch.setattr(handover, "POLL_S", 0.02)
    monkeypatch.setattr(handover, "UNCLAIMED_S", 0.2)
    monkeypatch.setattr(handover, "running_daemon", lambda *a, **k: None)
    reopened = LocalClient(SlowKB())
    monkeypatch.setattr(handover, "open_local", lambda *a, **k: reopened)
    client = handover.HandoverClient(Config().with_data_dir(tmp_path), LocalClient(SlowKB()),
                                     "mcp")
    try:
        request_takeover(tmp_path)  # a live pid (ours) that never takes the free lock
        wait_until(lambda: client.inner is reopened, 10, message="the session reopened")
        assert not (tmp_path / "takeover.request").exists()
    finally:
        client.close()


class TalkingKB(SlowKB):
    """Keeps conversations in-process, as the knowledge base does."""

    def new_conversation(self, title: str = "", **_kwargs: Any) -> dict[str, Any]:
        return {"id": "c1", "title": title, "served_by": "in-process"}

    def ask(self, question: str, **_kwargs: Any) -> dict[str, Any]:
        return {"question": question, "served_by": "in-process"}


class TalkingDaemon(Daemon):
    """The daemon's client, with conversations."""

    def ask(self, question: str, **_kwargs: Any) -> dict[str, Any]:
        return {"question": question, "served_by": "daemon"}


def test_conversations_go_through_the_session_before_and_after_the_handover(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(handover, "DRAIN_S", 0.2)
    monkeypatch.setattr(handover, "POLL_S", 0.02)
    monkeypatch.setattr(handover, "running_daemon", lambda *a, **k: TalkingDaemon())
    kb = TalkingKB()
    client = handover.HandoverClient(Config().with_data_dir(tmp_path), LocalClient(kb), "tui")
    try:
        assert client.new_conversation("notes")["served_by"] == "in-process"
        assert client.ask("What is Flask?", conversation="c1")["served_by"] == "in-process"
        request_takeover(tmp_path)
        assert kb.closed.wait(10)
        wait_until(lambda: client.url == Daemon.url, 10, message="handed over to the daemon")
        assert client.ask("How do I install it?")["served_by"] == "daemon"
        with pytest.raises(AttributeError):
            client.no_such_operation()  # an unknown method is not forwarded
    finally:
        client.close()

"""POST /api/answer streams agent steps as NDJSON; HTTPClient.answer reads them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from psirag_kb.errors import KBError
from psirag_kb.service.api import APIServer
from psirag_kb.service.client import HTTPClient


class AnsweringApp:
    """Two steps then an answer; 'fail' raises a KBError after one step.

    After its first step it waits until the client says it has that step: an answer that only
    arrives whole (a buffered stream) never gets the signal and reports it.
    """

    def __init__(self) -> None:
        self.first_step_seen = threading.Event()
        self.streamed: bool | None = None

    def answer(self, text: str, k: int | None,
               on_step: Callable[[dict[str, Any]], None], access: Any = None) -> dict[str, Any]:
        on_step({"query": text, "passages": [{"chunk_id": 1, "source": "a"}]})
        if text == "fail":
            raise KBError("the knowledge base is closed")
        self.streamed = self.first_step_seen.wait(5.0)
        on_step({"query": "second", "passages": []})
        return {"query": text, "mode": "agent", "answer": "Delhi", "status": "answered", "k": k}


@pytest.fixture
def app() -> AnsweringApp:
    return AnsweringApp()


@pytest.fixture
def client(app: AnsweringApp) -> Iterator[HTTPClient]:
    token = "answer-test-token-" + "a" * 32
    server = APIServer(app, "127.0.0.1", 0, token)
    server.start()
    try:
        yield HTTPClient(server.url, token)
    finally:
        server.stop()


def test_steps_stream_before_the_answer(client, app):
    steps: list[dict] = []

    def on_step(step: dict) -> None:
        steps.append(step)
        app.first_step_seen.set()  # the client has the first step while the answer is pending

    answer = client.answer("Where is the Oberoi Group?", k=3, on_step=on_step)
    assert app.streamed is True
    assert [s["query"] for s in steps] == ["Where is the Oberoi Group?", "second"]
    assert answer["answer"] == "Delhi" and answer["k"] == 3


def test_errors_after_streaming_started_reach_the_client(client):
    steps: list[dict] = []
    with pytest.raises(KBError, match="knowledge base is closed"):
        client.answer("fail", on_step=steps.append)
    assert len(steps) == 1


def test_bad_requests_are_refused_before_streaming(client):
    with pytest.raises(KBError, match="400.*empty"):
        client.answer("   ")
    with pytest.raises(KBError, match="400.*k must be"):
        client.answer("x", k=0)

"""The /v1 endpoint's own logic against a fake application: the reply's Markdown keeps a
document's markup inert, a stream that fails after it began ends with OpenAI's error event,
and keep-alive comments flow while an answer is worked on."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from psirag_kb.errors import KBError
from psirag_kb.service import v1 as v1_module
from psirag_kb.service.api import APIServer
from psirag_kb.serving.openai_compat import MODEL, parse, reply

TOKEN = "unit-test-token-" + "v" * 32
ROW = {"source": "/docs/`odd`.md", "lines": [3, 4], "location": None, "chunk_id": 7,
       "text": "```\n<img src=x onerror=alert(1)> [link](javascript:alert(1))\n```"}


class FakeApp:
    """Answers `ask` with one passage; "boom" fails, "slow" waits for `release`."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked: list[tuple[str, Any]] = []

    def health(self) -> dict[str, Any]:
        return {"ok": True}

    def ask(self, question: str, **options: Any) -> dict[str, Any]:
        self.asked.append((question, options.get("history")))
        if question == "boom":
            raise KBError("history: the earlier turns cannot be read")
        if question == "slow":
            self.release.wait(10)
        return {"mode": "agent", "status": "no_llm", "answer": None, "citations": [ROW],
                "query": question, "searched": question, "rewrite": "as_is"}


@pytest.fixture
def served() -> Iterator[tuple[APIServer, FakeApp]]:
    app = FakeApp()
    server = APIServer(app, "127.0.0.1", 0, TOKEN, 100_000)
    server.start()
    yield server, app
    app.release.set()
    server.stop()


def client(server: APIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=TOKEN, max_retries=0, timeout=20)


def test_passages_are_fenced_so_their_markup_stays_text() -> None:
    text = reply({"status": "no_llm", "citations": [ROW]})
    fence = "````"  # longer than the passage's own ``` lines
    assert f"{fence}text\n```\n<img" in text and text.rstrip().endswith(fence)
    assert "`` /docs/`odd`.md ``" in text and "lines 3-4" in text


def test_history_and_question_are_split_from_the_messages() -> None:
    asked = parse({"model": MODEL, "temperature": 0.2, "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "What is Helgrind?"}]},
        {"role": "assistant", "content": "A thread error detector."},
        {"role": "user", "content": "What are its options?"}]})
    assert asked.question == "What are its options?" and not asked.stream
    assert [m["role"] for m in asked.history] == ["system", "user", "assistant"]
    assert asked.history[1]["content"] == "What is Helgrind?"


def test_a_stream_that_fails_after_it_began_ends_with_an_error_event(served) -> None:
    server, _ = served
    stream = client(server).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "boom"}], stream=True)
    with pytest.raises(openai.APIError, match="earlier turns cannot be read"):
        list(stream)
    with pytest.raises(openai.BadRequestError, match="earlier turns cannot be read"):
        client(server).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "boom"}])


def test_keep_alive_comments_flow_while_the_answer_is_worked_on(
        served, monkeypatch: pytest.MonkeyPatch) -> None:
    server, app = served
    monkeypatch.setattr(v1_module, "KEEP_ALIVE_EVENT_S", 0.05)
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=20)
    body = json.dumps({"model": MODEL, "stream": True,
                       "messages": [{"role": "user", "content": "slow"}]})
    connection.request("POST", "/v1/chat/completions", body=body,
                       headers={"Authorization": f"Bearer {TOKEN}",
                                "Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    assert response.readline().startswith(b"data: {")  # the role chunk, before the answer
    response.readline()
    assert response.readline() == b": working\n"  # the answer is still being worked on
    app.release.set()
    rest = response.read()
    connection.close()
    assert rest.rstrip().endswith(b"data: [DONE]") and b'"citations"' in rest


def test_v1_routing_errors_and_refusals_have_openais_shape(served) -> None:
    server, _ = served
    port = server.server_address[1]

    def get(path: str, token: str = TOKEN) -> tuple[int, dict[str, Any], Any]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            response = connection.getresponse()
            return response.status, json.loads(response.read()), response.headers
        finally:
            connection.close()

    status, body, _ = get("/v1/nothing")
    assert status == 404 and "no such endpoint" in body["error"]["message"]
    status, body, _ = get("/v1/chat/completions")
    assert status == 405 and body["error"]["type"] == "invalid_request_error"
    status, body, headers = get("/v1/models", "w" * 40)
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert headers["WWW-Authenticate"] == "Bearer"
    status, body, _ = get("/api/nothing")  # the /api routes keep their own shape
    assert status == 404 and isinstance(body["error"], str)

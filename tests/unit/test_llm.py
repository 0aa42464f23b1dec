"""The Ollama wrapper against the fake server: options, availability and clear errors."""

from __future__ import annotations

import json
import socket

import pytest
from waiting import wait_until

from psirag_kb.config import LLMConfig
from psirag_kb.errors import LLMError
from psirag_kb.llm.client import DEFAULT_HOST, FormatRefused, OllamaLLM, ollama_host

HELLO = [{"role": "user", "content": "hello"}]
SCHEMA = {"type": "object", "properties": {"action": {"type": "string", "enum": ["a", "b"]},
                                           "n": {"type": "array", "items": {"type": "integer"}}},
          "required": ["action"]}


def llm_for(url: str, timeout: float = 10.0) -> OllamaLLM:
    return OllamaLLM(LLMConfig(enabled=True, host=url, timeout_s=timeout))


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_host_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ollama_host(LLMConfig()) == DEFAULT_HOST
    monkeypatch.setenv("OLLAMA_HOST", "http://gpu-box:11434")
    assert ollama_host(LLMConfig()) == "http://gpu-box:11434"
    assert ollama_host(LLMConfig(host="http://other:1")) == "http://other:1"


def test_chat_sends_deterministic_options(fake_ollama) -> None:
    fake_ollama.script("Hi there.")
    llm = llm_for(fake_ollama.url)
    assert llm.chat("llama3.1:8b", HELLO, num_ctx=4096, num_predict=64) == "Hi there."
    (request,) = fake_ollama.chats
    assert request.path == "/api/chat"
    assert request.body["stream"] is False
    assert request.body["messages"] == HELLO
    assert request.options == {"temperature": 0, "repeat_penalty": 1.3, "num_ctx": 4096,
                               "num_predict": 64}


def test_check_and_available(fake_ollama) -> None:
    llm = llm_for(fake_ollama.url)
    llm.check("llama3.1:8b")
    fake_ollama.models.append("phi3:latest")
    llm.check("phi3")  # no tag means latest
    with pytest.raises(LLMError, match="model mistral is not installed: run `ollama pull mistral`"):
        llm.check("mistral")
    assert llm.available("llama3.1:8b") and not llm.available("mistral")
    tags = sum(r.path == "/api/tags" for r in fake_ollama.requests)
    assert llm.available("llama3.1:8b") and not llm.available("mistral")
    assert sum(r.path == "/api/tags" for r in fake_ollama.requests) == tags  # cached


def test_dead_server() -> None:
    llm = llm_for(closed_port_url(), timeout=2)
    with pytest.raises(LLMError, match="is not reachable: start it with `ollama serve`"):
        llm.check("llama3.1:8b")
    with pytest.raises(LLMError, match="ollama serve"):
        llm.chat("llama3.1:8b", HELLO)
    assert not llm.available("llama3.1:8b")


def test_slow_server_times_out(fake_ollama) -> None:
    fake_ollama.script(mode="slow", delay=120.0)  # held until the fixture stops the server
    llm = llm_for(fake_ollama.url, timeout=0.5)
    with pytest.raises(LLMError, match="did not answer .* within 0.5 s"):
        llm.chat("llama3.1:8b", HELLO)
    # the client gave up while the server still held the request (without the client's
    # timeout, chat would have returned the answer after the delay and raised nothing)
    wait_until(lambda: fake_ollama.holding == 1, message="the server holding the request")
    assert [r.path for r in fake_ollama.chats] == ["/api/chat"]


def test_missing_model_on_chat(fake_ollama) -> None:
    with pytest.raises(LLMError, match="run `ollama pull gemma3:27b`"):
        llm_for(fake_ollama.url).chat("gemma3:27b", HELLO)
    fake_ollama.script(mode="missing")
    with pytest.raises(LLMError, match="run `ollama pull llama3.1:8b`"):
        llm_for(fake_ollama.url).chat("llama3.1:8b", HELLO)


def test_server_error_and_empty_reply(fake_ollama) -> None:
    llm = llm_for(fake_ollama.url)
    fake_ollama.script(mode="error")
    with pytest.raises(LLMError, match="HTTP 500"):
        llm.chat("llama3.1:8b", HELLO)
    fake_ollama.script("   ", mode="normal")
    with pytest.raises(LLMError, match="empty reply"):
        llm.chat("llama3.1:8b", HELLO)


def test_fake_server_streams_when_asked(fake_ollama) -> None:
    import ollama

    fake_ollama.script("one two three")
    client = ollama.Client(host=fake_ollama.url, timeout=5)
    parts = [p.message.content for p in client.chat("llama3.1:8b", HELLO, stream=True)]
    assert "".join(parts) == "one two three" and len(parts) > 2
    assert client.generate("llama3.1:8b", "x").response == "fake reply"


def test_chat_with_a_schema_sends_format(fake_ollama) -> None:
    fake_ollama.script({"action": "a", "n": [1]})
    llm = llm_for(fake_ollama.url)
    assert llm.chat("llama3.1:8b", HELLO, schema=SCHEMA) == '{"action": "a", "n": [1]}'
    assert fake_ollama.chats[0].format == SCHEMA and fake_ollama.violations == []
    assert llm.structured("llama3.1:8b")


def test_server_refusing_format_is_remembered_per_model(fake_ollama) -> None:
    fake_ollama.script("plain text", structured=False)
    llm = llm_for(fake_ollama.url)
    with pytest.raises(FormatRefused, match="refused structured output .* ChatRequest.format"):
        llm.chat("llama3.1:8b", HELLO, schema=SCHEMA)
    assert not llm.structured("llama3.1:8b") and llm.structured("other:1b")
    assert llm.chat("llama3.1:8b", HELLO) == "plain text"  # the refused reply stayed queued
    with pytest.raises(LLMError, match="ollama pull gemma3:27b") as missing:
        llm.chat("gemma3:27b", HELLO, schema=SCHEMA)
    assert not isinstance(missing.value, FormatRefused) and llm.structured("gemma3:27b")


@pytest.mark.parametrize(("reply", "problem"), [
    ("not json", "not JSON"),
    ({"n": [1]}, "lacks the required 'action'"),
    ({"action": "c"}, "'c' is not one of"),
    ({"action": "a", "n": ["x"]}, "$.n[0] is str, not integer"),
    ({"action": "a", "n": [True]}, "$.n[0] is bool, not integer"),
])
def test_fake_server_checks_replies_against_the_schema(fake_ollama, reply, problem) -> None:
    import ollama

    client = ollama.Client(host=fake_ollama.url, timeout=5)
    fake_ollama.script(reply)
    with pytest.raises(ollama.ResponseError, match="does not match the format schema") as exc:
        client.chat("llama3.1:8b", HELLO, format=SCHEMA)
    assert exc.value.status_code == 500
    assert len(fake_ollama.violations) == 1 and problem in fake_ollama.violations[0]
    first = client.chat("llama3.1:8b", HELLO).message.content  # still queued, no format
    assert first == (reply if isinstance(reply, str) else json.dumps(reply))
    fake_ollama.script(reply, format_check="pass")
    assert client.chat("llama3.1:8b", HELLO, format=SCHEMA).message.content == first
    assert len(fake_ollama.violations) == 2

"""The OpenAI-compatible /v1 endpoint driven by the official `openai` client: a daemon on the
real model with two readers of different folders; models listed, chat completions streamed and
not, follow-ups resolved from `messages`, citations only from the caller's grants, OpenAI's
error shapes, and the LLM path against the scripted fake Ollama."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from daemon_helpers import serving_team

from psirag_kb.service.daemon import Daemon

MARKERS = {"shared": "heliotrope", "hr": "quillwort", "fin": "saxifrage"}
TOPICS = ["the garden irrigation plan", "the winter heating budget", "the office move to the "
          "harbour"]
READS = {"ana": ("shared", "hr"), "bo": ("shared", "fin")}
MODEL = "psirag-kb"


def note(folder: str, number: int) -> str:
    marker, topic = MARKERS[folder], TOPICS[number]
    return (f"# {marker.title()} memo {number}\n\nThe {marker} team wrote this memo about "
            f"{topic}. Everyone in {marker} agreed that {topic} needs a decision before "
            f"spring, and the {marker} lead will report on {topic} at the next meeting.\n")


class Team:
    """The running daemon, its folders and each person's token."""

    def __init__(self, daemon: Daemon, docs: Path, tokens: dict[str, str]) -> None:
        self.daemon, self.docs, self.tokens = daemon, docs, tokens

    def client(self, person: str) -> openai.OpenAI:
        """The official client pointed at <server>/v1 with the person's token as its key."""
        return openai.OpenAI(base_url=self.daemon.api.url + "/v1",
                             api_key=self.tokens[person], max_retries=0, timeout=60)

    def foreign(self, person: str) -> list[str]:
        hidden = [f for f in MARKERS if f not in READS[person]]
        return [w for f in hidden for w in (MARKERS[f], str(self.docs / f))]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, minilm: Any) -> Iterator[Team]:
    notes = {f"{folder}/memo-{number}.md": note(folder, number)
             for folder in MARKERS for number in range(len(TOPICS))}
    grants = {name: ("reader", list(folders)) for name, folders in READS.items()}
    with serving_team(tmp_path_factory.mktemp("openai-endpoint"), notes, grants,
                      " ".join(MARKERS.values()), minilm) as (daemon, docs, tokens):
        yield Team(daemon, docs, tokens)


def test_the_model_is_listed(team: Team) -> None:
    models = team.client("ana").models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert team.client("bo").models.retrieve(MODEL).id == MODEL


@pytest.mark.parametrize("person", sorted(READS))
def test_a_completion_cites_only_the_persons_folders(team: Team, person: str) -> None:
    question = "Which memos are about the winter heating budget?"
    reply = team.client(person).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": question}])
    content = reply.choices[0].message.content
    citations = reply.model_extra["citations"]
    assert reply.choices[0].finish_reason == "stop" and citations
    assert {"source", "lines", "location", "chunk_id", "text"} <= set(citations[0])
    allowed = [str(team.docs / f) for f in READS[person]]
    assert all(any(c["source"].startswith(a + "/") for a in allowed) for c in citations)
    assert "Passages found (no LLM is configured" in content
    assert citations[0]["source"] in content and "```text" in content
    seen = (content + json.dumps(citations)).lower()
    assert not [w for w in team.foreign(person) if w.lower() in seen]
    own = MARKERS[READS[person][1]]
    assert own in seen  # the person's own folder is found


def test_streaming_ends_with_the_citations_and_done(team: Team) -> None:
    messages = [{"role": "user", "content": "What did the quillwort team decide about the "
                                            "office move?"}]
    whole = team.client("ana").chat.completions.create(model=MODEL, messages=messages)
    stream = team.client("ana").chat.completions.create(model=MODEL, messages=messages,
                                                        stream=True)
    pieces = list(stream)
    assert pieces[0].choices[0].delta.role == "assistant"
    text = "".join(p.choices[0].delta.content or "" for p in pieces)
    assert text == whole.choices[0].message.content
    last = pieces[-1]
    assert last.choices[0].finish_reason == "stop"
    assert last.model_extra["citations"] == whole.model_extra["citations"]
    assert all("citations" not in (p.model_extra or {}) for p in pieces[:-1])
    raw = _post(team, "ana", {"model": MODEL, "messages": messages, "stream": True})
    assert raw.rstrip().endswith(b"data: [DONE]") and raw.startswith(b"data: {")


def test_earlier_messages_resolve_a_follow_up(team: Team) -> None:
    history = [
        {"role": "system", "content": "You are a helpful assistant."},  # as chat apps send
        {"role": "user", "content": "What did the quillwort team write about the harbour "
                                    "office move?"},
        {"role": "assistant", "content": "The quillwort memo 2 is about the office move."},
        {"role": "user", "content": "And who reports on it?"},
    ]
    reply = team.client("ana").chat.completions.create(model=MODEL, messages=history)
    alone = team.client("ana").chat.completions.create(model=MODEL, messages=history[-1:])
    extra, alone_extra = reply.model_extra["psirag"], alone.model_extra["psirag"]
    assert alone_extra["rewrite"] == "as_is" and extra["rewrite"] != "as_is"
    assert "quillwort" in extra["searched"].lower()
    assert reply.choices[0].message.content.startswith("searched: ")
    top = reply.model_extra["citations"][0]["source"]
    assert top.startswith(str(team.docs / "hr"))


def test_a_wrong_key_is_a_401_in_openais_shape(team: Team) -> None:
    client = openai.OpenAI(base_url=team.daemon.api.url + "/v1", api_key="wrong" * 8,
                           max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user",
                                                                "content": "hi"}])
    assert caught.value.status_code == 401
    error = caught.value.body
    assert error["code"] == "invalid_api_key" and "token" in error["message"]
    assert error["type"] == "authentication_error"


@pytest.mark.parametrize("body, fragment", [
    ({"model": MODEL, "messages": []}, "non-empty list"),
    ({"model": MODEL, "messages": [{"role": "assistant", "content": "x"}]}, "last message"),
    ({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, "role"),
    ({"model": MODEL, "messages": [{"role": "user", "content": 3}]}, "content"),
    ({"model": "", "messages": [{"role": "user", "content": "x"}]}, "model"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}],
      "extra_body": {"colour": 1}}, "unknown"),
])
def test_malformed_bodies_are_400_in_openais_shape(team: Team, body: dict,
                                                   fragment: str) -> None:
    client = team.client("bo")
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**body)
    assert caught.value.status_code == 400 and fragment in caught.value.body["message"]
    assert caught.value.body["type"] == "invalid_request_error"


def test_an_unknown_model_is_a_404(team: Team) -> None:
    with pytest.raises(openai.NotFoundError):
        team.client("bo").chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "x"}])


def test_with_an_llm_the_reply_is_the_agents_answer(team: Team, fake_ollama) -> None:
    kb = team.daemon.kb
    before = kb.config
    kb.config = kb.config.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=10.0,
                                  grounding=False)
    fake_ollama.script(fn=lambda body: {"action": "answer", "cited": [1],
                                        "text": "The lead reports at the next meeting [1]."})
    try:
        for person in sorted(READS):
            reply = team.client(person).chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Who reports on the "
                                                                   "garden irrigation plan?"}])
            content = reply.choices[0].message.content
            citations = reply.model_extra["citations"]
            assert content.startswith("The lead reports at the next meeting [1].")
            assert "Sources:\n[1] " in content and citations[0]["number"] == 1
            assert reply.model_extra["psirag"]["status"] == "answered"
            allowed = [str(team.docs / f) for f in READS[person]]
            assert any(citations[0]["source"].startswith(a + "/") for a in allowed)
            assert citations[0]["source"] in content
    finally:
        kb.config = before
    assert fake_ollama.chats and fake_ollama.violations == []


def _post(team: Team, person: str, body: dict) -> bytes:
    request = urllib.request.Request(team.daemon.api.url + "/v1/chat/completions",
                                     data=json.dumps(body).encode(), method="POST")
    request.add_header("Authorization", f"Bearer {team.tokens[person]}")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        return response.read()

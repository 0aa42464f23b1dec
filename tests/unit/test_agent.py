"""The retrieve-and-answer loop against the fake Ollama server, over a scripted stand-in KB."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from psirag_kb.answer import agent_prompts as prompts
from psirag_kb.answer.agent import RetrieveAndAnswer, parse_reply, unanswerable
from psirag_kb.answer.llm import OllamaLLM
from psirag_kb.config import Config
from psirag_kb.search.multiround import expand, max_score, salient_phrases

MODEL = "llama3.1:8b"
QUESTION = "The Oberoi family is part of a hotel company that has a head office in what city?"
PASSAGES = {
    "oberoi family": [("Hotel Tallcorn\nThe Hotel Tallcorn is in Marshalltown, Iowa.", "h-1"),
                      ("Hotel Bond\nHotel Bond is a historic hotel in Hartford.", "h-2")],
    "company": [("The Oberoi Group\nThe Oberoi Group has its head office in Delhi.", "h-3"),
                ("Hotel Bond\nHotel Bond is a historic hotel in Hartford.", "h-2")],
}


class StubKB:
    """Hybrid results looked up by a keyword of the query; records every query."""

    dim = 3

    def __init__(self, config: Config) -> None:
        self.config = config
        self.queries: list[str] = []

    def embed_query(self, text: str) -> np.ndarray:
        return np.ones(3, dtype=np.float32)

    def query(self, text: str, mode: str | None = None, k: int | None = None) -> dict[str, Any]:
        assert mode == "hybrid"
        self.queries.append(text)
        key = "oberoi family" if text == QUESTION else "company"
        results = [{"rank": i, "score": 1.0 / (60 + i), "source": source, "lines": None,
                    "text": body, "chunk_id": int(source[2:]), "path": "/corpus.jsonl"}
                   for i, (body, source) in enumerate(PASSAGES[key][:k], start=1)]
        return {"query": text, "mode": mode, "results": results}


@pytest.fixture
def setup(fake_ollama):
    config = Config().replace("llm", enabled=True, host=fake_ollama.url, timeout_s=10.0)
    kb = StubKB(config)
    return kb, RetrieveAndAnswer(kb, OllamaLLM(config.llm), MODEL), fake_ollama


def last_user(request) -> str:
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"][-1]


def test_answers_at_once_with_cited_passages(setup):
    kb, agent, fake = setup
    fake.script("Thought: The group is in Delhi [2].\nAnswer: Delhi")
    steps: list[dict] = []
    answer = agent.run(QUESTION, k=2, hops=2, on_step=steps.append)
    assert (answer.status, answer.answer) == ("answered", "Delhi")
    assert [c["source"] for c in answer.citations] == ["h-2"]
    assert answer.citations[0]["number"] == 2 and answer.citations[0]["lines"] is None
    assert kb.queries == [QUESTION]
    assert len(fake.chats) == 1 and fake.chats[0].options["temperature"] == 0
    assert "Retrieval attempts remaining: 1" in last_user(fake.chats[0])
    assert "[1] (h-1) Hotel Tallcorn" in last_user(fake.chats[0])
    assert len(steps) == 1 and steps[0]["action"] == "answer"
    assert answer.as_dict()["mode"] == "agent" and answer.as_dict()["results"][0]["rank"] == 1


def test_retrieve_then_answer_adds_new_passages(setup):
    kb, agent, fake = setup
    fake.script("Thought: nothing on the Oberoi family.\nRetrieve: Which hotel company is it?",
                "Thought: The Oberoi Group [3].\nAnswer: Delhi")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert answer.status == "answered" and answer.answer == "Delhi"
    assert kb.queries == [QUESTION, "Which hotel company is it?"]
    second = last_user(fake.chats[1])
    assert "[3] (h-3) The Oberoi Group" in second and "Hotel Bond" not in second  # dedup
    assert prompts.MUST_ANSWER in second
    assert [s["query"] for s in answer.steps] == [QUESTION, "Which hotel company is it?"]
    assert [p["source"] for p in answer.steps[1]["passages"]] == ["h-3"]
    assert [c["source"] for c in answer.citations] == ["h-3"]


def test_retrieve_at_the_cap_is_not_honoured(setup):
    kb, agent, fake = setup
    fake.script("Thought: need more.\nRetrieve: Which hotel company is it?",
                "Thought: still unsure.\nRetrieve: Oberoi head office",
                "Thought: From [3].\nAnswer: Delhi")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert answer.status == "answered" and answer.answer == "Delhi"
    assert kb.queries == [QUESTION, "Which hotel company is it?"]  # no third retrieval
    assert last_user(fake.chats[2]) == prompts.NO_RETRIEVAL_LEFT
    assert answer.steps[-1]["refused"] == "Oberoi head office"


def test_one_hop_budget_means_answer_now_and_persisting_is_not_mentioned(setup):
    kb, agent, fake = setup
    fake.script("Retrieve: Which hotel company is it?", "Retrieve: again please")
    answer = agent.run(QUESTION, k=2, hops=1)
    assert prompts.MUST_ANSWER in last_user(fake.chats[0])
    assert (answer.status, answer.answer) == ("not_mentioned", "Not mentioned")
    assert kb.queries == [QUESTION] and answer.citations == []


def test_not_mentioned(setup):
    _, agent, fake = setup
    fake.script("Thought: The documents never say.\nAnswer: Not mentioned.")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert (answer.status, answer.answer, answer.citations) == ("not_mentioned",
                                                               "Not mentioned", [])


def test_unparseable_twice_is_an_error_not_an_answer(setup):
    _, agent, fake = setup
    fake.script("I think it is Delhi.", "Definitely Delhi!")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert answer.status == "error" and answer.answer is None
    assert answer.steps[-1]["reply"] == "Definitely Delhi!"
    assert answer.steps[-1]["unparseable"] == ["I think it is Delhi."]
    assert prompts.FORMAT_REMINDER in last_user(fake.chats[1])


def test_unparseable_once_is_retried(setup):
    _, agent, fake = setup
    fake.script("Delhi, probably.", "Thought: [1] says nothing, [2] neither.\nAnswer: Delhi")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert (answer.status, answer.answer) == ("answered", "Delhi")


def test_dead_server_falls_back_to_retrieval(fake_ollama):
    url = fake_ollama.url
    fake_ollama.stop()
    config = Config().replace("llm", enabled=True, host=url, timeout_s=5.0)
    kb = StubKB(config)
    answer = RetrieveAndAnswer(kb, OllamaLLM(config.llm), MODEL).run(QUESTION, k=2, hops=1)
    assert answer.status == "no_llm" and answer.answer is None
    assert "not reachable" in answer.message and "ollama serve" in answer.message
    assert [c["source"] for c in answer.citations] == ["h-1", "h-2"]


def test_server_failing_mid_loop_falls_back_with_the_steps_so_far(setup):
    kb, agent, fake = setup

    def then_fail(body: dict) -> str:
        fake.mode = "error"
        return "Thought: need the company.\nRetrieve: Which hotel company is it?"

    fake.script(then_fail)
    answer = agent.run(QUESTION, k=2, hops=2)
    assert answer.status == "no_llm" and answer.answer is None
    assert "failed after 2 step(s)" in answer.message
    assert answer.steps[0]["action"] == "retrieve" and answer.citations


def test_no_llm_configured():
    kb = StubKB(Config())
    answer = RetrieveAndAnswer(kb, None, MODEL).run(QUESTION, k=2, hops=1)
    assert answer.status == "no_llm" and "enabled = false" in answer.message
    assert len(answer.steps) == 1 and answer.steps[0]["query"] == QUESTION


@pytest.mark.parametrize(("reply", "expected"), [
    ("Thought: x\nAnswer: Delhi", ("answer", "Delhi")),
    ("Thought: x\n**Answer:** Delhi", ("answer", "Delhi")),
    ("Thought: x\nRetrieve: who founded it?\n", ("retrieve", "who founded it?")),
    ("Retrieve: a\nAnswer: b", ("answer", "b")),
    ("Thought: x\nAnswer:", None),
    ("Delhi", None),
])
def test_parse_reply(reply: str, expected):
    assert parse_reply(reply) == expected


def test_unanswerable():
    assert unanswerable("Not mentioned") and unanswerable("not mentioned.")
    assert unanswerable("Cannot be determined")
    assert not unanswerable("Delhi") and not unanswerable("None of the above films")


def test_salient_phrases_skip_title_and_query_terms():
    text = ("Johnnycake, West Virginia\nJohnnycake is an unincorporated community in McDowell "
            "County, West Virginia, United States. It was named by The Post Office.")
    phrases = salient_phrases("Which county borders Johnnycake?", text)
    assert phrases[:2] == ["McDowell County", "United States"]
    assert "Johnnycake" not in phrases and "West Virginia" not in phrases
    assert expand("Which county?", "no capitals here") == "Which county?"


def test_max_score_prefers_best_rank_and_earlier_lists():
    a = [{"chunk_id": 1, "score": 0.5}, {"chunk_id": 2, "score": 0.4}]
    b = [{"chunk_id": 3, "score": 0.9}, {"chunk_id": 2, "score": 0.8}]
    fused = max_score([a, b], k=3)
    assert [r["chunk_id"] for r in fused] == [1, 3, 2]
    assert [r["rank"] for r in fused] == [1, 2, 3]

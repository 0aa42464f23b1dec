"""The retrieve-and-answer loop against the fake Ollama server, over a scripted stand-in KB."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from psirag_kb.answer import agent_prompts as prompts
from psirag_kb.answer.agent import RetrieveAndAnswer
from psirag_kb.config import Config
from psirag_kb.llm.client import OllamaLLM
from psirag_kb.llm.replies import ReplyError, parse_json, parse_reply, schema, unanswerable
from psirag_kb.search.multiround import (
    BUSY_BACKLOG,
    DENSE_EXPANSIONS,
    EXPANSION_TERMS,
    LATER_MODE,
    MAX_ROUNDS,
    MAX_TERMS,
    MULTI_HOP_MODE,
    ROUND_DEPTH,
    SINGLE_HOP_MODE,
    auto_rank,
    capitalised_spans,
    expand,
    max_score,
    multi_round,
    salient_phrases,
    sentence_start,
)
from psirag_kb.storage.records import Ranking

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
        self.stale: dict[str, Any] = {}
        self.sparse, self.titles = self, []

    def embed_query(self, text: str) -> np.ndarray:
        return np.ones(3, dtype=np.float32)

    def titled(self, names: list[str], text: str, k: int, within: Any = None) -> Any:
        """The title index (`mentions.py`): the stub's names title no passage."""
        self.titles.extend(names)
        return np.zeros(0, np.int64), np.zeros(0, np.float32)


    def query(self, text: str, mode: str | None = None, k: int | None = None) -> dict[str, Any]:
        # later rounds of the fallback rank by BM25 and by each expanded query's own vector
        assert mode in ("hybrid", LATER_MODE, "dense")
        self.queries.append(text)
        key = "oberoi family" if text == QUESTION else "company"
        results = [{"rank": i, "score": 1.0 / (60 + i), "source": source, "lines": None,
                    "text": body, "chunk_id": int(source[2:]), "path": "/corpus.jsonl"}
                   for i, (body, source) in enumerate(PASSAGES[key][:k], start=1)]
        return {"query": text, "mode": mode, "results": results}

    # what multi-round retrieval (the fallback without an LLM) asks of a knowledge base

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 3), dtype=np.float32)

    def scope_of(self, within: Any) -> Any:
        return within

    def rank(self, text: str, mode: str, k: int, within: Any = None,
             vector: Any = None, phrases: Any = None) -> Ranking:
        ids = [r["chunk_id"] for r in self.query(text, mode, k)["results"]]
        return Ranking(np.array(ids, dtype=np.int64), np.ones(len(ids), dtype=np.float32))

    @property
    def store(self) -> Any:
        rows = {int(source[2:]): SimpleNamespace(
            source=source, text=body, line_first=None, line_last=None, path="/corpus.jsonl",
            location=None, unavailable=None)
            for passages in PASSAGES.values() for body, source in passages}
        return SimpleNamespace(hits=lambda ids: {i: rows[i] for i in ids if i in rows},
                               texts=lambda ids: {i: (rows[i].text, "") for i in ids
                                                  if i in rows})


@pytest.fixture
def structured(fake_ollama):
    """The agent asking for JSON replies (the default)."""
    config = Config().replace("llm", enabled=True, host=fake_ollama.url, timeout_s=10.0)
    kb = StubKB(config)
    return kb, RetrieveAndAnswer(kb, OllamaLLM(config.llm), MODEL, grounding=False), fake_ollama


@pytest.fixture
def setup(fake_ollama):
    """The agent forced to the text protocol ([llm] structured = false)."""
    config = Config().replace("llm", enabled=True, host=fake_ollama.url, timeout_s=10.0,
                              structured=False)
    kb = StubKB(config)
    agent = RetrieveAndAnswer(kb, OllamaLLM(config.llm), MODEL, structured=False,
                              grounding=False)
    yield kb, agent, fake_ollama
    assert all(chat.format is None for chat in fake_ollama.chats)


def last_user(request) -> str:
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"][-1]


def reply(action: str, text: str = "", cited: tuple[int, ...] = ()) -> dict:
    return {"action": action, "text": text, "cited": list(cited)}


# -- structured replies (JSON constrained by a schema) -------------------------------------------

def test_structured_answer_with_citations(structured):
    kb, agent, fake = structured
    fake.script(reply("answer", "Delhi", (2,)))
    steps: list[dict] = []
    answer = agent.run(QUESTION, k=2, hops=2, on_step=steps.append)
    assert (answer.status, answer.answer) == ("answered", "Delhi")
    assert [(c["source"], c["number"]) for c in answer.citations] == [("h-2", 2)]
    assert [r["source"] for r in answer.results] == ["h-2"]
    (chat,) = fake.chats
    assert chat.format == schema(2, may_retrieve=True) and fake.violations == []
    assert chat.format["properties"]["action"]["enum"] == ["answer", "retrieve", "not_mentioned"]
    assert chat.format["properties"]["cited"]["items"]["enum"] == [1, 2]
    assert chat.options["temperature"] == 0 and chat.options["num_ctx"] == 8192
    system = chat.body["messages"][0]["content"]
    assert "one JSON object" in system and '"action": "answer", "text": "Delhi"' in system
    assert "Retrieval attempts remaining: 1" in last_user(chat)
    assert steps == [{**answer.steps[0]}] and steps[0]["action"] == "answer"
    assert steps[0]["protocol"] == "json" and "unparseable" not in steps[0]


def test_structured_not_mentioned(structured):
    _, agent, fake = structured
    fake.script(reply("not_mentioned"))
    answer = agent.run(QUESTION, k=2, hops=1)
    assert (answer.status, answer.answer, answer.citations) == ("not_mentioned",
                                                               "Not mentioned", [])
    assert fake.chats[0].format["properties"]["action"]["enum"] == ["answer", "not_mentioned"]
    assert prompts.MUST_ANSWER_JSON in last_user(fake.chats[0])
    assert answer.steps[0]["action"] == "not_mentioned" and fake.violations == []


def test_structured_answer_saying_not_mentioned_is_not_mentioned(structured):
    _, agent, fake = structured
    fake.script(reply("answer", "Not mentioned.", (1,)))
    assert agent.run(QUESTION, k=2, hops=2).status == "not_mentioned"


def test_structured_retrieve_then_answer(structured):
    kb, agent, fake = structured
    fake.script(reply("retrieve", "Which hotel company is it?"), reply("answer", "Delhi", (3,)))
    answer = agent.run(QUESTION, k=2, hops=2)
    assert (answer.status, answer.answer) == ("answered", "Delhi")
    assert kb.queries == [QUESTION, "Which hotel company is it?"]
    first, second = fake.chats
    assert first.format["properties"]["cited"]["items"]["enum"] == [1, 2]
    assert second.format == schema(3, may_retrieve=False)  # the cap, enforced by the server
    messages = second.body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert json.loads(messages[2]["content"])["action"] == "retrieve"
    assert "[3] (h-3) The Oberoi Group" in messages[3]["content"]
    assert prompts.MUST_ANSWER_JSON in messages[3]["content"]
    assert [c["source"] for c in answer.citations] == ["h-3"]
    assert [s["action"] for s in answer.steps] == ["retrieve", "answer"]
    assert fake.violations == []


def test_structured_answer_without_citations_still_answers(structured):
    _, agent, fake = structured
    fake.script(reply("answer", "Delhi"))
    answer = agent.run(QUESTION, k=2, hops=2)
    assert (answer.status, answer.answer) == ("answered", "Delhi")
    assert [c["source"] for c in answer.citations] == ["h-1", "h-2"]  # every passage given


def test_citations_out_of_range_are_dropped(structured):
    _, agent, fake = structured
    fake.script({"action": "answer", "text": "Delhi", "cited": [7, 0, 2, "1", 2, True]},
                format_check="pass")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert answer.status == "answered"
    assert [c["number"] for c in answer.citations] == [2, 1]
    assert len(fake.violations) == 1 and "cited[0]" in fake.violations[0]


def test_invalid_json_is_retried_with_a_reminder(structured):
    _, agent, fake = structured
    fake.script('{"action": "answer", "text": "Del', reply("answer", "Delhi", (1,)),
                format_check="pass")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert (answer.status, answer.answer) == ("answered", "Delhi")
    first, second = fake.chats
    assert first.format and second.format  # still structured: the server honours format
    assert "could not be used (the reply is not valid JSON" in last_user(second)
    assert answer.steps[0]["unparseable"] == ['{"action": "answer", "text": "Del']
    assert agent.llm.structured(MODEL)


@pytest.mark.parametrize("bad", [
    '{"action": "answer", "text": "Del',
    '{"action": "guess", "text": "Delhi", "cited": []}',
    '{"action": "retrieve", "text": "", "cited": []}',
    '{"answer": "Delhi"}',
])
def test_unusable_json_twice_is_an_error_not_a_crash(structured, bad: str):
    _, agent, fake = structured
    fake.script(fn=lambda body: bad, format_check="pass")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert answer.status == "error" and answer.answer is None and answer.citations == []
    assert len(fake.chats) == 2 and all(chat.format for chat in fake.chats)
    assert answer.steps[-1]["reply"] == bad and answer.steps[-1]["problem"]
    assert "could not be used, twice" in answer.message and answer.results


def test_server_refusing_format_gets_the_text_protocol(structured):
    kb, agent, fake = structured
    fake.script("Thought: nothing on the Oberoi family.\nRetrieve: Which hotel company is it?",
                "Thought: The Oberoi Group [3].\nAnswer: Delhi", structured=False)
    answer = agent.run(QUESTION, k=2, hops=2)
    assert (answer.status, answer.answer) == ("answered", "Delhi")
    assert [bool(chat.format) for chat in fake.chats] == [True, False, False]
    assert "Answer: <answer>" in fake.chats[1].body["messages"][0]["content"]
    assert [c["source"] for c in answer.citations] == ["h-3"]
    assert [s["protocol"] for s in answer.steps] == ["text", "text"]
    assert not agent.llm.structured(MODEL)  # remembered: no more structured requests
    fake.script("Thought: [1].\nAnswer: Delhi")
    assert agent.run(QUESTION, k=2, hops=1).status == "answered"
    assert not fake.chats[-1].format and len(fake.chats) == 4


def test_server_ignoring_format_gets_the_text_protocol(structured):
    _, agent, fake = structured
    fake.script("The answer is: Delhi", "Thought: [2] says so.\nAnswer: Delhi",
                format_check="pass")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert (answer.status, answer.answer) == ("answered", "Delhi")
    assert [bool(chat.format) for chat in fake.chats] == [True, False]
    assert not agent.llm.structured(MODEL)


def test_fallback_mid_conversation_rewrites_earlier_replies(structured):
    kb, agent, fake = structured

    def then_refuse(body: dict) -> dict:
        fake.structured = False  # as if the server were swapped for an older one
        return reply("retrieve", "Which hotel company is it?")

    fake.script(then_refuse, "Thought: The Oberoi Group [3].\nAnswer: Delhi")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert answer.status == "answered" and kb.queries[-1] == "Which hotel company is it?"
    last = fake.chats[-1].body["messages"]
    assert last[2] == {"role": "assistant", "content": "Retrieve: Which hotel company is it?"}


def test_text_protocol_answers_at_once_with_cited_passages(setup):
    kb, agent, fake = setup
    fake.script("Thought: The group is in Delhi [2].\nAnswer: Delhi")
    steps: list[dict] = []
    answer = agent.run(QUESTION, k=2, hops=2, on_step=steps.append)
    assert (answer.status, answer.answer) == ("answered", "Delhi")
    assert [c["source"] for c in answer.citations] == ["h-2"]
    assert answer.citations[0]["number"] == 2 and answer.citations[0]["lines"] is None
    assert kb.queries == [QUESTION]
    assert len(fake.chats) == 1 and fake.chats[0].options["temperature"] == 0
    assert fake.chats[0].format is None
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


@pytest.mark.parametrize(("text", "expected"), [
    ('{"action": "answer", "text": " Delhi ", "cited": [1, 9]}', ("answer", "Delhi", [1])),
    ('```json\n{"action": "retrieve", "text": "who?", "cited": []}\n```', ("retrieve", "who?", [])),
    ('{"action": "Not Mentioned", "text": "x", "cited": [1]}', ("not_mentioned", "", [])),
    ('{"action": "answer", "text": "", "cited": [1]}', ("not_mentioned", "", [])),
    ('{"action": "answer", "text": "Delhi"}', ("answer", "Delhi", [])),
    ('{"action": "answer", "text": "Delhi", "cited": "2"}', ("answer", "Delhi", [])),
])
def test_parse_json(text: str, expected):
    decision = parse_json(text, 2)
    assert (decision.action, decision.text, decision.cited) == expected


@pytest.mark.parametrize("text", ["Delhi", "{oops", "[1]", '{"action": 3}', "{}"])
def test_parse_json_refuses(text: str):
    with pytest.raises(ReplyError):
        parse_json(text, 2)


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


MEMORY = ("the desire to *inform* the Python memory manager about the memory needs of the\n"
          "extension module. Even when the requested memory is used exclusively for\n"
          "internal, highly specific purposes, delegating all memory requests to the Python\n"
          "memory manager causes the interpreter to have a more accurate image of its\n"
          "memory footprint as a whole. Consequently, under certain circumstances, the\n"
          "Python memory manager may or may not trigger appropriate actions. Note that by using\n"
          "the C library allocator, written in C. Another reason is PYTHONMALLOC.")
"""A passage of examples/docs/python/c-api-memory-management.rst (the issue's example)."""


def test_salient_phrases_skip_sentence_starts_and_discourse_words():
    phrases = salient_phrases("How does Python manage memory for objects?", MEMORY, limit=10)
    assert phrases == ["PYTHONMALLOC"]
    assert "Python" in capitalised_spans(MEMORY)  # capitalised mid-sentence too: a name


def test_sentence_initial_words_are_names_unless_also_written_in_lower_case():
    text = ("Gallu is a demon. It met Lilu near Uruk. Lilu is a spirit. Kings ruled Uruk, "
            "and the kings feared demons. Demons fled.")
    # "Kings" and "Demons" are also written in lower case: sentence starts, not names
    assert capitalised_spans(text) == ["Gallu", "Lilu", "Uruk", "Lilu", "Uruk"]
    assert sentence_start(text, 0) and sentence_start(text, text.index("Lilu is"))
    assert not sentence_start(text, text.index("Lilu near"))
    assert capitalised_spans("- Notes on notes\n1. Items and more items") == []


def test_salient_phrases_leave_out_the_header_titles():
    text = "Reference counts are kept per object, and CPython frees cycles with a collector."
    header = "Memory Management > Reference Counting"
    assert salient_phrases("How is memory freed?", text, header=header) == ["CPython"]
    assert salient_phrases("How is memory freed?", "See Reference Counting, then CPython.",
                           header=header) == ["CPython"]


def test_an_expanded_query_takes_every_name_of_its_passage():
    text = "Ada met Babbage, Carroll, Dickens, Eliot and Faraday at the Royal Institution."
    names = ["Babbage", "Carroll", "Dickens", "Eliot and Faraday", "Royal Institution"]
    assert salient_phrases("Who met Ada?", text) == names[:MAX_TERMS]
    assert salient_phrases("Who met Ada?", text, None) == names
    assert EXPANSION_TERMS is None
    assert expand("Who met Ada?", text, EXPANSION_TERMS) == "Who met Ada? " + " ".join(names)


def test_max_score_prefers_best_rank_and_earlier_lists():
    fused = max_score([np.array([1, 2]), np.array([3, 2])], k=3)
    assert fused.ids.tolist() == [1, 3, 2]
    assert fused.scores[0] == fused.scores[1] > fused.scores[2]


class ChainKB:
    """Every query finds passages no earlier query found, each naming a new place: a chain
    that multi-round retrieval could follow for as many rounds as it is given."""

    dim = 3

    def __init__(self) -> None:
        self.ranked: list[str] = []
        self.modes: list[str] = []
        self.embedded: list[str] = []
        self.calls = 0
        self.stale: dict[str, Any] = {}
        self.sparse, self.titles = self, []

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def titled(self, names: list[str], text: str, k: int, within: Any = None) -> Any:
        """The title index (`mentions.py`): the stub's names title no passage."""
        self.titles.extend(names)
        return np.zeros(0, np.int64), np.zeros(0, np.float32)


    def embed_queries(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.embedded.extend(texts)
        return np.ones((len(texts), 3), dtype=np.float32)

    def scope_of(self, within: Any) -> Any:
        return within

    def rank(self, text: str, mode: str, k: int, within: Any = None,
             vector: Any = None, phrases: Any = None) -> Ranking:
        start = 1 + 10 * len(self.ranked)
        self.ranked.append(text)
        self.modes.append(mode)
        return Ranking(np.arange(start, start + k, dtype=np.int64), np.ones(k, np.float32))

    @property
    def store(self) -> Any:
        def row(i: int) -> Any:
            return SimpleNamespace(source=f"p-{i}", text=f"It lies near Place{i} Town.",
                                   line_first=None, line_last=None, path="/c.jsonl",
                                   location=None, unavailable=None)
        return SimpleNamespace(hits=lambda ids: {i: row(i) for i in ids},
                               texts=lambda ids: {i: (row(i).text, "") for i in ids})


def test_multi_round_stops_at_max_rounds_whatever_the_hop_count():
    kb = ChainKB()
    result = multi_round(kb, "Where is the town?", 5, rounds=4)
    assert MAX_ROUNDS == 2
    assert max(step["round"] for step in result.steps) == MAX_ROUNDS
    assert result.hops == 4  # the hop count is reported as predicted
    # round 2 ranks its FANOUT expanded queries by BM25, the first DENSE_EXPANSIONS also by
    # their own vectors, sent through the model in one batched call after the question's
    expansions = list(dict.fromkeys(kb.ranked[1:]))
    assert len(expansions) == 3 and 1 <= DENSE_EXPANSIONS <= 3
    assert kb.embedded == ["Where is the town?", *expansions[:DENSE_EXPANSIONS]]
    assert kb.calls == 2 and len(kb.ranked) == 1 + 3 + DENSE_EXPANSIONS
    assert kb.modes == ["hybrid"] + ([LATER_MODE, "dense"] * DENSE_EXPANSIONS
                                     + [LATER_MODE] * (3 - DENSE_EXPANSIONS))
    # a step per expanded query, holding what all of its lists found
    later = [step for step in result.steps if step["round"] == 2]
    assert [len(step["passages"]) for step in later] == (
        [2 * ROUND_DEPTH] * DENSE_EXPANSIONS + [ROUND_DEPTH] * (3 - DENSE_EXPANSIONS))
    assert kb.titles == ["Place1 Town"]  # round 1's first passage's names, looked up
    assert multi_round(ChainKB(), "Where is the town?", 5, rounds=1).steps[-1]["round"] == 1


@pytest.mark.parametrize(("hops", "mode"), [(1, SINGLE_HOP_MODE), (3, MULTI_HOP_MODE)])
def test_auto_follows_the_names_of_one_hop_questions_too(monkeypatch, hops: int, mode: str):
    monkeypatch.setattr("psirag_kb.search.multiround.predict_hops", lambda *a, **k: hops)
    kb = ChainKB()
    ranking = auto_rank(kb, "Where was the poet born?", 5)
    # round 1 in the mode of the hop count, then a round of the passages' names ("Place1
    # Town") by BM25; a multi-hop question's expanded queries also by their own vectors (one
    # batched model call), a one-hop question's by BM25 alone (the question its only text)
    embedded = DENSE_EXPANSIONS if mode == MULTI_HOP_MODE else 0
    assert kb.modes == [mode] + [LATER_MODE, "dense"] * embedded + [LATER_MODE] * (3 - embedded)
    assert all("Place" in text for text in kb.ranked[1:])
    assert kb.calls == 1 + (embedded > 0) and len(kb.embedded) == 1 + embedded
    assert len(ranking.ids) == 5


@pytest.mark.parametrize(("backlog", "embedded"), [(0, DENSE_EXPANSIONS),
                                                    (BUSY_BACKLOG, 0), (BUSY_BACKLOG + 5, 0)])
def test_a_busy_model_leaves_the_later_round_to_bm25(monkeypatch, backlog: int, embedded: int):
    monkeypatch.setattr("psirag_kb.search.multiround.predict_hops", lambda *a, **k: 2)
    kb = ChainKB()
    kb.model_backlog = lambda: backlog  # type: ignore[attr-defined]
    ranking = auto_rank(kb, "Where was the poet born?", 5)
    # other questions queued for the model: the expansion is not embedded, its BM25 list stays
    assert kb.embedded == ["Where was the poet born?", *kb.ranked[1:1 + embedded]]
    assert kb.modes == ([MULTI_HOP_MODE] + [LATER_MODE, "dense"] * embedded
                        + [LATER_MODE] * (3 - embedded))
    assert len(ranking.ids) == 5


# -- grounded answers and retrievals --------------------------------------------------------------

@pytest.fixture
def grounded(fake_ollama):
    """The agent with the default grounding checks, in either protocol."""
    def make(structured: bool = True):
        config = Config().replace("llm", enabled=True, host=fake_ollama.url, timeout_s=10.0,
                                  structured=structured)
        kb = StubKB(config)
        return kb, RetrieveAndAnswer(kb, OllamaLLM(config.llm), MODEL, structured=structured)
    return make


@pytest.mark.parametrize("said", [
    QUESTION,  # the question itself, as SmolLM2 answered "How does Python manage memory ..."
    "The Oberoi family is part of a hotel company with a head office in a city",
    "The Enola Gay (Mohan Singh Oberoi)",  # the one-shot example leaking into the answer
])
def test_an_answer_restating_the_question_or_the_example_is_not_answered(grounded, fake_ollama,
                                                                         said: str):
    kb, agent = grounded()
    fake_ollama.script(reply("answer", said, (1,)))
    answer = agent.run(QUESTION, k=2, hops=1)
    assert (answer.status, answer.answer) == ("not_mentioned", "Not mentioned")
    assert "refused" in answer.message and answer.steps[-1]["refused_answer"] == said
    assert [r["source"] for r in answer.results] == ["h-1", "h-2"]  # the passages, shown


def test_a_supported_answer_stays_answered(grounded, fake_ollama):
    kb, agent = grounded()
    fake_ollama.script(reply("retrieve", "The Oberoi Group head office", ()),
                       reply("answer", "Delhi", (3,)))
    answer = agent.run(QUESTION, k=2, hops=2)
    assert (answer.status, answer.answer) == ("answered", "Delhi")


@pytest.mark.parametrize("structured", [True, False])
def test_retrieving_the_question_itself_is_refused_and_asked_again_once(grounded, fake_ollama,
                                                                        structured: bool):
    kb, agent = grounded(structured)
    echo = QUESTION.rstrip("?")
    if structured:
        fake_ollama.script(reply("retrieve", echo), reply("retrieve", "The Oberoi Group office"),
                           reply("answer", "Delhi", (3,)))
    else:
        fake_ollama.script(f"Thought: x\nRetrieve: {echo}",
                           "Thought: y\nRetrieve: The Oberoi Group office",
                           "Thought: z [3]\nThe answer is: Delhi")
    answer = agent.run(QUESTION, k=2, hops=2)
    assert (answer.status, answer.answer) == ("answered", "Delhi")
    assert kb.queries == [QUESTION, "The Oberoi Group office"]  # the echo was never run
    assert answer.steps[0]["echo"] == echo
    assert "the question itself" in last_user(fake_ollama.chats[1])


def test_retrieving_the_question_twice_ends_not_mentioned(grounded, fake_ollama):
    kb, agent = grounded()
    fake_ollama.script(reply("retrieve", QUESTION), reply("retrieve", QUESTION))
    answer = agent.run(QUESTION, k=2, hops=3)
    assert answer.status == "not_mentioned" and kb.queries == [QUESTION]
    assert len(fake_ollama.chats) == 2 and answer.results


@pytest.mark.parametrize("text", [
    "Thought: x\nThe answer is: Delhi", "Thought: x\nAnswer - Delhi", "The answer is Delhi.",
    "Thought: x\n**Final answer**: Delhi", "Thought: x\nFinal Answer: Delhi",
])
def test_the_text_protocol_accepts_common_answer_forms(text: str):
    assert parse_reply(text) == ("answer", "Delhi")

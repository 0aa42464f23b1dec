"""Follow-up resolution: which questions lean on the history, the offline rewrite,
the LLM's rewrite checked against the conversation's words, and the history forms clients send.
"""

from __future__ import annotations

import json

import pytest

from psirag_kb.answer.rewriting import llm_rewriter, parsed, prompt
from psirag_kb.config import LLMConfig
from psirag_kb.search.followup import (
    AS_IS,
    LLM,
    OFFLINE,
    Turn,
    grounded,
    history_turns,
    leans,
    names,
    offline,
    resolve,
)

HELGRIND = [Turn("What is Helgrind?", headers=("Valgrind > Helgrind: a thread error detector",))]


@pytest.mark.parametrize("question", [
    "What are its command-line options?", "And data races?", "What about DHAT?",
    "How do I register one?", "Can they be nested?", "Why?", "How fast is it?",
    "Is that safe?", "options?",
])
def test_questions_that_lean_on_the_history(question: str) -> None:
    assert leans(question)


@pytest.mark.parametrize("question", [
    "How does Cachegrind simulate the branch predictor?",
    "What are Werkzeug's built-in URL converters?",
    "How do I write a Memcheck suppression file?",
    "Which options control the commands that Helgrind reports?",  # 'that' before a verb
])
def test_standalone_questions_are_searched_as_they_are(question: str) -> None:
    assert not leans(question)
    assert resolve(HELGRIND, question).method == AS_IS
    assert resolve(HELGRIND, question).query == question


def test_the_issue_example_is_searched_with_the_subject_of_the_last_turn() -> None:
    rewrite = resolve(HELGRIND, "What are its command-line options?")
    assert rewrite.method == OFFLINE
    assert rewrite.query == "Helgrind command-line options"


def test_what_about_swaps_the_names_and_keeps_the_rest() -> None:
    turns = [Turn("Which errors does DRD detect?", searched="")]
    assert offline(turns, "What about Helgrind?") == "errors Helgrind detect"
    versions = [Turn("What changed in Git 2.30?")]
    assert offline(versions, "And in 2.8.0?") == "changed Git 2.8.0"  # a number for a number


def test_the_subject_is_the_last_searched_query_so_a_chain_keeps_it() -> None:
    turns = [Turn("What is Massif?"), Turn("How do I read its output graph?",
                                           searched="Massif read output graph")]
    assert offline(turns, "Can it measure all memory?") == (
        "Massif read output graph measure memory")


def test_the_subject_keeps_the_last_question_s_own_words() -> None:
    turns = [Turn("What is a Flask blueprint?")]
    assert offline(turns, "Can they be nested?") == "Flask blueprint nested"
    turns = [Turn("What are the Callgrind command-line options?")]
    assert offline(turns, "What about Cachegrind?") == "Cachegrind command-line options"
    chain = [Turn("What is Massif?"), Turn("Which monitor commands does it have?",
                                           searched="Massif monitor commands")]
    assert offline(chain, "What about DHAT?") == "DHAT monitor commands"  # names swapped only


def test_without_history_nothing_is_rewritten() -> None:
    assert resolve([], "What are its options?").method == AS_IS


def test_names_skip_the_first_word_of_a_sentence() -> None:
    assert names("What is Helgrind? Which option sets --free-is-write and v2.6.3") == [
        "Helgrind", "--free-is-write", "v2.6.3"]
    assert names("Which are the Callgrind command-line options?") == ["Callgrind"]


def test_an_llm_rewrite_is_used_only_when_every_word_is_from_the_conversation() -> None:
    question = "What are its command-line options?"
    good = resolve(HELGRIND, question, lambda h, q: "Helgrind command-line options")
    assert good == good.__class__("Helgrind command-line options", LLM)
    invented = resolve(HELGRIND, question, lambda h, q: "Helgrind valgrind flags list")
    assert invented.method == OFFLINE  # "flags" is nowhere in the conversation
    assert invented.query == "Helgrind command-line options"
    assert resolve(HELGRIND, question, lambda h, q: None).method == OFFLINE
    assert grounded("thread error detector options", HELGRIND, question)  # from the header


def test_history_as_messages_and_as_turns() -> None:
    turns = history_turns([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "What is Helgrind?"},
        {"role": "assistant", "content": [{"type": "text", "text": "A thread error detector."}]},
        {"question": "What are its options?", "searched": "Helgrind options"},
    ])
    assert [t.question for t in turns] == ["What is Helgrind?", "What are its options?"]
    assert turns[0].answer == "A thread error detector."
    assert turns[1].query == "Helgrind options"
    for bad in (["text"], [{"role": "robot", "content": "x"}], [{"searched": "x"}]):
        with pytest.raises(ValueError):
            history_turns(bad)


def test_llm_rewriter_asks_for_a_schema_and_its_rewrite_is_checked(fake_ollama) -> None:
    config = LLMConfig(enabled=True, host=fake_ollama.url)
    fake_ollama.script({"query": "Helgrind command-line options"},
                       {"query": "Helgrind flags"})
    rewriter = llm_rewriter(config)
    assert rewriter is not None
    question = "What are its command-line options?"
    assert resolve(HELGRIND, question, rewriter) == resolve(
        HELGRIND, question, lambda h, q: "Helgrind command-line options")
    (request,) = fake_ollama.chats
    assert request.format["required"] == ["query"]
    assert "What is Helgrind?" in request.text and question in request.text
    second = resolve(HELGRIND, question, rewriter)  # "flags": not in the conversation
    assert second.method == OFFLINE
    fake_ollama.script(mode="error")
    assert resolve(HELGRIND, question, rewriter).method == OFFLINE  # a failed LLM: offline
    assert llm_rewriter(LLMConfig(enabled=False)) is None


def test_replies_in_either_protocol() -> None:
    assert parsed('{"query": " Helgrind   options "}') == "Helgrind options"
    assert parsed("Sure.\nQuery: Helgrind options") == "Helgrind options"
    assert parsed("I think you mean Helgrind") is None
    assert parsed('{"answer": "x"}') is None
    plain = prompt(HELGRIND, "and its options?", structured=False)
    assert "Query:" in plain[0]["content"] and "JSON" not in plain[0]["content"]


@pytest.mark.integration  # a KnowledgeBase
def test_the_facade_asks_the_configured_llm_and_says_so(fake_ollama, fake_embedder,
                                                         tmp_path) -> None:
    from psirag_kb.config import Config
    from psirag_kb.kb import KnowledgeBase

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hg.md").write_text("# Helgrind\n\nHelgrind command-line options: --free-is-write.\n")
    config = Config().with_data_dir(tmp_path / "data").replace(
        "llm", enabled=True, host=fake_ollama.url)
    fake_ollama.script({"query": "Helgrind command-line options"})
    history = [{"role": "user", "content": "What is Helgrind?"}]
    with KnowledgeBase(config, fake_embedder) as kb:
        kb.ingest([docs])
        asked = kb.ask("What are its command-line options?", history=history, mode="sparse")
        assert (asked["searched"], asked["rewrite"]) == ("Helgrind command-line options", LLM)
        assert asked["results"] and asked["conversation"] is None
        fake_ollama.script({"query": "Helgrind switches"})  # a word from nowhere: refused
        asked = kb.ask("What are its command-line options?", history=history, mode="sparse")
        assert asked["rewrite"] == OFFLINE
        standalone = kb.ask("Helgrind free-is-write", history=history, mode="sparse")
        assert standalone["rewrite"] == AS_IS
    assert len(fake_ollama.chats) == 2  # a standalone question never asks the LLM


@pytest.mark.integration  # a KnowledgeBase
def test_an_agent_turn_keeps_its_answer_and_citation_numbers(fake_ollama, fake_embedder,
                                                             tmp_path) -> None:
    from psirag_kb.config import Config
    from psirag_kb.kb import KnowledgeBase

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "hg.md").write_text("# Helgrind\n\nHelgrind detects data races in threaded "
                                "programs.\n")
    config = Config().with_data_dir(tmp_path / "data").replace(
        "llm", enabled=True, host=fake_ollama.url, grounding=False)
    fake_ollama.script(fn=lambda body: json.dumps(
        {"query": "Helgrind"} if "standalone search query" in str(body["messages"])
        else {"action": "answer", "text": "It detects data races [1].", "cited": [1]}))
    with KnowledgeBase(config, fake_embedder) as kb:
        kb.ingest([docs])
        talk = kb.new_conversation()["id"]
        answered = kb.ask("What does Helgrind detect?", conversation=talk, mode="agent", k=2)
        assert answered["status"] == "answered" and answered["turn"] == 1
        (turn,) = kb.conversation(talk)["turns"]
    assert turn["turn"] == 1 and turn["mode"] == "agent"
    assert turn["answer"] == "It detects data races [1]."
    assert [p["number"] for p in turn["passages"]] == [1]
    assert turn["passages"][0]["chunk_id"] == answered["citations"][0]["chunk_id"]

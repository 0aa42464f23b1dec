"""Offline keyword abstracts, reply cleaning and LLM abstracts against the fake Ollama server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from psirag_kb.abstracts.job import Progress
from psirag_kb.abstracts.writers import (
    _EXAMPLE_KEYWORDS,
    _EXAMPLE_SUMMARY,
    KeywordAbstractor,
    LLMAbstractor,
    candidate_phrases,
    clean_keywords,
    clean_summary,
    copies_example,
    estimate_tokens,
    looks_like_junk,
    messages_tokens,
)
from psirag_kb.config import LLMConfig
from psirag_kb.errors import ConfigError, LLMError
from psirag_kb.llm.client import OllamaLLM
from psirag_kb.text import STOP_WORDS

CORPUS = Path(__file__).parents[1] / "fixtures" / "hotpotqa_small" / "corpus.jsonl"
BEER = [11, 13, 14]
FILMS = [31, 42, 57, 115, 116]


@pytest.fixture(scope="module")
def passages() -> list[str]:
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    return [f"{r['title']}\n{r['text']}" for r in rows]


def phrases(abstract: str) -> list[str]:
    return abstract.split(", ") if abstract else []


def in_some(phrase: str, texts: list[str]) -> bool:
    return any(phrase.lower() in t.lower() for t in texts)


# -- candidates -----------------------------------------------------------------------------------

def test_candidates_are_substrings_without_stop_word_edges_or_pure_numbers() -> None:
    text = "The Hotel Bond, built in 1913 and 1921, is a historic hotel in Hartford, Connecticut."
    found = candidate_phrases(text)
    assert "Hotel Bond" in found and "historic hotel" in found and "Hartford" in found
    for phrase in found:
        assert phrase in text
        words = phrase.lower().split()
        assert words[0] not in STOP_WORDS and words[-1] not in STOP_WORDS
        assert not all(w.isdigit() for w in words)
        assert 1 <= len(words) <= 3
    assert "Hartford Connecticut" not in found  # never across punctuation


def test_candidates_keep_of_inside_a_phrase() -> None:
    assert "Bank of America" in candidate_phrases("He joined Bank of America in 1990.")


@pytest.mark.parametrize(("text", "whole"), [
    ("The United Kingdom of Great Britain and Northern Ireland signed it.",
     ["United Kingdom of Great Britain", "Northern Ireland"]),
    ("Queen Beatrix of the Netherlands opened the Rijksmuseum.",
     ["Queen Beatrix of the Netherlands"]),
    ("He studied at the University of California in Berkeley.", ["University of California"]),
])
def test_names_are_whole_phrases(text: str, whole: list[str]) -> None:
    found = candidate_phrases(text)
    for name in whole:
        assert name in found
        words = name.split()
        for size in range(1, len(words)):  # no cut of a name: "Kingdom of Great", "Great Britain"
            for start in range(len(words) - size + 1):
                part = " ".join(words[start:start + size])
                assert part not in found or any(part in other and other != name
                                                for other in found if other not in whole)


@pytest.mark.parametrize("text", [
    "Compare the easy way of the method. Set the garbage collector of the process.",
    "Python and wants more of the things the user of the system asks for.",
    "A Kingdom of the sea, the Republic of the people, lots of the words.",
])
def test_no_phrase_ends_or_starts_on_a_joining_word(text: str) -> None:
    for phrase in candidate_phrases(text):
        words = phrase.lower().split()
        assert words[0] not in STOP_WORDS and words[-1] not in STOP_WORDS, phrase
        assert not {"of", "the", "and", "for"} & {words[0], words[-1]}, phrase
        # a joining word sits only between capitalised words of a name
        for i, word in enumerate(phrase.split()[1:-1], start=1):
            if word in ("of", "the"):
                assert phrase.split()[i - 1][0].isupper() or phrase.split()[i - 1] in ("of", "the")
                assert phrase.split()[i + 1][0].isupper() or phrase.split()[i + 1] in ("of", "the")


def test_shouted_legal_text_and_code_lines_give_no_phrases() -> None:
    text = ("IN NO EVENT SHALL THE AUTHORS BE LIABLE FOR ANY CLAIM\n"
            "    return self.data.get(key)\n"
            "x = foo(bar) + baz[1]; y = {}\n"
            ">>> import gc\n"
            "The NASA report on HTTP API design (published in 1998) was read.")
    found = candidate_phrases(text)
    assert "NASA" in found and "HTTP API design" in found and "report" in found
    for phrase in found:
        assert phrase in text.splitlines()[-1], phrase


def test_a_passage_shaped_like_a_list_is_read_as_text(fake_embedder) -> None:
    passage = "Copyright (c) 1996-2008 Red Hat, Inc, all rights reserved"
    from psirag_kb.abstracts.writers import child_phrases

    assert "Copyright (c) 1996-2008 Red Hat" in child_phrases(passage)  # guessed: a keyword list
    as_text = child_phrases(passage, abstract=False)
    assert "Red Hat" in as_text and not any("(" in phrase for phrase in as_text)


def test_lexical_abstracts_embed_nothing_and_cover_every_child(fake_embedder) -> None:
    class Refusing:
        name, dim = fake_embedder.name, fake_embedder.dim

        def embed(self, texts: list[str]) -> np.ndarray:
            raise AssertionError("a lexical abstract embeds no phrase")

    abstractor = KeywordAbstractor(Refusing(), max_keywords=4)
    group = ["Volcanic eruptions in Iceland grounded flights over Europe.",
             "Volcanic ash clouds and aviation safety rules.",
             "Medieval monasteries of Ireland kept illuminated manuscripts."]
    [abstract] = abstractor.abstract_many([group], abstracts=False, lexical=True)
    found = phrases(abstract)
    assert 1 <= len(found) <= 4
    for number, child in enumerate(group):  # each child gives at least one phrase
        assert any(p in child for p in found), (number, found)
    assert abstract == abstractor.abstract_many([group], abstracts=False, lexical=True)[0]


# -- offline extractor on real text ---------------------------------------------------------------

def test_real_groups_phrases_from_text_distinct_capped_and_deterministic(
    minilm, passages: list[str]
) -> None:
    groups = [passages[i:i + n] for i, n in ((0, 5), (20, 8), (40, 10), (60, 6))]
    first = KeywordAbstractor(minilm).abstract_many(groups)
    again = KeywordAbstractor(minilm).abstract_many(groups)
    assert first == again
    for group, abstract in zip(groups, first, strict=True):
        found = phrases(abstract)
        assert 5 <= len(found) <= 20
        assert len({p.casefold() for p in found}) == len(found)
        for phrase in found:
            assert phrase.strip() == phrase and phrase
            assert in_some(phrase, group), phrase


def test_a_group_about_two_topics_gets_phrases_from_both(minilm, passages: list[str]) -> None:
    beer, films = [passages[i] for i in BEER], [passages[i] for i in FILMS]
    group = beer + films
    vectors = minilm.embed(group)
    for given_vectors in (None, [vectors]):
        found = phrases(KeywordAbstractor(minilm).abstract_many([group], given_vectors)[0])
        assert any(in_some(p, beer) for p in found), found
        assert any(in_some(p, films) for p in found), found


def test_upper_layer_reuses_the_childrens_keywords(minilm, passages: list[str]) -> None:
    abstractor = KeywordAbstractor(minilm, max_keywords=8)
    lower = abstractor.abstract_many([[passages[i] for i in BEER], [passages[i] for i in FILMS]])
    given = set(phrases(lower[0])) | set(phrases(lower[1]))
    fresh = given - set(abstractor._vectors)  # spares filled in without embedding
    upper = phrases(abstractor.abstract_many([lower])[0])
    assert set(abstractor._vectors) - given == set(abstractor._vectors) - given - fresh
    assert set(upper) <= given
    assert len(upper) == 8


def test_fake_embedder_edge_cases(fake_embedder) -> None:
    abstractor = KeywordAbstractor(fake_embedder, max_keywords=3)
    out = abstractor.abstract_many([["", "  ", "..."], ["apples and pears", "pears and plums"]])
    assert out[0] == ""
    assert 1 <= len(phrases(out[1])) <= 3
    with pytest.raises(ValueError):
        abstractor.abstract_many([["a b"]], [np.zeros((1, 64)), np.zeros((1, 64))])
    with pytest.raises(ConfigError):
        KeywordAbstractor(fake_embedder, diversity=2.0)


def test_phrase_vectors_are_embedded_once_in_one_call(fake_embedder) -> None:
    calls: list[int] = []
    seen: set[str] = set()

    class Counting:
        name, dim = fake_embedder.name, fake_embedder.dim

        def embed(self, texts: list[str]) -> np.ndarray:
            calls.append(len(texts))
            assert not seen & set(texts) and len(set(texts)) == len(texts)
            seen.update(texts)
            return fake_embedder.embed(texts)

        def count_tokens(self, text: str) -> int:
            return len(text.split())

    abstractor = KeywordAbstractor(Counting())
    groups = [["red apples grow on trees", "green pears grow slowly"]] * 3
    abstractor.abstract_many(groups)
    assert len(calls) == 1
    abstractor.abstract_many(groups)
    assert len(calls) <= 2  # one call at most, for phrases never embedded before


# -- cleaning -------------------------------------------------------------------------------------

@pytest.mark.parametrize("reply", [
    "Summary: Hotels in Iowa.",
    "  **Summary:** Hotels in Iowa.",
    '"Summary: Hotels in Iowa."',
    "Here is a summary of the documents:\nSummary: Hotels in Iowa.",
    "<think>hmm</think>\nSummary:   Hotels\n in Iowa.",
])
def test_clean_summary_strips_prefixes(reply: str) -> None:
    assert clean_summary(reply) == "Hotels in Iowa."


def test_clean_keywords() -> None:
    reply = ("Here are the key phrases: historic hotels,Hotel Bond, hotel bond, "
             "\"Delhi\", - Oberoi Group.\nTheme key phrases: luxury hotels, , !!!")
    assert clean_keywords(reply, 20) == (
        "historic hotels, Hotel Bond, Delhi, Oberoi Group, luxury hotels"
    )
    assert clean_keywords("Keywords: a1, b2, c3, d4", 2) == "a1, b2"
    assert clean_keywords("!!! ... ,,,", 20) == ""
    assert clean_keywords("The key phrases in the provided text are:, glaciers, ice", 20) == (
        "glaciers, ice")


@given(st.text(max_size=300), st.integers(min_value=1, max_value=25))
def test_clean_keywords_properties(reply: str, limit: int) -> None:
    items = phrases(clean_keywords(reply, limit))
    assert len(items) <= limit
    assert len({i.casefold() for i in items}) == len(items)
    assert all(i and "," not in i for i in items)


@pytest.mark.parametrize("text", ["", "!!", "Error: model crashed", "I'm sorry, I cannot help"])
def test_junk(text: str) -> None:
    assert looks_like_junk(text)


GLACIERS = ["Glaciers of the Alps retreat every summer.", "Moraines mark where ice stood."]


@pytest.mark.parametrize("reply", [
    _EXAMPLE_KEYWORDS,
    clean_summary(_EXAMPLE_SUMMARY),
    "glaciers, moraines, Hotel Tallcorn, Marshalltown Iowa",
    "historic hotels, hotel companies, bankruptcies and renovations, glaciers",
    "Summary: The Oberoi Group, based in Delhi, runs glaciers.",
    "glaciers, athletes and sportspeople, The Oberoi Group (2019)",  # seen with SmolLM2-135M
    "The Hotel Tallcorn, glaciers",
    "historic hotels, hotel companies (1), historic buildings, landmarks of the town",
])
def test_copies_of_the_example_are_recognised(reply: str) -> None:
    assert copies_example(reply, GLACIERS)


@pytest.mark.parametrize(("reply", "sources"), [
    ("glaciers, moraines, Alps, ice ages", GLACIERS),
    ("bridge history, construction dates, locations, Golden Gate Bridge",
     ["The Golden Gate Bridge was built in 1937."]),
    ("hotels, Hotel Bond, Delhi", ["Hotel Bond is in Hartford.", "Oberoi is in Delhi."]),
    ("Oberoi hotels, luxury hotels in Delhi", ["The Oberoi Group runs hotels from Delhi."]),
    ("bond markets, interest rates", ["Government bonds pay interest."]),
    ("historic hotels, hotel companies", ["Historic hotels and the companies that run them."]),
])
def test_abstracts_of_their_own_input_are_not_copies(reply: str, sources: list[str]) -> None:
    assert not copies_example(reply, sources)


def test_progress_rate_and_eta() -> None:
    progress = Progress()
    assert progress.snapshot() == {"running": False}
    progress.start(10)
    progress.started -= 2.0  # two seconds ago
    progress.advance(done=3, failed=1)
    shown = progress.snapshot()
    assert shown["running"] and (shown["done"], shown["failed"], shown["total"]) == (3, 1, 10)
    assert shown["rate_per_s"] == pytest.approx(2.0, rel=0.05)
    assert shown["eta_s"] == pytest.approx(3.0, rel=0.05)
    progress.stop()
    assert progress.snapshot() == {"running": False}


# -- LLM abstracts against the fake server -------------------------------------------------------

def llm_for(server, timeout: float = 10.0) -> OllamaLLM:
    return OllamaLLM(LLMConfig(enabled=True, host=server.url, timeout_s=timeout))


def test_keyword_prompt_and_options(fake_ollama) -> None:
    fake_ollama.script("Keywords: hotels, Hotel Bond,hotels, Delhi")
    abstractor = LLMAbstractor(llm_for(fake_ollama), "llama3.1:8b", num_ctx=4096)
    assert abstractor.abstract(["Hotel Bond is in Hartford.", "Oberoi is in Delhi."]) == (
        "hotels, Hotel Bond, Delhi"
    )
    (request,) = fake_ollama.chats
    assert request.options["temperature"] == 0
    assert request.options["num_ctx"] == 4096
    assert request.options["repeat_penalty"] == 1.3
    messages = request.body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert "no more than 20 key phrases" in messages[0]["content"].lower()
    assert "commas" in messages[0]["content"]
    assert messages[-1]["content"] == "Hotel Bond is in Hartford.\n\nOberoi is in Delhi."


def test_summative_prompt_strips_summary_prefix(fake_ollama) -> None:
    fake_ollama.script("Summary: Two hotels, one in Hartford and one in Delhi.")
    abstractor = LLMAbstractor(llm_for(fake_ollama), "llama3.1:8b", kind="summative",
                               summary_words=60)
    assert abstractor.abstract(["a hotel in Hartford", "another hotel in Delhi"]) == (
        "Two hotels, one in Hartford and one in Delhi."
    )
    system = fake_ollama.chats[0].body["messages"][0]["content"]
    assert '"Summary:"' in system and "60 words" in system
    assert fake_ollama.chats[0].options["temperature"] == 0


@pytest.mark.parametrize("reply", ["!!! ...", "Summary:", "Error: llama runner crashed"])
def test_junk_reply_raises(fake_ollama, reply: str) -> None:
    fake_ollama.script(reply)
    abstractor = LLMAbstractor(llm_for(fake_ollama), "llama3.1:8b", kind="summative")
    with pytest.raises(LLMError, match="unusable"):
        abstractor.abstract(["some text"])


@pytest.mark.parametrize("kind", ["keyword", "summative"])
def test_a_reply_copying_the_example_is_refused(fake_ollama, kind: str) -> None:
    fake_ollama.script(_EXAMPLE_KEYWORDS if kind == "keyword" else _EXAMPLE_SUMMARY)
    abstractor = LLMAbstractor(llm_for(fake_ollama), "llama3.1:8b", kind=kind)
    with pytest.raises(LLMError, match="unusable .* copies the prompt's example"):
        abstractor.abstract(GLACIERS)
    fake_ollama.script("Summary: Glaciers retreat and leave moraines."
                       if kind == "summative" else "glaciers, moraines, Alps")
    assert "moraines" in abstractor.abstract(GLACIERS)


def test_junk_mode_raises_for_keywords(fake_ollama) -> None:
    fake_ollama.script(mode="junk")
    with pytest.raises(LLMError):
        LLMAbstractor(llm_for(fake_ollama), "llama3.1:8b").abstract(["some text"])


def test_missing_model_and_dead_server(fake_ollama) -> None:
    with pytest.raises(LLMError, match="ollama pull qwen3:4b"):
        LLMAbstractor(llm_for(fake_ollama), "qwen3:4b").abstract(["text"])
    url = fake_ollama.url
    fake_ollama.stop()
    dead = OllamaLLM(LLMConfig(enabled=True, host=url, timeout_s=2))
    with pytest.raises(LLMError, match="ollama serve"):
        LLMAbstractor(dead, "llama3.1:8b").abstract(["text"])


@pytest.mark.parametrize("kind", ["keyword", "summative"])
def test_long_input_is_summarised_in_parts_within_budget(fake_ollama, kind: str) -> None:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    children = [" ".join(words[(i + j) % 10] for j in range(130))[:800] for i in range(40)]
    fake_ollama.script(fn=lambda body: "Summary: alpha and beta, then gamma"  # grounded
                       if kind == "summative" else "alpha beta, gamma delta")
    abstractor = LLMAbstractor(llm_for(fake_ollama), "m:1", kind=kind, num_ctx=2048)
    fake_ollama.models.append("m:1")
    assert abstractor.abstract(children)
    chats = fake_ollama.chats
    assert len(chats) >= 5
    for request in chats:
        used = messages_tokens(request.body["messages"]) + request.options["num_predict"]
        assert used <= 2048
        assert request.options["num_ctx"] == 2048
    fed = "\n\n".join(r.body["messages"][-1]["content"] for r in chats[:-1])
    for child in children:
        assert child in fed  # nothing truncated
    assert estimate_tokens("x" * 8) == 2


def test_one_huge_child_is_split_not_truncated(fake_ollama) -> None:
    fake_ollama.script(fn=lambda body: "word1 word2")
    abstractor = LLMAbstractor(llm_for(fake_ollama), "llama3.1:8b", num_ctx=2048)
    huge = " ".join(f"word{i}" for i in range(3000))
    assert abstractor.abstract([huge]) == "word1 word2"
    fed = " ".join(r.body["messages"][-1]["content"] for r in fake_ollama.chats[:-1])
    assert fed.split() == huge.split()


def test_num_ctx_too_small_is_a_config_error(fake_ollama) -> None:
    with pytest.raises(ConfigError, match="num_ctx"):
        LLMAbstractor(llm_for(fake_ollama), "llama3.1:8b", num_ctx=512)

"""Chunking: sentence boundaries, token bounds, offsets and lines, stable hashes, coverage."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psirag_kb.ingest.chunking import Chunk, chunk_text, split_sentences, word_token_count
from psirag_kb.ingest.documents import line_of

WORDS = ("tree leaf node abstract query vector merge collapse depth root child layer index "
         "corpus passage token model keyword summary cosine").split()


def prose(seed: int, sentences: int, width: int = 72) -> str:
    """Make deterministic wrapped prose in paragraphs, like a hand-written text file."""
    rng = random.Random(seed)
    paragraphs = []
    for _ in range(max(1, sentences // 5)):
        words: list[str] = []
        for _ in range(5):
            sentence = [rng.choice(WORDS) for _ in range(rng.randint(4, 18))]
            sentence[0] = sentence[0].capitalize()
            words.extend(sentence[:-1] + [sentence[-1] + rng.choice(".!?")])
        lines, line = [], ""
        for word in words:
            if line and len(line) + 1 + len(word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs) + "\n"


def check_chunks(text: str, chunks: list[Chunk]) -> None:
    """Assert offsets, lines, text and hashes agree with the source text."""
    previous_end = 0
    for ordinal, chunk in enumerate(chunks):
        assert chunk.ordinal == ordinal
        assert previous_end <= chunk.start < chunk.end
        assert text[chunk.start : chunk.end] == chunk.text
        assert chunk.text == chunk.text.strip()
        assert chunk.line_first == line_of(text, chunk.start)
        assert chunk.line_last == line_of(text, chunk.end - 1)
        assert len(chunk.hash) == 32
        previous_end = chunk.end


def test_sentences_flow_across_wrapped_lines() -> None:
    text = "This sentence is wrapped\nacross two lines. Dr. Who said e.g. nothing. Next one!\n"
    assert [text[s:e] for s, e in split_sentences(text)] == [
        "This sentence is wrapped\nacross two lines.",
        "Dr. Who said e.g. nothing.",
        "Next one!",
    ]


def test_block_structure_ends_sentences() -> None:
    text = (
        "# Heading without stop\nIntro text\n\nPara one\n\n- item one\n- item two\n"
        "1. first\n2) second\n\nname,age,city\nada,36,london\n\nx = compute(1)\ny = x + 2\n"
    )
    pieces = [text[s:e] for s, e in split_sentences(text)]
    assert pieces == [
        "# Heading without stop", "Intro text", "Para one", "- item one", "- item two",
        "1. first", "2) second", "name,age,city", "ada,36,london", "x = compute(1)",
        "y = x + 2",
    ]


def test_chunks_end_at_sentence_ends_and_respect_the_budget() -> None:
    text = prose(1, 200)
    sentence_ends = {e for _, e in split_sentences(text)}
    chunks = chunk_text(text, word_token_count, max_tokens=60, hard_max_tokens=120)
    check_chunks(text, chunks)
    assert len(chunks) > 10
    for chunk in chunks:
        assert chunk.end in sentence_ends
        assert word_token_count(chunk.text) <= 60
    # Greedy packing: a chunk plus the next sentence would have gone over the budget.
    tokens = sum(word_token_count(c.text) for c in chunks)
    assert tokens / len(chunks) > 30


def test_long_sentences_are_split_under_the_hard_maximum() -> None:
    csv_row = ",".join(f"field{i} value{i}" for i in range(600))
    minified = "var a=1;" * 900
    run_on = " ".join(WORDS[i % len(WORDS)] for i in range(2000))
    lines = "\n".join(f"entry {i} with words and more words" for i in range(300))
    for text in (csv_row, minified, run_on, f"{lines}\n", f"Intro.\n\n{run_on}.\n\nOutro."):
        chunks = chunk_text(text, word_token_count, max_tokens=50, hard_max_tokens=120)
        check_chunks(text, chunks)
        assert len(chunks) > 1
        assert max(word_token_count(c.text) for c in chunks) <= 120
        assert "".join(text.split()) == "".join("".join(c.text.split()) for c in chunks)


def test_count_tokens_called_once_per_sentence() -> None:
    text = prose(2, 100)
    calls: list[str] = []

    def counting(piece: str) -> int:
        calls.append(piece)
        return word_token_count(piece)

    chunk_text(text, counting)
    assert len(calls) == len(split_sentences(text))


def test_edit_at_the_end_keeps_earlier_hashes() -> None:
    text = prose(3, 150)
    before = chunk_text(text, word_token_count)
    edited = text + "\nA new closing paragraph was added. It has two sentences.\n"
    after = chunk_text(edited, word_token_count)
    assert len(before) > 5
    assert [c.hash for c in before[:-1]] == [c.hash for c in after[: len(before) - 1]]
    appended = text.rstrip() + " And one more sentence at the very end.\n"
    again = chunk_text(appended, word_token_count)
    assert [c.hash for c in before[:-1]] == [c.hash for c in again[: len(before) - 1]]


def test_deterministic() -> None:
    text = prose(4, 80)
    assert chunk_text(text, word_token_count) == chunk_text(text, word_token_count)


def test_heading_starts_a_new_chunk_when_half_full() -> None:
    body = "Some words in a sentence here. " * 10
    text = f"# One\n\n{body}\n\n## Two\n\nShort text."
    chunks = chunk_text(text, word_token_count, max_tokens=100)
    assert [c.text.split("\n")[0] for c in chunks] == ["# One", "## Two"]
    small = "# One\n\nTiny.\n\n## Two\n\nShort text."
    assert len(chunk_text(small, word_token_count, max_tokens=100)) == 1


def test_whitespace_only_gives_no_chunks() -> None:
    assert chunk_text("", word_token_count) == []
    assert chunk_text(" \n\n\t \n", word_token_count) == []


def test_whitespace_padding_never_swells_a_chunk() -> None:
    text = "Alpha starts here" + " " * 3_000_000 + "and omega ends there.\n" + "\n" * 1000 + "Tail."
    chunks = chunk_text(text, word_token_count, max_tokens=50)
    check_chunks(text, chunks)
    assert [c.text for c in chunks] == ["Alpha starts here", "and omega ends there.", "Tail."]
    assert chunk_text("a  b\n\nc", word_token_count)[0].text == "a  b\n\nc"  # short gaps stay


def test_bad_budgets_are_rejected() -> None:
    with pytest.raises(ValueError):
        chunk_text("text", word_token_count, max_tokens=300, hard_max_tokens=200)


def test_word_token_count() -> None:
    assert word_token_count("") == 0
    assert word_token_count("Hello, world!") == 4
    assert 120 <= word_token_count(" ".join(["retrieval"] * 100)) <= 200


def test_large_texts_and_long_blank_runs() -> None:
    rng = random.Random(5)
    passages = [" ".join(rng.choice(WORDS) for _ in range(100)) + "." for _ in range(6000)]
    text = "\n\n".join(passages)
    chunks = chunk_text(text, word_token_count)
    assert len(chunks) >= 6000
    check_chunks(text, chunks[:50])
    padded = "First line.\n" + " \n" * 2_000_000 + "\n" * 2_000_000 + "Last line.\n"
    chunks = chunk_text(padded, word_token_count)
    assert [(c.text, c.line_first) for c in chunks] == [("First line.", 1),
                                                        ("Last line.", 4_000_002)]


TEXT_ALPHABET = st.sampled_from(list("ab cdXY.!?,;=#-*|\n\n\t\r1:{}") + ["\u2028", "é", "。"])


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(TEXT_ALPHABET, max_size=400),
    max_tokens=st.integers(1, 12),
    extra=st.integers(0, 12),
)
def test_chunks_cover_every_character_once(text: str, max_tokens: int, extra: int) -> None:
    hard = max_tokens + extra
    chunks = chunk_text(text, word_token_count, max_tokens=max_tokens, hard_max_tokens=hard)
    check_chunks(text, chunks)
    owner = [0] * len(text)
    for chunk in chunks:
        for i in range(chunk.start, chunk.end):
            owner[i] += 1
        assert word_token_count(chunk.text) <= hard or len(chunk.text) == 1
    for i, ch in enumerate(text):
        assert owner[i] == 1 or (owner[i] == 0 and ch.isspace())


def test_breaks_start_new_chunks() -> None:
    text = "From: ann@example.org\nSubject: Minutes\n\nThe crane was repaired. It works.\n\nEnd."
    body = text.index("The crane")
    whole = chunk_text(text, word_token_count, max_tokens=100)
    assert len(whole) == 1
    parts = chunk_text(text, word_token_count, max_tokens=100, breaks=[body, text.index("End")])
    assert [c.text for c in parts] == ["From: ann@example.org\nSubject: Minutes",
                                       "The crane was repaired. It works.", "End."]
    assert parts[1].start == body and parts[1].line_first == 4

"""Grounding checks on LLM abstracts and answers, measured on a fixture set of outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psirag_kb.abstracts.writers import EXAMPLE_VOCABULARY
from psirag_kb.answer.agent_prompts import EXAMPLE_ENTITIES
from psirag_kb.llm.grounding import check_abstract, check_answer, restates

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "grounding"


def load(name: str) -> list[dict]:
    """The fixture records of one file."""
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line]


def measure(records: list[dict], verdicts: list[bool]) -> dict[str, float]:
    """Precision and recall of refusing bad outputs, and good outputs kept."""
    refused_bad = sum(not v and not r["good"] for r, v in zip(records, verdicts, strict=True))
    refused = sum(not v for v in verdicts)
    bad = sum(not r["good"] for r in records)
    good_kept = sum(v and r["good"] for r, v in zip(records, verdicts, strict=True))
    good = sum(r["good"] for r in records)
    return {"precision": refused_bad / max(refused, 1), "recall": refused_bad / max(bad, 1),
            "good_kept": good_kept / good if good else 1.0}


def test_abstract_check_refuses_inventions_and_keeps_good_abstracts(capsys) -> None:
    records = load("abstracts.jsonl")
    verdicts = [check_abstract(r["output"], r["sources"], EXAMPLE_VOCABULARY).ok
                for r in records]
    figures = measure(records, verdicts)
    with capsys.disabled():
        print(f"\nabstract grounding on {len(records)} outputs: {figures}")
    wrong = [r["output"] for r, v in zip(records, verdicts, strict=True) if v != r["good"]]
    assert figures["good_kept"] == 1.0, wrong
    assert figures["precision"] == 1.0 and figures["recall"] >= 0.9, wrong


def test_answer_check_refuses_echoes_and_example_entities(capsys) -> None:
    records = load("answers.jsonl")
    verdicts = [check_answer(r["answer"], r["question"], r["passages"], EXAMPLE_ENTITIES).ok
                for r in records]
    figures = measure(records, verdicts)
    with capsys.disabled():
        print(f"\nanswer grounding on {len(records)} outputs: {figures}")
    wrong = [r["answer"] for r, v in zip(records, verdicts, strict=True) if v != r["good"]]
    assert figures["good_kept"] == 1.0, wrong
    assert figures["precision"] == 1.0 and figures["recall"] >= 0.9, wrong


def verdicts_of(records: list[dict]) -> list[bool]:
    """The check's verdict on each record (an abstract or an answer)."""
    return [check_answer(r["answer"], r["question"], r["passages"], EXAMPLE_ENTITIES).ok
            if "answer" in r else check_abstract(r["output"], r["sources"], EXAMPLE_VOCABULARY).ok
            for r in records]


def test_the_checks_on_real_small_model_output(capsys) -> None:
    # SmolLM2-135M's own abstracts and answers on the sample folder, labelled by reading them
    # (tests/fixtures/grounding/README.md): no good one refused, most bad ones caught
    for name in ("real_abstracts.jsonl", "real_answers.jsonl"):
        records = load(name)
        verdicts = verdicts_of(records)
        figures = measure(records, verdicts)
        good = sum(r["good"] for r in records)
        with capsys.disabled():
            print(f"\n{name}: {len(records)} outputs ({good} good): {figures}")
        wrong = [(r.get("output") or r["answer"], r["why"])
                 for r, v in zip(records, verdicts, strict=True) if v != r["good"]]
        assert figures["good_kept"] == 1.0 and figures["precision"] == 1.0, wrong
        assert figures["recall"] >= 0.8, wrong  # the misses are semantic (docs/benchmarks)


@pytest.mark.parametrize("text", [
    "How does Python manage memory for objects?",
    "how does python manage memory for objects",
    "How is memory for objects managed by Python?",
])
def test_the_question_again_is_a_restatement(text: str) -> None:
    assert restates(text, "How does Python manage memory for objects?")


@pytest.mark.parametrize("text", [
    "Python reference counting", "Yes, Python manages memory for objects",
    "the Python memory manager and its private heap",
])
def test_a_real_sub_question_is_not_a_restatement(text: str) -> None:
    assert not restates(text, "How does Python manage memory for objects?")


def test_a_word_in_capitals_is_a_name_wherever_it_stands() -> None:
    sources = ["The contract bridge club meets weekly; osiApproved: true for the GPL."]
    assert not check_abstract("The contract bridge game is now available on PC", sources)
    assert not check_abstract("NASA contract bridge club meets weekly", sources)
    assert check_abstract("Contract bridge club, GPL, OSI approved", sources)

"""Agent mode and summaries on a real knowledge base (bag-of-words embedder), CLI included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FakeEmbedder

from psirag_kb.cli import main
from psirag_kb.config import Config
from psirag_kb.evaluation import load_questions
from psirag_kb.kb import KnowledgeBase
from psirag_kb.search.mentions import STEP_PREFIX
from psirag_kb.search.multiround import multi_round

FIXTURE = Path(__file__).parents[1] / "fixtures" / "hotpotqa_small"


@pytest.fixture(scope="module")
def corpus_kb(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    config = Config().with_data_dir(tmp_path_factory.mktemp("agent") / "data")
    with KnowledgeBase(config, embedder=FakeEmbedder()) as kb:
        kb.ingest_jsonl(FIXTURE / "corpus.jsonl")
        yield kb


def test_multi_round_returns_k_and_differs_from_one_round(corpus_kb):
    questions = [q["question"] for q in load_questions(FIXTURE / "questions.jsonl")]
    changed = 0
    for question in questions:
        one = multi_round(corpus_kb.engine, question, 5, rounds=1)
        two = multi_round(corpus_kb.engine, question, 5, rounds=2)
        assert len(two.ranking.ids) == 5 and len(two.results) == 5
        assert one.ranking.ids.tolist() == corpus_kb.rank(question, "hybrid", 5).ids.tolist()
        expanded = [s["query"] for s in two.steps
                    if s["round"] == 2 and not s["query"].startswith(STEP_PREFIX)]
        assert expanded  # beside the mention list's lookup ("titles: ..."), when it has names
        assert all(q.startswith(question) and len(q) > len(question) for q in expanded)
        changed += one.ranking.ids.tolist() != two.ranking.ids.tolist()
    assert changed > 0
    assert len(corpus_kb.rank(questions[0], "agent", 5).ids) == 5


def test_agent_mode_without_llm_returns_passages_and_says_why(corpus_kb):
    result = corpus_kb.query("If Gallu is a demon Lilu is what?", mode="agent", k=3)
    assert result["mode"] == "agent" and result["status"] == "no_llm"
    assert result["answer"] is None and "enabled = false" in result["message"]
    assert len(result["citations"]) == 3 and len(result["results"]) == 3
    assert {"query", "answer", "status", "citations", "steps", "hops", "results"} <= set(result)
    assert result["steps"][0]["query"] == "If Gallu is a demon Lilu is what?"


def test_summary_without_llm_has_passages_and_covering_abstracts(corpus_kb):
    result = corpus_kb.query("Summarise the demons", summarize=True)
    assert result["status"] == "no_llm" and result["summary"] is None
    covered = {c for node in result["abstracts"] for c in node["chunk_ids"]}
    assert covered == {r["chunk_id"] for r in result["results"]}


def test_summary_with_llm_cites_passages(fake_ollama, tmp_path):
    fake_ollama.script("Summary: Demons store energy [1] and spirits appear in myths [2].")
    config = Config().with_data_dir(tmp_path / "data").replace(
        "llm", enabled=True, host=fake_ollama.url, timeout_s=10.0)
    with KnowledgeBase(config, embedder=FakeEmbedder()) as kb:
        kb.ingest_jsonl(FIXTURE / "corpus.jsonl")
        result = kb.query("Summarise the demons", summarize=True, k=4)
    assert result["status"] == "summarized"
    assert result["summary"].startswith("Demons store energy")
    assert [c["chunk_id"] for c in result["citations"]] == [
        r["chunk_id"] for r in result["results"][:2]]
    prompt = fake_ollama.chats[0].text
    assert "[1]" in prompt and "Summarise the demons" in prompt


def test_file_answers_cite_path_and_lines(fake_ollama, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "tern.txt").write_text("Shopping list.\n\nThe arctic tern flies from pole to pole.\n"
                                    "It covers seventy thousand kilometres a year.\n")
    fake_ollama.script({"action": "answer", "text": "pole to pole", "cited": [1]})
    config = Config().with_data_dir(tmp_path / "data").replace(
        "llm", enabled=True, host=fake_ollama.url, timeout_s=10.0)
    with KnowledgeBase(config, embedder=FakeEmbedder()) as kb:
        kb.ingest([notes])
        steps: list[dict] = []
        result = kb.answer("Where does the arctic tern fly?", k=3, on_step=steps.append)
    assert result["status"] == "answered" and result["answer"] == "pole to pole"
    cited = result["citations"][0]
    assert cited["source"] == str(notes / "tern.txt") and cited["lines"][0] >= 1
    assert cited["lines"][0] <= 3 <= cited["lines"][1]
    assert len(steps) == 1 and steps[0]["action"] == "answer" and steps[0]["protocol"] == "json"
    assert fake_ollama.chats[0].format["required"] == ["action", "text", "cited"]
    assert fake_ollama.violations == []


@pytest.mark.parametrize("structured", [True, False])
def test_cli_agent_with_an_llm_in_either_protocol(fake_ollama, tmp_path, capsys, monkeypatch,
                                                   structured: bool):
    monkeypatch.setattr("psirag_kb.kb.make_embedder", lambda *_: FakeEmbedder())
    config = tmp_path / "config.toml"
    config.write_text(f'[llm]\nenabled = true\nhost = "{fake_ollama.url}"\n'
                      f"structured = {str(structured).lower()}\n")
    data = ["--config", str(config), "--data-dir", str(tmp_path / "data")]
    assert main([*data, "ingest", "--jsonl", str(FIXTURE / "corpus.jsonl")]) == 0
    fake_ollama.script({"action": "not_mentioned", "text": "", "cited": []} if structured
                       else "Thought: nothing.\nAnswer: Not mentioned")
    capsys.readouterr()
    assert main([*data, "query", "--mode", "agent", "--json", "Who painted the demon Lilu?"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["status"], result["answer"]) == ("not_mentioned", "Not mentioned")
    assert [bool(chat.format) for chat in fake_ollama.chats] == [structured]
    assert result["steps"][0]["protocol"] == ("json" if structured else "text")
    assert fake_ollama.violations == []


def test_cli_agent_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("psirag_kb.kb.make_embedder", lambda *_: FakeEmbedder())
    data = ["--data-dir", str(tmp_path / "data")]
    assert main([*data, "ingest", "--jsonl", str(FIXTURE / "corpus.jsonl"), "--json"]) == 0
    capsys.readouterr()
    assert main([*data, "query", "--mode", "agent", "--json", "-k", "2",
                 "Are Christopher Nolan and Sathish Kalathil both film directors?"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mode"] == "agent" and result["status"] == "no_llm"
    assert len(result["results"]) == 2 and result["hops"] in (1, 2, 3, 4)
    assert main([*data, "query", "--mode", "agent", "Is Sathish Kalathil a director?"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No answer (no_llm)") and "Citations:" in out and "Steps (" in out


def test_eval_agent_mode_with_an_llm_reports_em_and_f1(fake_ollama, tmp_path):
    from psirag_kb.evaluation import evaluate

    fake_ollama.script(fn=lambda body: {"action": "answer", "text": "a spirit", "cited": [1]})
    lines = (FIXTURE / "questions.jsonl").read_text().splitlines()[:2]
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(lines))
    config = Config().replace("llm", enabled=True, host=fake_ollama.url, timeout_s=5.0,
                              grounding=False)  # "a spirit": a placeholder answer
    report = evaluate(config, [FIXTURE / "corpus.jsonl"], questions, ["agent"],
                      embedder=FakeEmbedder(), open_kb=KnowledgeBase)
    row = report["modes"]["agent"]
    assert row["statuses"] == {"answered": 2}
    right = sum("a spirit" in json.loads(line)["answers"] for line in lines)
    assert right >= 1 and row["em"] == pytest.approx(right / 2)
    assert row["em"] <= row["f1"] <= 1.0 and "recall@5" in row
    assert fake_ollama.violations == [] and all(chat.format for chat in fake_ollama.chats)

"""benchmarks/titled_questions.py: gold passages named by title become corpus ids."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from titled_questions import convert, corpus_ids  # noqa: E402


def corpus(tmp_path: Path, titles: list[str]) -> Path:
    """A corpus file with one passage per title, ids p0, p1, ..."""
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "title": t, "text": f"about {t}"}) + "\n"
                            for i, t in enumerate(titles)), encoding="utf-8")
    return path


def test_supporting_titles_become_ids_in_order_once(tmp_path: Path) -> None:
    ids = corpus_ids(corpus(tmp_path, ["Lothair II", "Ermengarde of Tours", "Teutberga"]))
    record = {"_id": "q1", "question": "When did Lothair II's mother die?",
              "answer": "20 March 851", "type": "compositional",
              "supporting_facts": [["Lothair II", 1], ["Ermengarde of Tours", 0],
                                   ["Lothair II", 2]]}
    assert convert([record], ids) == [{
        "id": "q1", "question": "When did Lothair II's mother die?",
        "answers": ["20 March 851"], "type": "compositional",
        "supporting_ids": ["p0", "p1"]}]


def test_a_title_missing_or_held_twice_is_an_error(tmp_path: Path) -> None:
    ids = corpus_ids(corpus(tmp_path, ["Phoolwari", "Phoolwari", "Aas Ka Panchhi"]))
    record = {"question": "Which film was released first?", "answer": "Phoolwari",
              "supporting_facts": [["Aas Ka Panchhi", 0], ["Phoolwari", 0]]}
    with pytest.raises(SystemExit, match="Phoolwari"):
        convert([record], ids)
    with pytest.raises(SystemExit, match="Nowhere"):
        convert([{**record, "supporting_facts": [["Nowhere", 0]]}], ids)

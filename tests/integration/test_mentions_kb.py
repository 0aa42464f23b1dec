"""The mention list over a real folder (real MiniLM, DuckDB, Tantivy): round 1's first note
names another note by its file name or its first heading, and round 2 brings that note in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.search import multiround
from psirag_kb.search.mentions import STEP_PREFIX
from psirag_kb.search.multiround import MULTI_HOP_MODE, SINGLE_HOP_MODE, multi_round

NOTES = {
    "Marie Curie.md": "# Marie Curie\n\nMarie Curie was a physicist and chemist who won two "
                      "Nobel prizes. She was born in Warsaw, and later studied at the Sorbonne, "
                      "where she met Pierre.\n",
    "Warsaw.md": "The capital of Poland lies on both banks of the Vistula. Its old town was "
                 "destroyed in 1944 and rebuilt stone by stone after the war.\n",
    "notes-0012.md": "# Sorbonne\n\nThe university building in the Latin Quarter houses "
                     "lecture halls, a chapel and a library founded in the thirteenth century.\n",
    "gardening.md": "# Tomatoes\n\nTomatoes need sun, warm soil and water at the roots; pinch "
                    "out the side shoots each week.\n",
    "bread.md": "# Sourdough\n\nA starter of flour and water, fed daily, leavens the dough "
                "overnight in a cool kitchen.\n",
}
DISTRACTORS = {
    f"{name}.md": f"# {name}\n\n{name} was a chemist who won a prize for work on {topic}; "
                  f"the prize was shared with a colleague.\n"
    for name, topic in [("Linus Pauling", "chemical bonds"), ("Dorothy Hodgkin", "crystals"),
                        ("Otto Hahn", "fission"), ("Ada Yonath", "ribosomes"),
                        ("Fritz Haber", "ammonia"), ("Harold Urey", "heavy water")]
}
QUESTION = "Which prizes did the chemist Marie Curie win, and where was she born?"


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, minilm) -> Iterator[KnowledgeBase]:
    root = tmp_path_factory.mktemp("mentions")
    folder = root / "notes"
    folder.mkdir()
    for name, text in {**NOTES, **DISTRACTORS}.items():
        (folder / name).write_text(text, encoding="utf-8")
    config = Config().with_data_dir(root / "data")
    with KnowledgeBase(config, embedder=minilm) as opened:
        opened.ingest([folder])
        yield opened


def mention_step(kb: KnowledgeBase, mode: str) -> dict:
    """Round 2's mention step of the question in a mode."""
    result = multi_round(kb.engine, QUESTION, 5, rounds=2, mode=mode)
    first = result.steps[0]["passages"][0]["source"]
    assert Path(first).name == "Marie Curie.md", result.steps[0]
    steps = [s for s in result.steps if s["query"].startswith(STEP_PREFIX)]
    assert len(steps) == 1, result.steps
    return steps[0]


@pytest.mark.parametrize("mode", [MULTI_HOP_MODE, SINGLE_HOP_MODE])
def test_names_in_the_first_passage_bring_in_the_notes_they_title(kb: KnowledgeBase,
                                                                    mode: str) -> None:
    step = mention_step(kb, mode)
    assert "Warsaw" in step["query"] and "Sorbonne" in step["query"]
    found = {Path(p["source"]).name for p in step["passages"]}
    # "Warsaw" is a file's name, "Sorbonne" the first line (its heading) of notes-0012.md
    assert found == {"Warsaw.md", "notes-0012.md"}


def test_the_titled_note_reaches_the_top_five_only_through_its_name(
        kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    """Multi-hop rounds: without the mention list, the chemists' notes fill the top five (in
    one-hop rounds the expansion's BM25 finds Warsaw.md by its header as well)."""
    mode = MULTI_HOP_MODE

    def top(result: multiround.MultiRound) -> list[str]:
        return [Path(p).name for p in kb.sources(result.ranking.ids)]

    assert "Warsaw.md" in top(multi_round(kb.engine, QUESTION, 5, rounds=2, mode=mode))
    monkeypatch.setattr(multiround, "MENTION_MODES", ())
    without = multi_round(kb.engine, QUESTION, 5, rounds=2, mode=mode)
    assert not [s for s in without.steps if s["query"].startswith(STEP_PREFIX)]
    assert "Warsaw.md" not in top(without), without.steps

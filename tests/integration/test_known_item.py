"""Known items: a pasted sentence, an identifier or a quoted phrase finds its file
first in every fused mode, although dense and tree prefer a close neighbour. Real files, the real
MiniLM, DuckDB, Tantivy and hnswlib.

Four licences of one topic: the Harbour licence holds the pasted sentence amid other clauses,
and three short licences say the same in other words, so dense and tree rank all three above
it and reciprocal rank fusion let their two votes outvote BM25's certain hit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase

SENTENCE = "Licensees may redistribute modified copies provided the original notice stays intact."
IDENTIFIER = "HTK_E4021"
HARBOUR = (
    "# Licence of the Harbour Toolkit\n\n"
    "This licence covers the Harbour Toolkit and its documentation. The authors give no warranty "
    f"of any kind. Trademarks of the authors are not licensed here. {SENTENCE} Disputes are "
    "settled under the law of the authors' home country. Version 1.3 replaces every earlier "
    f"version of this text. Questions about it quote the code {IDENTIFIER}.\n"
)
NEIGHBOURS = {
    "meadow": "You are allowed to share changed versions of the software as long as you keep "
              "the copyright notice.",
    "river": "Anyone may pass on altered versions of this program, on condition that the "
             "licence notice is preserved.",
    "forest": "Sharing modified versions is permitted when the copyright notice is kept "
              "unchanged.",
}
FUSED = ("auto", "hybrid", "tree")


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("licences")
    (root / "harbour-licence.md").write_text(HARBOUR)
    for name, clause in NEIGHBOURS.items():
        (root / f"{name}-licence.md").write_text(
            f"# Licence of the {name.title()} Library\n\n{clause}\n")
    return root


def _kb(tmp_path_factory, docs: Path, minilm, **retrieval) -> KnowledgeBase:
    config = Config().with_data_dir(tmp_path_factory.mktemp("data") / "data")
    if retrieval:
        config = config.replace("retrieval", **retrieval)
    kb = KnowledgeBase(config, embedder=minilm)
    kb.ingest([docs])
    return kb


@pytest.fixture(scope="module")
def kb(tmp_path_factory, docs, minilm):
    kb = _kb(tmp_path_factory, docs, minilm)
    yield kb
    kb.close()


def first(kb: KnowledgeBase, query: str, mode: str | None = None) -> str:
    return Path(kb.query(query, mode=mode)["results"][0]["source"]).name


def names(result: dict) -> set[str]:
    return {Path(r["source"]).name for r in result["results"]}


def test_dense_prefers_a_neighbour_and_bm25_is_sure(kb: KnowledgeBase) -> None:
    """The setting the fusion must handle: dense puts a neighbour first, BM25 the right file."""
    assert first(kb, SENTENCE, "dense") != "harbour-licence.md"
    assert first(kb, SENTENCE, "sparse") == "harbour-licence.md"


@pytest.mark.parametrize("mode", [None, *FUSED])
def test_a_pasted_sentence_finds_its_file_first(kb: KnowledgeBase, mode: str | None) -> None:
    assert first(kb, SENTENCE, mode) == "harbour-licence.md"


@pytest.mark.parametrize("mode", [None, *FUSED])
def test_an_identifier_finds_its_file_first(kb: KnowledgeBase, mode: str | None) -> None:
    assert first(kb, IDENTIFIER, mode) == "harbour-licence.md"


def test_dense_alone_stays_pure_dense(kb: KnowledgeBase) -> None:
    """No certain hit is put before dense's own order: cosines best first, a neighbour first."""
    ranked = kb.rank(SENTENCE, "dense", 4)
    assert ranked.scores.tolist() == sorted(ranked.scores.tolist(), reverse=True)
    assert Path(kb.sources(ranked.ids)[0]).name != "harbour-licence.md"


@pytest.mark.parametrize("signal", ["phrase", "margin"])
def test_each_signal_alone_puts_the_sentence_first(tmp_path_factory, docs, minilm,
                                                   signal: str) -> None:
    with _kb(tmp_path_factory, docs, minilm, certain_first=[signal]) as one:
        assert first(one, SENTENCE, "hybrid") == "harbour-licence.md"


def test_plain_rrf_lets_the_neighbours_win(tmp_path_factory, docs, minilm) -> None:
    """The switch to today's fusion: the close neighbours' two votes win again."""
    with _kb(tmp_path_factory, docs, minilm, certain_first=[]) as plain:
        assert first(plain, SENTENCE, "hybrid") != "harbour-licence.md"


@pytest.mark.parametrize("mode", ["auto", "hybrid", "tree", "sparse", "dense"])
def test_a_quoted_phrase_must_occur(kb: KnowledgeBase, mode: str) -> None:
    """Dense alone ranks the neighbours first for these words; the quotes keep only the file
    that holds them, in every mode."""
    result = kb.query('copyright "notice stays intact"', mode=mode)
    assert names(result) == {"harbour-licence.md"}
    assert "note" not in result


def test_a_quoted_phrase_spans_the_header_and_the_text(kb: KnowledgeBase) -> None:
    """The chunk's header (its document title) is indexed before its text."""
    result = kb.query('"Harbour Toolkit This licence covers"', mode="dense")
    assert names(result) == {"harbour-licence.md"}


def test_curly_quotes_and_stemmed_words(kb: KnowledgeBase) -> None:
    assert names(kb.query("“licensee may redistribute”", mode="hybrid")) == {
        "harbour-licence.md"}


@pytest.mark.parametrize("mode", ["auto", "hybrid", "dense", "sparse"])
def test_a_quoted_phrase_found_nowhere_gives_no_result_and_says_so(kb: KnowledgeBase,
                                                                  mode: str) -> None:
    result = kb.query('licence "notice stays put"', mode=mode)
    assert result["results"] == []
    assert '"notice stays put"' in result["note"]


def test_words_in_another_order_are_not_the_phrase(kb: KnowledgeBase) -> None:
    assert kb.query('"intact stays notice"', mode="hybrid")["results"] == []


@pytest.mark.parametrize("mode", ["hybrid", "dense", "tree"])
def test_a_quoted_phrase_within_a_scope(kb: KnowledgeBase, docs: Path, mode: str) -> None:
    """The phrase and the folder limit the results together."""
    result = kb.query('"notice" licence', mode=mode, within=[docs / "river-licence.md"])
    assert names(result) == {"river-licence.md"}
    result = kb.query('"stays intact"', mode=mode, within=[docs / "river-licence.md"])
    assert result["results"] == [] and "note" in result


QUESTION = (f"Which licence lets me share changed versions if I keep the notice, as "
            f"{IDENTIFIER} says?")
"""A question in prose naming an identifier: the whole question is nobody's phrase, and its
other words are the neighbours' (dense and tree put them first)."""


@pytest.mark.parametrize("mode", [None, "hybrid"])
def test_an_identifier_a_question_names_finds_its_file_first(kb: KnowledgeBase,
                                                             mode: str | None) -> None:
    assert first(kb, QUESTION, "dense") != "harbour-licence.md"
    assert first(kb, QUESTION, mode) == "harbour-licence.md"

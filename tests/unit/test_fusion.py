"""BM25's certain hits and the one fusion; quoted phrases in a query."""

from __future__ import annotations

import numpy as np
import pytest

from psirag_kb.config import Config, ConfigError, parse_config
from psirag_kb.search.fusion import CERTAIN_MAX, certain_hits, fuse, named_hits, promote
from psirag_kb.search.phrases import identifiers, no_match_note, quoted, required
from psirag_kb.search.retrieval import rrf
from psirag_kb.storage.records import Ranking
from psirag_kb.storage.sparse import SparseIndex


def ranking(*ids: int, scores: list[float] | None = None) -> Ranking:
    values = scores if scores is not None else [1.0 / (i + 1) for i in range(len(ids))]
    return Ranking(np.array(ids, np.int64), np.array(values, np.float32))


def no_phrase(text, k, paths=None):
    return np.zeros(0, np.int64), np.zeros(0, np.float32)


def phrase_in(*ids: int):
    def hits(text, k, paths=None):
        return np.array(ids[:k], np.int64), np.ones(min(len(ids), k), np.float32)
    return hits


def test_two_agreeing_votes_outvote_bm25_under_plain_rrf() -> None:
    """The reported failure: BM25 ranks 1 first, tree and dense agree on 2."""
    bm25, tree, dense = ranking(1, 2), ranking(2, 1, 3), ranking(2, 3, 1)
    assert rrf([tree, bm25, dense]).ids[0] == 2
    assert fuse([tree, bm25, dense], 60).ids[0] == 2  # no certain hit: plain RRF


def test_a_certain_hit_goes_first() -> None:
    bm25, tree, dense = ranking(1, 2), ranking(2, 1, 3), ranking(2, 3, 1)
    fused = fuse([tree, bm25, dense], 60, limit=3, certain=np.array([1]))
    assert fused.ids.tolist() == [1, 2, 3]
    assert fused.scores[0] >= fused.scores[1]


def test_a_certain_hit_no_list_holds_is_added_and_the_limit_kept() -> None:
    fused = fuse([ranking(2, 3, 4)], 60, limit=2, certain=np.array([9]))
    assert fused.ids.tolist() == [9, 2]


def test_one_list_keeps_its_own_scores() -> None:
    """Tree mode fuses one list: its cosines stay, only certain hits move."""
    tree = ranking(5, 6, scores=[0.8, 0.7])
    assert fuse([tree], 60).scores.tolist() == pytest.approx([0.8, 0.7])
    assert promote(tree, np.zeros(0, np.int64), 1).ids.tolist() == [5]


def test_a_phrase_held_by_a_few_chunks_is_certain() -> None:
    found = certain_hits("a pasted sentence", ranking(7, 8), ["phrase"], 2.0, phrase_in(8, 3))
    assert found.tolist() == [8, 3]


def test_a_phrase_held_by_many_chunks_is_not() -> None:
    many = phrase_in(*range(1, CERTAIN_MAX + 5))
    assert certain_hits("common words", ranking(1, 2), ["phrase"], 2.0, many).tolist() == []


def test_an_identifier_held_by_a_few_chunks_comes_first_in_the_fused_order() -> None:
    """A question naming an option: the whole question is no phrase of any passage, but
    `--no-overwrite-ignore` is one of two (git's 1.7.9 release notes and its changelog): they
    go first, in the order fusion gave them, then the rest of the fused list."""
    asked: list[str] = []

    def hits(text, k, paths=None):
        asked.append(text)
        if text == "--no-overwrite-ignore":
            return np.array([4, 6], np.int64), np.ones(2, np.float32)
        if text == "git":
            return np.arange(CERTAIN_MAX + 1, dtype=np.int64), np.ones(CERTAIN_MAX + 1)
        return no_phrase(text, k)

    question = "Which release of git taught git checkout --no-overwrite-ignore?"
    named = named_hits(question, hits)
    assert named.tolist() == [4, 6] and asked == ["--no-overwrite-ignore"]
    tree, bm25, dense = ranking(2, 6, 3), ranking(6, 4, 9), ranking(2, 3, 6)
    assert fuse([tree, bm25, dense], 60, 4, None, named).ids.tolist() == [6, 4, 2, 3]
    assert fuse([tree, bm25, dense], 60, 4, np.array([9]), named).ids.tolist() == [9, 6, 4, 2]
    assert named_hits("what about git?", hits).tolist() == []


@pytest.mark.parametrize(("text", "found"), [
    ("Which release taught git checkout --no-overwrite-ignore?", ["--no-overwrite-ignore"]),
    ("What does PyMem_RawMalloc do, and std::move?", ["PyMem_RawMalloc", "std::move"]),
    ("Is os.path.join slower than setUpClass?", ["os.path.join", "setUpClass"]),
    ("Who was born first, Jean-Luc Godard or the U.S. president?", []),
    ("Use the -v flag, e.g. twice", []),
])
def test_identifiers_are_what_prose_never_writes(text: str, found: list[str]) -> None:
    assert identifiers(text) == found


@pytest.mark.parametrize(("scores", "sure"), [([9.0, 3.0], True), ([9.0, 4.6], False),
                                               ([9.0], True)])
def test_a_margin_over_the_runner_up_is_certain(scores: list[float], sure: bool) -> None:
    bm25 = ranking(*range(1, len(scores) + 1), scores=scores)
    found = certain_hits("q", bm25, ["margin"], 2.0, no_phrase)
    assert found.tolist() == ([1] if sure else [])


def test_no_signal_no_certain_hit() -> None:
    bm25 = ranking(1, 2, scores=[9.0, 1.0])
    assert certain_hits("q", bm25, [], 2.0, phrase_in(1)).tolist() == []
    assert certain_hits("q", Ranking.empty(), ["margin"], 2.0, no_phrase).tolist() == []


def test_both_signals_give_each_hit_once_phrase_hits_first() -> None:
    bm25 = ranking(4, 5, scores=[9.0, 1.0])
    found = certain_hits("q", bm25, ["phrase", "margin"], 2.0, phrase_in(5, 4))
    assert found.tolist() == [5, 4]


def test_quoted_phrases() -> None:
    assert quoted('licence "notice stays  intact" and “curly one”') == [
        "notice stays intact", "curly one"]
    assert quoted('no quotes, an "unclosed one') == []
    assert quoted('"!!" "a" "a"') == ["a"]
    assert '"x y"' in no_match_note(["x y"])


def test_config_names_the_signals() -> None:
    assert Config().retrieval.certain_first == ("phrase", "margin")
    with pytest.raises(ConfigError, match="certain_first"):
        parse_config({"retrieval": {"certain_first": ["phrase", "vibes"]}}, None)
    with pytest.raises(ConfigError, match="certain_margin"):
        parse_config({"retrieval": {"certain_margin": 0.5}}, None)


@pytest.fixture
def index(tmp_path) -> SparseIndex:
    sparse = SparseIndex(tmp_path / "bm25")
    sparse.apply(0, [
        (1, "Title\nThe PyMem_RawMalloc function allocates running memory.", "/d/a.md"),
        (2, "the running dogs allocate memory near CVE-2024-3094", "/d/b.md"),
        (3, "memory of running", "/e/c.md"),
    ], [])
    yield sparse
    sparse.close()


def test_phrase_hits_tokenise_as_indexed(index: SparseIndex) -> None:
    assert index.phrase_hits("PyMem_RawMalloc", 5)[0].tolist() == [1]
    assert index.phrase_hits("cve-2024-3094", 5)[0].tolist() == [2]
    assert index.phrase_hits("function allocated run memories", 5)[0].tolist() == [1]
    assert index.phrase_hits("title the pymem", 5)[0].tolist() == [1]  # header + text
    assert index.phrase_hits("memory running", 5)[0].tolist() == []
    assert index.phrase_hits("running", 5, ["/e"])[0].tolist() == [3]


def test_search_keeps_only_chunks_holding_every_phrase(index: SparseIndex) -> None:
    assert sorted(index.search("memory", 5)[0].tolist()) == [1, 2, 3]
    assert index.search("memory", 5, phrases=["running dogs"])[0].tolist() == [2]
    assert index.search("memory", 5, phrases=["running dogs", "function"])[0].tolist() == []
    assert index.search("memory", 5, ["/d"], ["running"])[0].tolist() in ([1, 2], [2, 1])


def test_quotes_are_required_in_a_search_not_in_a_question_quoting_a_title() -> None:
    assert required('copyright "notice stays intact"') == ["notice stays intact"]
    assert required('error "connection refused" nginx upstream') == ["connection refused"]
    question = ('"Wonderland by Night" is a song included in the 1968 album "A Man Without Love" '
                "by an English pop singer that has sold more than how many records worldwide?")
    assert quoted(question) == ["Wonderland by Night", "A Man Without Love"]
    assert required(question) == []
    assert required("no quotes at all") == []

"""CJK, kana and hangul in the BM25 index: bigrams, phrases across scripts, and the rebuild of
an index an older release tokenised. Real Tantivy on disk."""

from __future__ import annotations

from pathlib import Path

from psirag_kb.search.phrases import required
from psirag_kb.storage.scripts import ANALYZER, bigrams, segment
from psirag_kb.storage.sparse import SparseIndex

DOCS = {
    1: "東京都に住んでいます。毎朝、電車で会社へ行きます。",
    2: "京都の寺は古いです。",
    3: "Python是一种广泛使用的编程语言，由Guido创建。",
    4: "한국어 문서를 검색합니다. 검색 엔진은 빠릅니다.",
    5: "The running dogs were chasing cats through the gardens.",
}


def index(tmp_path: Path) -> SparseIndex:
    sparse = SparseIndex(tmp_path / "bm25")
    sparse.rebuild(1, [[(i, text, f"/docs/{i}.txt") for i, text in DOCS.items()]])
    return sparse


def test_runs_become_overlapping_bigrams_and_latin_text_is_untouched() -> None:
    assert bigrams("東京都") == "東京 京都"
    assert bigrams("京") == "京"
    assert segment("Python是一个") == "Python 是一 一个 "
    assert segment("running dogs") == "running dogs"
    assert segment("café résumé") == "café résumé"  # Latin with accents: not a run
    assert segment("住んで・いる") == " 住ん んで ・ いる "  # the middle dot separates
    assert segment("ハングル 한글") == " ハン ング グル   한글 "


def test_a_few_characters_of_a_chinese_japanese_or_korean_document_find_it(
        tmp_path: Path) -> None:
    sparse = index(tmp_path)
    assert sparse.search("编程语言", 5)[0].tolist() == [3]
    assert sparse.search("電車で会社", 5)[0].tolist()[0] == 1
    assert sparse.search("검색 엔진", 5)[0].tolist() == [4]
    assert sparse.search("京都", 5)[0].tolist()[0] == 2  # 1 holds 東京都 (its bigram 京都)
    assert sparse.search("京", 5)[0].tolist() == []  # a lone character is a unigram
    # English keeps its stemming
    assert sparse.search("run dog chase", 5)[0].tolist() == [5]


def test_phrases_must_occur_as_written_across_scripts(tmp_path: Path) -> None:
    sparse = index(tmp_path)
    assert sparse.phrase_hits("毎朝、電車で会社へ行きます", 5)[0].tolist() == [1]
    assert sparse.phrase_hits("会社へ毎朝", 5)[0].tolist() == []  # the bigrams, not in a row
    assert sparse.phrase_hits("Python是一种", 5)[0].tolist() == [3]
    assert sparse.phrase_hits("python 是一种", 5)[0].tolist() == [3]
    assert sparse.phrase_hits("由Guido创建", 5)[0].tolist() == [3]
    assert sparse.search("语言", 5, phrases=["编程语言"])[0].tolist() == [3]
    assert sparse.search("语言", 5, phrases=["语言编程"])[0].tolist() == []
    assert sparse.search("검색", 5, phrases=["문서를 검색"])[0].tolist() == [4]


def test_a_chinese_question_with_a_quoted_phrase_is_a_search() -> None:
    assert required("“编程语言” 创建") == ["编程语言"]
    # a long question that quotes a name in passing: its words outside count as bigrams
    assert required("“编程语言”是由哪一位荷兰程序员在哪一年创建的") == []


def test_an_index_of_the_previous_tokenisation_is_stale_when_opened(tmp_path: Path) -> None:
    sparse = index(tmp_path)
    assert sparse.generation == 1 and sparse.analyzer() == ANALYZER
    sparse.close()
    del sparse
    again = SparseIndex(tmp_path / "bm25")
    assert again.generation == 1  # same tokenisation: kept
    again.close()
    del again
    (tmp_path / "bm25" / "ANALYZER").unlink()  # what the previous release left
    old = SparseIndex(tmp_path / "bm25")
    assert old.generation == -1 and old.analyzer() is None
    old.rebuild(2, [[(1, DOCS[1], None)]])
    assert old.analyzer() == ANALYZER and old.generation == 2

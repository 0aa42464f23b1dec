"""A phrase of Chinese, Japanese or Korean text finds its document first by BM25 and in the
default mode; an index the previous release tokenised is rebuilt at open.
Real files (lessons of the Vim tutor, tests/fixtures/cjk), the real MiniLM, DuckDB, Tantivy and
hnswlib."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import psirag_kb.storage.sparse as sparse_module
from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.storage.scripts import ANALYZER

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cjk"
PHRASES = {  # a phrase of each lesson's body (not its title), the file that holds it
    "ノーマルモードにてテキストを挿入するには": "vimtutor-ja-1.4.txt",
    "足りない テキスト": "vimtutor-ja-1.4.txt",
    "可以按下 x 键来删除光标所在位置的字符": "vimtutor-zh-1.3.txt",
    "直到句子修正为止": "vimtutor-zh-1.3.txt",
    "텍스트를 추가하는 데 익숙해졌다면": "vimtutor-ko-1.5.txt",
    "문장 내 어디에 있던 상관없습니다": "vimtutor-ko-1.5.txt",
}


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cjk")
    for path in FIXTURES.glob("*.txt"):
        shutil.copy(path, root / path.name)
    return root


@pytest.fixture(scope="module")
def kb(tmp_path_factory, docs, minilm):
    config = Config().with_data_dir(tmp_path_factory.mktemp("data") / "data")
    kb = KnowledgeBase(config, embedder=minilm)
    kb.ingest([docs])
    yield kb
    kb.close()


def first(kb: KnowledgeBase, query: str, mode: str | None = None) -> str:
    results = kb.query(query, mode=mode)["results"]
    return Path(results[0]["source"]).name if results else ""


@pytest.mark.parametrize("mode", ["sparse", None, "hybrid"])
@pytest.mark.parametrize("phrase", list(PHRASES))
def test_a_phrase_finds_its_lesson_first(kb: KnowledgeBase, phrase: str,
                                         mode: str | None) -> None:
    assert first(kb, phrase, mode) == PHRASES[phrase]


@pytest.mark.parametrize("mode", ["sparse", None, "dense"])
def test_a_quoted_chinese_phrase_must_occur(kb: KnowledgeBase, mode: str | None) -> None:
    assert {Path(r["source"]).name for r in kb.query('"光标所在位置"', mode=mode)["results"]} \
        == {"vimtutor-zh-1.3.txt"}
    found = kb.query('"位置所在光标"', mode=mode)  # the same characters in another order
    assert found["results"] == [] and "note" in found


def test_a_pasted_sentence_is_a_certain_phrase_hit(kb: KnowledgeBase) -> None:
    """Dense search (English MiniLM) knows little of Korean: the phrase hit puts it first."""
    sentence = "내용을 모두 입력한 후 <ESC>를 눌러 명령 모드로 돌아갑니다."
    ids, _ = kb.stores.sparse.phrase_hits(sentence, 11)
    assert len(ids) == 1
    assert first(kb, sentence, "tree") == "vimtutor-ko-1.5.txt"


def test_an_index_of_the_previous_release_is_rebuilt_when_opened(
        tmp_path: Path, docs: Path, minilm, monkeypatch: pytest.MonkeyPatch) -> None:
    """The previous release indexed a CJK run as one token and wrote no ANALYZER file."""
    config = Config().with_data_dir(tmp_path / "data")
    with monkeypatch.context() as patch:
        patch.setattr(sparse_module, "segment", lambda text: text)
        with KnowledgeBase(config, embedder=minilm) as old:
            old.ingest([docs])
            assert first(old, "句子修正", "sparse") == ""  # what was reported
    (tmp_path / "data" / "bm25" / "ANALYZER").unlink()
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert first(kb, "句子修正", "sparse") == "vimtutor-zh-1.3.txt"
        assert (tmp_path / "data" / "bm25" / "ANALYZER").read_text() == ANALYZER

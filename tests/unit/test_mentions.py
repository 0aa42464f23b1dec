"""The title index and the mention list: a name written in a passage finds the document it
titles (real Tantivy in tmp_path)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tantivy

from psirag_kb.ingest.context import SEPARATOR
from psirag_kb.search.mentions import mention_list
from psirag_kb.storage import titles
from psirag_kb.storage.sparse import SparseIndex
from psirag_kb.storage.titles import short_forms, title_key, title_keys

DOCS = [
    (1, "Marie Curie\nShe was born in Warsaw and worked in Paris.", None),
    (2, "Warsaw\nWarsaw is the capital of Poland, on the Vistula.", None),
    (3, "Warsaw\nIts old town was rebuilt after the war.", None),
    (4, "Brother (Pearl Jam song)\nA song recorded in Seattle.", None),
    (5, "Lakes > Fishing\nTrout are caught in the spring.", "/notes/lakes.md"),
    (6, "Vistula\nThe longest river of Poland flows through Warsaw.",
     "/notes/rivers/Vistula river.md"),
    (7, "Johnnycake, West Virginia\nAn unincorporated community.", None),
]


@pytest.fixture
def sparse(tmp_path: Path) -> SparseIndex:
    index = SparseIndex(tmp_path / "bm25")
    index.rebuild(1, [DOCS])
    return index


def test_a_title_key_ignores_case_punctuation_and_spacing() -> None:
    assert title_key("Person - centered  Therapy") == title_key("person-centered therapy")
    assert title_key("  ") == ""


def test_a_chunk_is_keyed_by_its_title_its_file_name_and_their_short_forms() -> None:
    assert title_keys("Marie Curie\nShe was born", None) == ["marie curie"]
    assert title_keys("Lakes > Fishing\nTrout", "/notes/lakes.md") == ["lakes"]
    assert title_keys("Brother (Pearl Jam song)\nA song", None) == [
        "brother pearl jam song", "brother"]
    assert "johnnycake" in title_keys("Johnnycake, West Virginia\nA place", None)
    assert short_forms("Vistula") == ["Vistula"] * 3


def test_text_without_a_title_line_is_keyed_by_its_file_name_alone() -> None:
    long_line = "word " * 40
    assert title_keys(long_line + "\nmore", "/a/Notes on rivers.txt") == ["notes on rivers"]
    assert title_keys("one line only", None) == []


def test_the_header_separator_is_the_ingest_one() -> None:
    assert titles.SEPARATOR == SEPARATOR


def test_a_name_finds_every_passage_of_the_document_it_titles(sparse: SparseIndex) -> None:
    ids, scores = sparse.titled(["WARSAW"], "capital of Poland", 10)
    assert ids.tolist() == [2, 3]  # both passages, the one about the question first
    assert scores[0] > scores[1]


def test_names_find_notes_by_file_name_and_short_forms(sparse: SparseIndex) -> None:
    assert sparse.titled(["Vistula river"], "", 10)[0].tolist() == [6]
    assert sparse.titled(["Brother"], "song", 10)[0].tolist() == [4]
    assert sparse.titled(["Johnnycake"], "community", 10)[0].tolist() == [7]
    assert set(sparse.titled(["Lakes", "Marie Curie"], "trout", 10)[0].tolist()) == {1, 5}


def test_a_name_that_titles_nothing_finds_nothing(sparse: SparseIndex) -> None:
    assert sparse.titled(["Paris"], "Paris", 10)[0].size == 0  # written, but no title
    assert sparse.titled(["Fishing"], "", 10)[0].size == 0  # a heading, not the title
    assert sparse.titled([], "Warsaw", 10)[0].size == 0
    assert sparse.titled(["Warsaw"], "Warsaw", 10, within=[])[0].size == 0


def test_the_lookup_stays_in_the_scope(sparse: SparseIndex) -> None:
    names = ["Warsaw", "Vistula", "Lakes"]
    assert sparse.titled(names, "", 10, within=["/notes/rivers"])[0].tolist() == [6]
    assert sparse.titled(names, "", 1)[0].size == 1


def test_the_mention_list_waits_while_bm25_is_rebuilt(sparse: SparseIndex) -> None:
    engine = SimpleNamespace(sparse=sparse, stale={})
    assert mention_list(engine, ["Warsaw"], "Poland", 10).tolist() == [2, 3]
    scope = SimpleNamespace(paths=("/notes",))
    assert mention_list(engine, ["Warsaw", "Vistula"], "", 10, scope).tolist() == [6]
    engine.stale["bm25"] = {}
    assert mention_list(engine, ["Warsaw"], "Poland", 10).dtype == np.int64
    assert mention_list(engine, ["Warsaw"], "Poland", 10).size == 0


def test_an_index_without_titles_is_rebuilt_with_them(tmp_path: Path) -> None:
    builder = tantivy.SchemaBuilder()  # the schema of the release before titles
    builder.add_integer_field("id", stored=True, indexed=True, fast=True)
    builder.add_text_field("text", stored=False, tokenizer_name="en_stem")
    builder.add_text_field("scope", stored=False, tokenizer_name="raw", index_option="basic")
    (tmp_path / "bm25").mkdir()
    old = tantivy.Index(builder.build(), path=str(tmp_path / "bm25"))
    writer = old.writer(heap_size=15_000_000, num_threads=1)
    writer.add_document(tantivy.Document(id=2, text="Warsaw\nthe capital"))
    writer.commit()
    writer.wait_merging_threads()
    del writer, old
    (tmp_path / "bm25" / "GENERATION").write_text("1")
    sparse = SparseIndex(tmp_path / "bm25")
    assert sparse.generation == -1 and sparse.count() == 0  # stale: rebuilt from DuckDB
    sparse.rebuild(1, [DOCS])
    assert sparse.titled(["Warsaw"], "capital", 10)[0].tolist() == [2, 3]

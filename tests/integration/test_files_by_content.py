"""A folder of the kind a machine's own documentation holds, end to end with the real stores and
model: dotless text, legacy encodings, compressed documents and manual pages are indexed; a
manual page's NAME line finds its page first; binary files and archives are skipped saying why."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from psirag_kb.config import Config
from psirag_kb.ingest.documents import read_document
from psirag_kb.kb import KnowledgeBase
from psirag_kb.storage.migrations import SCHEMA_VERSION

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TEXTFILES = FIXTURES / "textfiles"
NAME_LINES = {
    "ls.1.gz": "list directory contents",
    "gzip.1.gz": "compress or expand files",
    "xargs.1.gz": "build and execute command lines from standard input",
    "true.1.gz": "do nothing, successfully",
    "yes.1.gz": "output a string repeatedly until killed",
    "ssh-keyscan.1.gz": "gather SSH public keys from servers",
}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, minilm) -> Iterator[
        tuple[KnowledgeBase, Any, Path]]:
    """One knowledge base over copies of the text-file fixtures, a gzipped PDF, a binary blob
    and an archive."""
    root = tmp_path_factory.mktemp("bycontent")
    folder = root / "doc"
    for part in ("man", "git", "tutor"):
        shutil.copytree(TEXTFILES / part, folder / part)
    (folder / "manual.pdf.gz").write_bytes(gzip.compress((FIXTURES / "sample.pdf").read_bytes()))
    (folder / "blob").write_bytes(b"\x00\x01binary" * 100)
    (folder / "src.tar.gz").write_bytes(gzip.compress(b"x" * 1000))
    config = Config().with_data_dir(root / "data")
    with KnowledgeBase(config, embedder=minilm) as kb:
        report = kb.ingest([folder])
        yield kb, report, folder


def test_text_in_any_name_and_encoding_is_indexed(indexed) -> None:
    kb, report, folder = indexed
    problems = {Path(p["path"]).name: p["reason"] for p in kb.status()["problems"]}
    assert problems == {
        "blob": "binary content (NUL bytes)",
        "src.tar.gz": "archive of many files (.tar.gz): archives are not unpacked; unpack it "
                      "into a watched folder to index its files",
    }
    expected = len(NAME_LINES) + 4 + 4 + 1  # pages, git docs and scripts, tutors, the PDF
    assert report.added == expected and report.skipped == 2 and report.failed == 0
    assert kb.status()["files"]["indexed"] == expected


def test_the_detected_encoding_is_recorded(indexed) -> None:
    kb, _, folder = indexed
    encodings = kb.status()["encodings"]
    assert encodings.get("cp1250") == 1
    assert sum(encodings.values()) == 4  # the four tutors; UTF-8 files are not counted
    rows = dict(kb.stores.store.db.cursor().execute("SELECT path, encoding FROM files").fetchall())
    assert rows[str(folder / "tutor" / "tutor.cs.cp1250")] == "cp1250"
    assert rows[str(folder / "git" / "copyright")] == "utf-8"
    assert rows[str(folder / "manual.pdf.gz")] == ""


@pytest.mark.parametrize(("name", "line"), sorted(NAME_LINES.items()))
def test_a_name_line_finds_its_page_first(indexed, name: str, line: str) -> None:
    kb, _, folder = indexed
    for mode in ("hybrid", "sparse"):
        results = kb.query(line, mode=mode, k=5)["results"]
        assert results[0]["source"] == str(folder / "man" / name), (
            mode, [r["source"] for r in results])


def test_page_sections_head_their_chunks(indexed) -> None:
    kb, _, folder = indexed
    path = folder / "man" / "ls.1.gz"
    headings = read_document(path).headings
    rows = kb.stores.store.db.cursor().execute(
        "SELECT c.line_first, c.context FROM chunks c JOIN files f ON f.id = c.file_id "
        "WHERE f.path = ? ORDER BY c.ordinal", [str(path)]).fetchall()
    assert len(rows) > 3
    for line, header in rows:
        above = [h.text for h in headings if h.line < line]
        # the title, then the sections open there (a subsection under its section)
        assert header == "LS(1)" if not above else (
            header.startswith("LS(1) > ") and header.endswith(f" > {above[-1]}")), (line, header)
    top = kb.query("print C-style escapes for nongraphic characters", mode="hybrid",
                   k=3)["results"][0]
    assert top["source"] == str(path)


def test_a_gzipped_pdf_keeps_its_pages(indexed) -> None:
    kb, _, folder = indexed
    rows = kb.stores.store.db.cursor().execute(
        "SELECT c.location FROM chunks c JOIN files f ON f.id = c.file_id WHERE f.path = ?",
        [str(folder / "manual.pdf.gz")]).fetchall()
    assert rows and all('"page' in row[0] for row in rows)


def test_a_schema_4_database_gains_the_encoding_column(tmp_path: Path, minilm) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.txt").write_text("The boiler was serviced in March.\n")
    config = Config().with_data_dir(tmp_path / "data")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([docs])
    db = duckdb.connect(str(tmp_path / "data" / "kb.duckdb"))
    db.execute("DROP INDEX IF EXISTS files_path_unique")
    db.execute("DROP INDEX IF EXISTS files_id")
    db.execute("ALTER TABLE files DROP COLUMN encoding")
    db.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    db.close()
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert kb.stores.store.meta()["schema_version"] == str(SCHEMA_VERSION)
        assert kb.ingest([docs]).unchanged == 1  # nothing is read again
        (docs / "legacy.txt").write_bytes("Příliš žluťoučký kůň úpěl ďábelské ódy.\n"
                                          .encode("cp1250"))
        kb.ingest([docs])
        assert kb.status()["encodings"] == {"cp1250": 1}


def test_a_binary_file_is_not_sniffed_again_until_it_changes(indexed, monkeypatch) -> None:
    kb, _, folder = indexed
    from psirag_kb.ingest import reading

    looked: list[str] = []
    real = reading.unread_reason
    monkeypatch.setattr(reading, "unread_reason",
                        lambda path, *a: looked.append(Path(path).name) or real(path, *a))
    report = kb.ingest([folder])
    assert "blob" not in looked and "src.tar.gz" in looked  # a name costs nothing to judge
    assert report.skipped == 1 and report.added == report.updated == 0
    (folder / "blob").write_bytes(b"now it is text\n")
    report = kb.ingest([folder])
    assert report.added + report.updated == 1 and "blob" in looked

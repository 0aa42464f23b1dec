"""Office, e-book, mail and notebook files end to end: indexed, found first, with locations."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import scanned_pdf
from daemon_helpers import api, wait_for

from psirag_kb.config import Config
from psirag_kb.ingest.documents import RECENT_WRITE_S
from psirag_kb.ingest.formats import STRUCTURED_KINDS, join_locations
from psirag_kb.kb import KnowledgeBase
from psirag_kb.locations import place
from psirag_kb.service.daemon import Daemon
from psirag_kb.serving.shapes import search_result
from psirag_kb.storage.migrations import SCHEMA_VERSION

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
DOCS = FIXTURES / "docs"
ENCRYPTED = {
    "testWORD_protected_passtika.docx": "encrypted .docx (password-protected)",
    "testEXCEL_protected_passtika.xlsx": "encrypted .xlsx (password-protected)",
    "testODTEncrypted.odt": "encrypted .odt (password-protected)",
}
READABLE = sorted(p.name for p in DOCS.iterdir()
                  if p.name not in ENCRYPTED and p.suffix.lower() in STRUCTURED_KINDS)

# (file, a distinctive sentence of its body, what the top result's location must cover)
SENTENCES: list[tuple[str, str, dict[str, Any]]] = [
    ("testWORD.docx", "This is a sample Microsoft Word Document.", {"paragraph": 7}),
    ("testWORD_various.docx", "Bold italic underline superscript subscript strikethrough",
     {"paragraph": 3}),
    ("testPPT.pptx", "This is a test file data with the same content as every other file "
     "being tested for tika content parsing.", {"slide": 2}),
    ("testPPT_various.pptx", "This is a footnote.", {"slide": 1}),
    ("testEXCEL.xlsx", "Written and saved in Microsoft Excel X for Mac Service Release 1.",
     {"sheet": "Feuil1", "row": 22}),
    ("test-columnar.xlsx", "Description of the Row: This is row 7 of 10",
     {"sheet": "testing", "row": 9}),
    ("example.odt", "This is the first paragraph of the second title.", {"paragraph": 6}),
    ("table.odt", "a: fixed; b: 20; c: 30; d: 40", {"paragraph": 4, "heading": "First table"}),
    ("example.odp", "Slide 2 This is the second page", {"slide": 2}),  # its title and body
    ("countrystatistics.ods", "Country: Austria; Population in millions: 8.3",
     {"sheet": "Population", "row": 2}),
    ("two_sheets.ods", "col B: a text; col D: another", {"sheet": "sheet2", "row": 3}),
    ("testEPUB.epub", "This is the text for chapter Two",
     {"section": "chapters/chapter2.html", "paragraph": 2}),
    # (a sentence of this body that names no topic matched every file's chunks at cosine 0.15,
    # and a chunk header ("MIME registry use cases") tipped it out of the top 5)
    ("testMSG.msg", "making the type detection code more modular and extensible",
     {"part": "body"}),
    ("testMSG_att_doc.msg", "Subject: test pièce jointe 1", {"part": "header"}),
    ("testEmailWithPNGAtt.eml", "This email has a PNG attachment included in it",
     {"part": "body"}),
    ("testRFC822_multipart_attachments.eml", "This is test email for EML1", {"part": "body"}),
    ("test4.ipynb", "from __future__ import annotations", {"cell": 4}),
    ("test3.ipynb", "Nunc luctus bibendum felis dictum sodales.", {"cell": 2}),
]
SAME_TEXT = {"test3.ipynb": "test4.ipynb", "testPPT_various.pptx": "testWORD_various.docx",
             "testWORD_various.docx": "testPPT_various.pptx"}
"""Twins: test3.ipynb is test4.ipynb's notebook in nbformat 3 (all its text is in test4 too), and
Tika's "various" slide holds the text of its "various" Word document: either twin may come first
for a sentence of the other."""


def covers(location: dict[str, Any] | None, expected: dict[str, Any]) -> bool:
    """Whether a (merged) location covers the expected one: equal values, or a number inside
    the range its plural key holds ({"row": 9} inside {"rows": [2, 21]})."""
    if not location:
        return False
    for key, value in expected.items():
        if location.get(key) == value:
            continue
        plural = location.get(key + "s")
        if not (isinstance(value, int) and isinstance(plural, list)
                and plural[0] <= value <= plural[1]):
            return False
    return True


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, minilm) -> Iterator[
        tuple[KnowledgeBase, Any, Path]]:
    """One knowledge base over a copy of every readable fixture (docs/) and the encrypted ones
    (locked/), plus sample.pdf."""
    root = tmp_path_factory.mktemp("formats")
    folder, locked = root / "docs", root / "locked"
    folder.mkdir()
    locked.mkdir()
    for name in READABLE:
        shutil.copy(DOCS / name, folder / name)
    shutil.copy(FIXTURES / "sample.pdf", folder / "sample.pdf")
    for name in ENCRYPTED:
        shutil.copy(DOCS / name, locked / name)
    config = Config().with_data_dir(root / "data")
    with KnowledgeBase(config, embedder=minilm) as kb:
        report = kb.ingest([folder, locked])
        yield kb, report, root


def test_every_document_is_indexed_and_encrypted_ones_are_skipped(indexed) -> None:
    kb, report, root = indexed
    assert report.added == len(READABLE) + 1
    assert report.failed == 0 and report.skipped == len(ENCRYPTED)
    status = kb.status()
    assert status["files"] == {"indexed": len(READABLE) + 1, "skipped": len(ENCRYPTED),
                               "failed": 0}
    assert {p["path"]: (p["state"], p["reason"]) for p in status["problems"]} == {
        str(root / "locked" / name): ("skipped", reason) for name, reason in ENCRYPTED.items()}


@pytest.mark.parametrize(("name", "sentence", "expected"), SENTENCES,
                         ids=[name for name, _, _ in SENTENCES])
def test_sentence_finds_its_file_first_with_its_location(indexed, name: str, sentence: str,
                                                         expected: dict[str, Any]) -> None:
    kb, _, root = indexed
    results = kb.query(sentence, mode="hybrid", k=5)["results"]
    path = str(root / "docs" / name)
    allowed = {path} | ({str(root / "docs" / SAME_TEXT[name])} if name in SAME_TEXT else set())
    assert results[0]["source"] in allowed, [r["source"] for r in results]
    assert results[0]["location"], results[0]
    words = " ".join(sentence.split())
    found = next(r for r in results if r["source"] == path and words in " ".join(r["text"].split()))
    assert covers(found["location"], expected), found["location"]
    fetched = kb.chunk(found["chunk_id"], neighbours=1)
    parts = [kb.chunk(i)["location"] for i in found["chunk_ids"]]  # touching chunks merge
    assert fetched["location"] in parts and join_locations(parts) == found["location"]
    assert all("location" in n for n in fetched["neighbours"])


def test_pdf_results_carry_their_page(indexed) -> None:
    kb, _, root = indexed
    top = kb.query("Leaves sit at the same depth.", mode="hybrid", k=3)["results"][0]
    assert top["source"] == str(root / "docs" / "sample.pdf")
    assert covers(top["location"], {"page": 2})
    assert place(top) == f"{top['source']} " + ("p. 2" if "page" in top["location"] else "pp. 1-2")


def test_text_files_have_no_location(kb_fake: KnowledgeBase, tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n")
    kb_fake.ingest([tmp_path / "notes"])
    top = kb_fake.query("otters sleep", mode="sparse", k=1)["results"][0]
    assert top["location"] is None and top["lines"] == [1, 3]
    assert place(top) == f"{tmp_path / 'notes' / 'a.md'}:1-3"


@pytest.fixture
def kb_fake(config: Config, fake_embedder) -> Iterator[KnowledgeBase]:
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        yield kb


def _age(path: Path, seconds: float) -> None:
    """Make a file look last modified `seconds` ago."""
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def test_damaged_files_are_recorded_never_fatal(kb_fake: KnowledgeBase, tmp_path: Path) -> None:
    folder = tmp_path / "damaged"
    folder.mkdir()
    word = (DOCS / "testWORD.docx").read_bytes()
    (folder / "old-half.docx").write_bytes(word[: len(word) // 2])
    _age(folder / "old-half.docx", RECENT_WRITE_S + 60)
    (folder / "new-half.pptx").write_bytes((DOCS / "testPPT.pptx").read_bytes()[:5000])
    (folder / "photo.xlsx").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    (folder / "notes.ipynb").write_text('{"cells": [')
    (folder / "locked.odt").write_bytes((DOCS / "testODTEncrypted.odt").read_bytes())
    shutil.copy(DOCS / "example.odt", folder / "good.odt")
    report = kb_fake.ingest([folder])
    assert report.added == 1 and report.failed == 1 and report.skipped == 4
    problems = {Path(p["path"]).name: (p["state"], p["reason"])
                for p in kb_fake.status()["problems"]}
    assert set(problems) == {"old-half.docx", "new-half.pptx", "photo.xlsx", "notes.ipynb",
                             "locked.odt"}
    assert problems["old-half.docx"][0] == "skipped"
    assert problems["old-half.docx"][1].startswith("damaged .docx: truncated or corrupt zip")
    state, reason = problems["new-half.pptx"]
    assert state == "failed" and "still being written" in reason and "will retry" in reason
    assert problems["photo.xlsx"] == ("skipped",
                                      "damaged .xlsx: not a zip file (it is a PNG image)")
    assert problems["notes.ipynb"][1].startswith("damaged .ipynb: not JSON")
    assert problems["locked.odt"] == ("skipped", "encrypted .odt (password-protected)")
    assert kb_fake.query("first paragraph of the second title", mode="sparse", k=1)[
        "results"][0]["source"] == str(folder / "good.odt")

    (folder / "new-half.pptx").write_bytes((DOCS / "testPPT.pptx").read_bytes())  # finished
    report = kb_fake.ingest([folder])
    assert report.updated >= 1
    assert "new-half.pptx" not in {Path(p["path"]).name for p in kb_fake.status()["problems"]}
    top = kb_fake.query("tika content parsing", mode="sparse", k=1)["results"][0]
    assert top["source"] == str(folder / "new-half.pptx") and covers(top["location"], {"slide": 2})


def test_partly_scanned_pdf_says_how_many_pages_need_ocr(config: Config, fake_embedder,
                                                          tmp_path: Path) -> None:
    from pypdf import PdfWriter

    folder = tmp_path / "scans"
    folder.mkdir()
    writer = PdfWriter()
    writer.append(str(FIXTURES / "sample.pdf"))
    writer.append(str(scanned_pdf(tmp_path / "page.pdf", ["The ferry leaves the harbour at "
                                                          "noon every Sunday."])))
    with open(folder / "mixed.pdf", "wb") as fh:
        writer.write(fh)
    scanned_pdf(folder / "letter.pdf", ["Dear reader, the orchard is in bloom."])
    off = config.replace("ingest", ocr=False)
    with KnowledgeBase(off, embedder=fake_embedder) as kb:
        report = kb.ingest([folder])
        assert report.added == 1 and report.skipped == 1
        problems = {Path(p["path"]).name: p for p in kb.status()["problems"]}
        assert problems["mixed.pdf"]["state"] == "indexed"
        assert problems["mixed.pdf"]["reason"] == (
            "1 of 3 pages needs OCR (no text layer); OCR is off ([ingest] ocr = false); turn "
            "it on to read it")
        assert problems["letter.pdf"]["state"] == "skipped"
        assert problems["letter.pdf"]["reason"].startswith("needs OCR (no text layer")
        assert kb.status()["files"]["indexed"] == 1
        top = kb.query("Leaves sit at the same depth", mode="sparse", k=1)["results"][0]
        assert covers(top["location"], {"page": 2})
    if shutil.which("tesseract") is None:
        return  # the OCR half below needs tesseract
    with KnowledgeBase(config, embedder=fake_embedder) as kb:  # OCR on: both are read again
        report = kb.ingest([folder])
        assert report.updated == 2 and report.unchanged == 0
        assert kb.status()["problems"] == []
        top = kb.query("ferry harbour noon Sunday", mode="sparse", k=1)["results"][0]
        assert top["source"] == str(folder / "mixed.pdf") and covers(top["location"], {"page": 3})
        top = kb.query("orchard in bloom", mode="sparse", k=1)["results"][0]
        assert top["source"] == str(folder / "letter.pdf") and top["location"] == {"page": 1}
        assert kb.ingest([folder]).unchanged == 2  # read once, not at every scan


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract is not installed")
def test_scanned_pdf_is_found_by_ocr_with_its_page(indexed_scan) -> None:
    kb, path = indexed_scan
    top = kb.query("How many gulls did the lighthouse keeper count?", mode="hybrid",
                   k=3)["results"][0]
    assert top["source"] == str(path) and covers(top["location"], {"page": 2})
    assert "lighthouse keeper counted nine hundred gulls" in top["text"]


@pytest.fixture
def indexed_scan(config: Config, minilm, tmp_path: Path) -> Iterator[tuple[KnowledgeBase, Path]]:
    """A KB over a two-page scanned PDF (no text layer) and a note."""
    folder = tmp_path / "scans"
    folder.mkdir()
    path = scanned_pdf(folder / "logbook.pdf", [
        "Monday: calm sea, light wind from the west.",
        "The lighthouse keeper counted nine hundred gulls on the rocks.",
    ])
    (folder / "note.md").write_text("Gulls are noisy seabirds.\n")
    with KnowledgeBase(config, embedder=minilm) as kb:
        report = kb.ingest([folder])
        assert report.added == 2 and report.skipped == 0 and report.problems == []
        yield kb, path


def test_old_database_gains_locations_without_embedding_again(config: Config, fake_embedder,
                                                               tmp_path: Path) -> None:
    folder = tmp_path / "papers"
    folder.mkdir()
    shutil.copy(FIXTURES / "sample.pdf", folder / "sample.pdf")
    (folder / "a.md").write_text("Plain notes about kestrels hovering over fields.\n")
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        kb.ingest([folder])
        chunks = kb.stores.store.chunk_count()
    db = duckdb.connect(str(config.data_dir / "kb.duckdb"))  # as schema version 1 left it
    for name in ("chunks_id", "chunks_file"):
        db.execute(f"DROP INDEX {name}")
    db.execute("ALTER TABLE chunks DROP COLUMN location")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.close()
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        assert kb.stores.store.meta()["schema_version"] == str(SCHEMA_VERSION)
        top = kb.query("Leaves sit at the same depth", mode="sparse", k=1)["results"][0]
        assert top["location"] is None  # not read again yet
        report = kb.ingest([folder])
        assert (report.updated, report.unchanged, report.chunks_embedded) == (1, 1, 0)
        assert kb.stores.store.chunk_count() == chunks
        top = kb.query("Leaves sit at the same depth", mode="sparse", k=1)["results"][0]
        assert covers(top["location"], {"page": 2})
        assert kb.ingest([folder]).unchanged == 2


def test_half_written_docx_is_indexed_once_complete(config: Config, fake_embedder,
                                                     tmp_path: Path) -> None:
    folder = tmp_path / "watched"
    folder.mkdir()
    config = config.replace("watch", folders=[str(folder)], quiet_period_s=0.2)
    daemon = Daemon(config.replace("api", port=0), embedder=fake_embedder)
    daemon.start()
    try:
        data = (DOCS / "testWORD.docx").read_bytes()
        target = folder / "report.docx"

        def problem() -> dict[str, Any] | None:
            status = api(daemon, "GET", "/api/status")[1]
            return next((p for p in status["problems"] if p["path"] == str(target)), None)

        # a writer that closes the file between its halves (a file held open is not read
        # before its close at all: tests/integration/test_watch_close.py)
        target.write_bytes(data[: len(data) // 2])
        seen = wait_for(problem)  # read at its close: cut short, so retried
        assert seen["state"] == "failed" and "will retry" in seen["reason"], seen
        with open(target, "ab") as fh:
            fh.write(data[len(data) // 2:])

        def top() -> dict[str, Any] | None:
            code, body = api(daemon, "POST", "/api/query",
                             {"text": "sample Microsoft Word Document", "mode": "sparse", "k": 1})
            assert code == 200, body
            hits = body["results"]
            return hits[0] if hits and hits[0]["source"] == str(target) else None

        result = wait_for(top)
        assert problem() is None
        assert covers(result["location"], {"paragraph": 7}), result  # the API passes it on
        passage = search_result({"query": "q", "mode": "sparse", "results": [result]})
        assert passage["results"][0]["location"] == result["location"]  # MCP's search tool
    finally:
        daemon.stop()

"""A reader's unexpected exception (a bug, not a damaged file) marks the file failed with the
reason and keeps its previous chunks and vectors; the next ingest retries it.

Real KnowledgeBase, DuckDB, Tantivy, hnswlib and the MiniLM model; the .docx reader is made to
raise as a bug in it would.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import psirag_kb.ingest.formats.office as office
from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase

DOCS = Path(__file__).resolve().parent.parent / "fixtures" / "docs"
SENTENCE = "This is a sample Microsoft Word Document."
NOTE = "The walrus hauls out on the ice floe to rest between dives."


@pytest.fixture
def kb(config: Config, minilm) -> Iterator[KnowledgeBase]:
    with KnowledgeBase(config, embedder=minilm) as kb:
        yield kb


def _broken_reader(data: bytes, kind: str = "docx") -> Any:
    raise RuntimeError("the reader tripped over its own feet")


def _problems(kb: KnowledgeBase) -> dict[str, tuple[str, str]]:
    return {Path(p["path"]).name: (p["state"], p["reason"]) for p in kb.status()["problems"]}


def _sources(kb: KnowledgeBase, text: str, mode: str) -> list[str]:
    return [Path(r["source"]).name for r in kb.query(text, mode=mode, k=3)["results"]]


def _touch_zip(path: Path) -> None:
    """Change a .docx's bytes without changing its text (a member no reader looks at)."""
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("docProps/edited.txt", "saved again")


def test_reader_exception_keeps_the_previous_chunks_and_is_retried(
        kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    word = folder / "word.docx"
    shutil.copy(DOCS / "testWORD.docx", word)
    (folder / "note.md").write_text(NOTE + "\n")
    assert kb.ingest([folder]).added == 2
    record = kb.stores.store.file(str(word))
    chunks = sorted(kb.stores.store.chunk_hashes(record.id))
    assert chunks

    _touch_zip(word)
    monkeypatch.setattr(office, "read_docx", _broken_reader)
    report = kb.ingest([folder])
    assert (report.failed, report.unchanged) == (1, 1)
    reason = ("unexpected error: RuntimeError: the reader tripped over its own feet; "
              "will retry")
    assert report.problems == [(str(word), "failed", reason)]
    assert _problems(kb) == {"word.docx": ("failed", reason)}
    assert kb.status()["files"] == {"indexed": 1, "skipped": 0, "failed": 1}
    # its text is still found by every retriever: the chunks and their vectors were kept
    assert sorted(kb.stores.store.chunk_hashes(record.id)) == chunks
    for mode in ("sparse", "dense", "hybrid"):
        assert _sources(kb, SENTENCE, mode)[0] == "word.docx", mode
    assert _sources(kb, "walrus on the ice floe", "hybrid")[0] == "note.md"

    report = kb.ingest([folder])  # still broken: still failed, still found
    assert report.failed == 1 and _sources(kb, SENTENCE, "sparse")[0] == "word.docx"

    monkeypatch.undo()  # the reader is fixed: the next ingest retries the file
    report = kb.ingest([folder])
    assert (report.updated, report.failed, report.chunks_embedded) == (1, 0, 0)
    assert report.chunks_kept == len(chunks)  # unchanged text keeps its vectors
    assert _problems(kb) == {}
    assert kb.status()["files"] == {"indexed": 2, "skipped": 0, "failed": 0}
    assert sorted(kb.stores.store.chunk_hashes(record.id)) == chunks
    assert _sources(kb, SENTENCE, "hybrid")[0] == "word.docx"


def test_reader_exception_on_a_new_file_is_reported_and_the_others_are_indexed(
        kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(DOCS / "testWORD.docx", folder / "a-word.docx")
    (folder / "b-note.md").write_text(NOTE + "\n")
    monkeypatch.setattr(office, "read_docx", _broken_reader)
    report = kb.ingest([folder])
    assert (report.added, report.failed) == (1, 1)
    state, reason = _problems(kb)["a-word.docx"]
    assert state == "failed" and reason.startswith("unexpected error: RuntimeError: ")
    assert _sources(kb, "walrus on the ice floe", "hybrid")[0] == "b-note.md"
    assert "a-word.docx" not in _sources(kb, SENTENCE, "sparse")

    monkeypatch.undo()
    assert kb.ingest([folder]).updated == 1
    assert _sources(kb, SENTENCE, "hybrid")[0] == "a-word.docx"


def _damage(path: Path) -> None:
    """Save a .docx whose document.xml is cut in the middle (a library error when parsed)."""
    with zipfile.ZipFile(DOCS / "testWORD.docx") as source:
        members = {info.filename: source.read(info) for info in source.infolist()}
    body = members["word/document.xml"]
    members["word/document.xml"] = body[: len(body) // 2]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in members.items():
            out.writestr(name, data)


def test_damaged_save_of_an_indexed_file_keeps_its_chunks(kb: KnowledgeBase,
                                                          tmp_path: Path) -> None:
    """The parser raises on a damaged save (lxml's XMLSyntaxError, wrapped as "damaged"): the
    file is failed with the reason, still found, and read again once it is repaired. A damaged
    file never indexed is skipped, as before."""
    folder = tmp_path / "docs"
    folder.mkdir()
    word = folder / "word.docx"
    shutil.copy(DOCS / "testWORD.docx", word)
    assert kb.ingest([folder]).added == 1
    record = kb.stores.store.file(str(word))
    chunks = sorted(kb.stores.store.chunk_hashes(record.id))

    _damage(word)
    _damage(folder / "never-indexed.docx")
    report = kb.ingest([folder])
    assert (report.failed, report.skipped) == (1, 1)
    state, reason = _problems(kb)["word.docx"]
    assert state == "failed"
    assert reason.startswith("damaged .docx: XMLSyntaxError: ")
    assert reason.endswith("; its previous version stays indexed")
    assert _problems(kb)["never-indexed.docx"][0] == "skipped"
    assert sorted(kb.stores.store.chunk_hashes(record.id)) == chunks
    assert _sources(kb, SENTENCE, "hybrid")[0] == "word.docx"

    shutil.copy(DOCS / "testWORD.docx", word)  # repaired
    report = kb.ingest([folder])
    assert (report.updated, report.chunks_embedded, report.chunks_kept) == (1, 0, len(chunks))
    assert set(_problems(kb)) == {"never-indexed.docx"}

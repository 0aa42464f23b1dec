"""Readers: real files in tmp_path for every file kind, skip reason and read error."""

from __future__ import annotations

import builtins
import os
import shutil
import time
from pathlib import Path

import pytest

from psirag_kb.errors import FileReadError, SkippedFile
from psirag_kb.ingest import documents
from psirag_kb.ingest.documents import (
    SUPPORTED_SUFFIXES,
    LineIndex,
    html_visible_text,
    is_supported,
    line_of,
    read_document,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def write(path: Path, content: str | bytes) -> Path:
    """Write text (UTF-8) or bytes to a file and return its path."""
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8", newline="")
    else:
        path.write_bytes(content)
    return path


def skip_reason(path: Path, **kwargs: int | bool) -> str:
    """Return the reason a file is skipped (failing when it is not)."""
    with pytest.raises(SkippedFile) as info:
        read_document(path, **kwargs)
    return info.value.reason


def test_supported_suffixes_cover_the_spec() -> None:
    for suffix in (".txt", ".md", ".rst", ".html", ".htm", ".pdf", ".json", ".csv", ".py",
                   ".ts", ".go", ".rs", ".yaml", ".toml", ".sql", ".tex", ".sh"):
        assert suffix in SUPPORTED_SUFFIXES
    assert is_supported(Path("a/B.MD"))
    assert is_supported(Path("Makefile"))
    assert not is_supported(Path("photo.jpg"))
    assert not is_supported(Path("archive.tar.gz"))


def test_plain_text_keeps_lines_and_normalises_newlines(tmp_path: Path) -> None:
    path = write(tmp_path / "notes.txt", "first line\r\nsecond line\rthird line\n")
    doc = read_document(path)
    assert doc.kind == "text"
    assert doc.text == "first line\nsecond line\nthird line\n"
    assert doc.pages is None
    assert line_of(doc.text, doc.text.index("third")) == 3


@pytest.mark.parametrize(
    ("name", "kind"),
    [("data.json", "json"), ("table.csv", "csv"), ("table.tsv", "csv"), ("tool.py", "code"),
     ("main.go", "code")],
)
def test_text_like_kinds_are_read_as_is(tmp_path: Path, name: str, kind: str) -> None:
    content = {
        "json": '{\n  "name": "psi",\n  "depth": 3\n}\n',
        "csv": "name,age\nada,36\nalan,41\n",
        "code": "def f(x):\n    return x + 1\n",
    }[kind]
    doc = read_document(write(tmp_path / name, content))
    assert doc.kind == kind
    assert doc.text == content


@pytest.mark.parametrize(
    ("name", "kind", "content", "clean"),
    [("readme.md", "markdown", "# Title\n\nSome *text*.\n", "Title\n\nSome text.\n"),
     ("guide.rst", "rst", "Title\n=====\n\nBody text.\n", "Title\n\n\nBody text.\n")],
)
def test_marked_up_kinds_are_read_as_their_visible_text(tmp_path: Path, name: str, kind: str,
                                                        content: str, clean: str) -> None:
    doc = read_document(write(tmp_path / name, content))
    assert doc.kind == kind
    assert doc.text == clean


def test_utf8_bom_is_dropped(tmp_path: Path) -> None:
    doc = read_document(write(tmp_path / "bom.txt", "\ufeffhello world\n".encode()))
    assert doc.text == "hello world\n"


def test_utf16_with_bom_is_decoded(tmp_path: Path) -> None:
    doc = read_document(write(tmp_path / "wide.txt", "héllo\nwörld\n".encode("utf-16")))
    assert doc.text == "héllo\nwörld\n"


def test_windows_1252_text_falls_back(tmp_path: Path) -> None:
    text = "Café au lait – “naïve” résumé\nsecond line\n"
    doc = read_document(write(tmp_path / "legacy.txt", text.encode("cp1252")))
    assert doc.text == text


HTML = """<!DOCTYPE html>
<html>
<head>
  <title>Not shown</title>
  <style>
    body { color: red; }
  </style>
</head>
<body>
  <h1>Heading &amp; more</h1>
  <script>
    var hidden = "secret";
  </script>
  <p>The quick
  brown fox<br>jumps over the <b>lazy</b> dog.</p>
  <!-- a comment
       over two lines -->
  <p class="x"
     id="y">zebra crossing&#10;here</p>
</body>
</html>
"""


def test_html_visible_text_keeps_line_numbers(tmp_path: Path) -> None:
    doc = read_document(write(tmp_path / "page.html", HTML))
    assert doc.kind == "html"
    source_lines = HTML.split("\n")
    for word in ("Heading", "quick", "brown", "jumps", "zebra"):
        expected = next(i for i, line in enumerate(source_lines, 1) if word in line)
        assert line_of(doc.text, doc.text.index(word)) == expected, word
    assert doc.text.count("\n") == HTML.count("\n")
    assert "Heading & more" in doc.text
    assert "lazy dog." in doc.text
    assert "zebra crossing here" in doc.text
    for hidden in ("Not shown", "color", "secret", "comment", "<", "class"):
        assert hidden not in doc.text


def test_html_without_head_or_body_tags() -> None:
    text = html_visible_text("<title>T</title>\n<p>Visible text</p>\n")
    assert text == "\nVisible text\n"


def test_html_with_only_markup_is_empty(tmp_path: Path) -> None:
    path = write(tmp_path / "blank.htm", "<html>\n<head><title>x</title></head>\n<body></body>\n")
    assert skip_reason(path) == "empty file"


def test_pdf_fixture_pages(tmp_path: Path) -> None:
    doc = read_document(FIXTURES / "sample.pdf")
    assert doc.kind == "pdf"
    assert doc.pages == [0, doc.text.index("Second page")]
    assert doc.text.startswith("Psi-RAG sample document.")
    assert "\n\nSecond page here." in doc.text
    assert "Leaves sit at the same depth." in doc.text


def test_broken_pdf_is_skipped(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.pdf", b"%PDF-1.4\nthis is not really a pdf\n")
    assert skip_reason(path).startswith("PDF could not be parsed: ")


def test_blank_pdf_is_skipped(tmp_path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    path = tmp_path / "blank.pdf"
    with open(path, "wb") as fh:
        writer.write(fh)
    assert skip_reason(path) == "no extractable text (no text layer and no images)"


def test_pdf_pages_are_locations(tmp_path: Path) -> None:
    doc = read_document(FIXTURES / "sample.pdf")
    second = doc.text.index("Second page")
    assert doc.locations([(0, 10), (second, second + 5), (5, second + 5)]) == [
        {"page": 1}, {"page": 2}, {"pages": [1, 2]}]


def _mixed_pdf(tmp_path: Path, sentence: str) -> Path:
    """sample.pdf's two text pages followed by one scanned page of `sentence`."""
    from conftest import scanned_pdf
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.append(str(FIXTURES / "sample.pdf"))
    writer.append(str(scanned_pdf(tmp_path / "scan-only.pdf", [sentence])))
    path = tmp_path / "mixed.pdf"
    with open(path, "wb") as fh:
        writer.write(fh)
    return path


def test_scanned_pdf_without_ocr_needs_ocr(tmp_path: Path) -> None:
    from conftest import scanned_pdf

    path = scanned_pdf(tmp_path / "scan.pdf", ["A scanned letter.", "Its second page."])
    reason = skip_reason(path, ocr=False)
    assert reason == ("needs OCR (no text layer on any of its 2 page(s): a scanned PDF?); "
                      "OCR is off ([ingest] ocr = false); turn it on to read it")


def test_scanned_pdf_without_tesseract_says_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import scanned_pdf

    from psirag_kb.ingest import pdf

    monkeypatch.setattr(pdf.shutil, "which", lambda name: None)
    reason = skip_reason(scanned_pdf(tmp_path / "scan.pdf", ["A scanned letter."]))
    assert reason.startswith("needs OCR (no text layer on any of its 1 page(s)")
    assert "install tesseract (apt-get install tesseract-ocr)" in reason


def test_partly_scanned_pdf_is_indexed_with_a_note(tmp_path: Path) -> None:
    doc = read_document(_mixed_pdf(tmp_path, "The ferry leaves at noon."), ocr=False)
    assert doc.note == ("1 of 3 pages needs OCR (no text layer); OCR is off ([ingest] ocr = "
                        "false); turn it on to read it")
    assert "Second page here." in doc.text and "ferry" not in doc.text
    assert len(doc.pages) == 3


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract is not installed")
def test_scanned_page_is_read_by_ocr(tmp_path: Path) -> None:
    doc = read_document(_mixed_pdf(tmp_path, "The ferry leaves the harbour at noon."))
    assert doc.note == ""
    start = doc.text.index("The ferry leaves the harbour at noon.")
    assert doc.locations([(start, start + 10)]) == [{"page": 3}]
    assert doc.text.startswith("Psi-RAG sample document.")


def test_structured_suffixes_are_supported() -> None:
    for suffix in (".docx", ".pptx", ".xlsx", ".odt", ".odp", ".ods", ".epub", ".eml", ".msg",
                   ".ipynb"):
        assert is_supported(Path(f"a/file{suffix.upper()}"))
        assert documents.kind_of(Path(f"file{suffix}")) == suffix[1:]


def test_office_file_has_segments(tmp_path: Path) -> None:
    doc = read_document(FIXTURES / "docs" / "testPPT.pptx")
    assert doc.kind == "pptx" and doc.pages is None
    start = doc.text.index("This is a test file data")
    assert doc.locations([(start, start + 20)])[0]["slide"] == 2


def _truncated_docx(tmp_path: Path, age_s: float) -> Path:
    """Half of a real .docx, last modified `age_s` seconds ago."""
    data = (FIXTURES / "docs" / "testWORD.docx").read_bytes()
    path = write(tmp_path / "half.docx", data[: len(data) // 2])
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


def test_truncated_zip_just_written_is_retried(tmp_path: Path) -> None:
    with pytest.raises(FileReadError) as info:
        read_document(_truncated_docx(tmp_path, age_s=2))
    message = str(info.value)
    assert message.startswith("damaged .docx: truncated or corrupt zip")
    assert "probably still being written (changing while read): will retry" in message


def test_old_truncated_zip_is_skipped(tmp_path: Path) -> None:
    reason = skip_reason(_truncated_docx(tmp_path, age_s=documents.RECENT_WRITE_S + 60))
    assert reason.startswith("damaged .docx: truncated or corrupt zip")


def test_other_damage_just_written_is_skipped_at_once(tmp_path: Path) -> None:
    path = write(tmp_path / "photo.docx", b"\x89PNG\r\n\x1a\n" + bytes(64))
    assert skip_reason(path) == "damaged .docx: not a zip file (it is a PNG image)"
    encrypted = tmp_path / "locked.docx"
    encrypted.write_bytes((FIXTURES / "docs" / "testWORD_protected_passtika.docx").read_bytes())
    assert skip_reason(encrypted) == "encrypted .docx (password-protected)"


def test_binary_content_with_text_suffix(tmp_path: Path) -> None:
    path = write(tmp_path / "image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200))
    assert skip_reason(path).startswith("binary content")


def test_control_characters_are_binary(tmp_path: Path) -> None:
    path = write(tmp_path / "ctl.txt", bytes(range(1, 32)) * 20 + b"some text")
    assert skip_reason(path).startswith("binary content")


def test_undecodable_text(tmp_path: Path) -> None:
    # Invalid UTF-8, and far too many high bytes (some undefined in cp1252) to be Latin-1 text.
    noise = bytes(range(0x80, 0x100)) * 8
    path = write(tmp_path / "noise.txt", b"header line\n" + noise)
    assert skip_reason(path).startswith("undecodable text")


@pytest.mark.parametrize("content", [b"", b"   \n\t\n  \r\n"])
def test_empty_and_whitespace_only(tmp_path: Path, content: bytes) -> None:
    assert skip_reason(write(tmp_path / "empty.md", content)) == "empty file"


def test_oversized_file_is_skipped_before_reading(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "huge.txt"
    with open(path, "wb") as fh:
        fh.truncate(100_000_000)  # sparse: costs no disk or memory

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an oversized file must not be opened")

    monkeypatch.setattr(documents, "open", refuse, raising=False)
    assert skip_reason(path) == "file too large (100000000 bytes > limit 20000000)"
    small = write(tmp_path / "small.txt", "x" * 200)
    assert skip_reason(small, max_bytes=100) == "file too large (200 bytes > limit 100)"


def test_unsupported_suffix(tmp_path: Path) -> None:
    # A known binary type is never read, whatever its content; a name that says nothing is
    # read by its content (tests/unit/test_sniffing.py).
    photo = write(tmp_path / "photo.jpg", "plain words")
    assert skip_reason(photo) == "unsupported file type .jpg (an image)"
    assert read_document(write(tmp_path / "noext", "text")).text == "text"


def test_vanished_file(tmp_path: Path) -> None:
    with pytest.raises(FileReadError, match="gone.txt"):
        read_document(tmp_path / "gone.txt")


def test_directory_with_text_suffix(tmp_path: Path) -> None:
    (tmp_path / "folder.txt").mkdir()
    with pytest.raises(FileReadError, match="directory"):
        read_document(tmp_path / "folder.txt")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root can read any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path / "secret.txt", "hidden")
    path.chmod(0)
    try:
        with pytest.raises(FileReadError, match="permission denied"):
            read_document(path)
    finally:
        path.chmod(0o644)


def test_permission_error_while_opening(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "locked.txt", "content")

    def deny(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(documents, "open", deny, raising=False)
    with pytest.raises(FileReadError, match="permission denied reading .*locked.txt"):
        read_document(path)


def test_file_changing_while_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "growing.txt", "first version\n")

    def open_then_append(file: Path, mode: str = "r", *args: object, **kwargs: object):
        handle = builtins.open(file, mode, *args, **kwargs)
        with builtins.open(file, "a") as writer:
            writer.write("appended by another process\n")
        return handle

    monkeypatch.setattr(documents, "open", open_then_append, raising=False)
    with pytest.raises(FileReadError, match="file changed while being read; will retry"):
        read_document(path)


def test_line_index_agrees_with_line_of() -> None:
    text = "a\nbb\n\nccc\n"
    index = LineIndex(text)
    for offset in range(len(text) + 1):
        assert index.line_of(offset) == line_of(text, offset)
    assert [index.line_start(n) for n in (1, 2, 3, 4)] == [0, 2, 5, 6]


def test_utf8_with_a_stray_invalid_byte_stays_utf8(tmp_path: Path) -> None:
    good = "Überall grüßen Bäume und Flüsse. " * 10
    path = write(tmp_path / "mostly.txt", good.encode() + b"\xff tail\n")
    doc = read_document(path)
    assert doc.text.startswith("Überall grüßen")
    assert doc.text.endswith("\ufffd tail\n")

"""Structured readers on real sample files: text, locations, tables, row blocks, damaged files."""

from __future__ import annotations

import email.message
import io
import json
import random
import zipfile
from pathlib import Path
from typing import Any

import pytest

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats import (
    STRUCTURED_KINDS,
    Extracted,
    Segment,
    location_at,
    merge_locations,
    read_structured,
    span_location,
)
from psirag_kb.ingest.formats.htmlblocks import html_blocks
from psirag_kb.ingest.formats.notebook import OUTPUT_CHARS
from psirag_kb.ingest.formats.tables import ROWS_PER_BLOCK

DOCS = Path(__file__).resolve().parent.parent / "fixtures" / "docs"
ENCRYPTED = {
    "testWORD_protected_passtika.docx": "encrypted .docx (password-protected)",
    "testEXCEL_protected_passtika.xlsx": "encrypted .xlsx (password-protected)",
    "testODTEncrypted.odt": "encrypted .odt (password-protected)",
}
READABLE = sorted(p.name for p in DOCS.iterdir() if p.name not in ENCRYPTED and
                  p.suffix.lower() in STRUCTURED_KINDS)

# (fixture, a distinctive sentence of its body, what the location covering it must contain)
SENTENCES: list[tuple[str, str, dict[str, Any]]] = [
    ("testWORD.docx", "This is a sample Microsoft Word Document.",
     {"paragraph": 7, "heading": "Heading Level 3"}),
    ("testWORD_various.docx", "Here is a text box", {"paragraph": 2}),
    ("testPPT.pptx", "This is a test file data with the same content as every other file "
     "being tested for tika content parsing.", {"slide": 2}),
    ("testPPT_various.pptx", "Suddenly some Japanese text:", {"slide": 1}),
    ("testEXCEL.xlsx", "Written and saved in Microsoft Excel X for Mac Service Release 1.",
     {"sheet": "Feuil1", "rows": [1, 22]}),
    ("test-columnar.xlsx", "Description of the Row: This is row 7 of 10", {"sheet": "testing"}),
    ("example.odt", "This is the first paragraph of the second title.",
     {"paragraph": 6, "heading": "Level 2 Title"}),
    ("table.odt", "a: 1; b: 2; c: 3; d: 4", {"table": 1, "row": 3, "heading": "First table"}),
    ("example.odp", "This is the second page", {"slide": 2, "title": "Slide 2"}),
    ("countrystatistics.ods", "Country: Austria; Population in millions: 8.3",
     {"sheet": "Population", "rows": [2, 21]}),
    ("two_sheets.ods", "col B: a text; col D: another", {"sheet": "sheet2", "rows": [3, 4]}),
    ("testEPUB.epub", "This is the text for chapter Two",
     {"section": "chapters/chapter2.html", "paragraph": 2, "heading": "Chapter 2"}),
    ("testMSG.msg", "This work has progressed pretty well", {"part": "body"}),
    ("testMSG.msg", "Subject: MIME registry use cases", {"part": "header"}),
    ("testMSG_att_doc.msg", "Subject: test pièce jointe 1", {"part": "header"}),
    ("testMSG_att_doc.msg", "test-unicode.doc, pj1.txt", {"part": "attachments"}),
    ("testEmailWithPNGAtt.eml", "This email has a PNG attachment included in it",
     {"part": "body"}),
    ("testEmailWithPNGAtt.eml", "Date: Wed, 20 Jul 2016 17:35:02 +0100", {"part": "header"}),
    ("testEmailWithPNGAtt.eml", "Attachments: testPNG.png", {"part": "attachments"}),
    ("testRFC822_multipart_attachments.eml", "This is test email for EML1", {"part": "body"}),
    ("test4.ipynb", "Nunc luctus bibendum felis dictum sodales.", {"cell": 2, "type": "markdown"}),
    ("test4.ipynb", 'print("hello")', {"cell": 4, "type": "code"}),
    ("test3.ipynb", 'print("hello")', {"cell": 4, "type": "code"}),
]


def read(path: Path) -> Extracted:
    """Read a file with the structured reader its suffix names."""
    return read_structured(path, path.read_bytes(), STRUCTURED_KINDS[path.suffix.lower()])


def skip_reason(name: str, data: bytes) -> str:
    """Return the reason bytes named `name` are skipped (failing when they are read)."""
    with pytest.raises(SkippedFile) as info:
        read_structured(Path(name), data, STRUCTURED_KINDS[Path(name).suffix.lower()])
    return info.value.reason


def block_at(extracted: Extracted, offset: int) -> str:
    """Return the text of the segment covering an offset."""
    starts = [s.start for s in extracted.segments] + [len(extracted.text)]
    index = max(i for i, s in enumerate(starts[:-1]) if s <= offset)
    return extracted.text[starts[index] : starts[index + 1]]


def test_every_format_has_a_fixture() -> None:
    kinds = {STRUCTURED_KINDS[Path(name).suffix.lower()] for name in READABLE}
    assert kinds == set(STRUCTURED_KINDS.values())


@pytest.mark.parametrize(("name", "sentence", "expected"), SENTENCES,
                         ids=[f"{n}:{s[:20]}" for n, s, _ in SENTENCES])
def test_sentence_is_found_with_its_location(name: str, sentence: str,
                                             expected: dict[str, Any]) -> None:
    extracted = read(DOCS / name)
    offset = extracted.text.find(sentence)
    assert offset >= 0, f"{sentence!r} not in {extracted.text[:300]!r}"
    location = location_at(extracted, offset)
    assert location is not None
    assert {k: location.get(k) for k in expected} == expected, location
    assert span_location(extracted, offset, offset + len(sentence)) == location


@pytest.mark.parametrize("name", READABLE)
def test_segments_are_sorted_and_cover_the_text(name: str) -> None:
    extracted = read(DOCS / name)
    starts = [s.start for s in extracted.segments]
    assert starts and starts[0] == 0
    assert starts == sorted(set(starts)) and starts[-1] < len(extracted.text)
    for segment in extracted.segments:
        assert block_at(extracted, segment.start).strip()
        json.dumps(segment.location)  # locations must be JSON-able
    assert "\x00" not in extracted.text and "\r" not in extracted.text


def test_presentation_slides_are_numbered_in_order() -> None:
    extracted = read(DOCS / "testPPT.pptx")
    slides = [s.location["slide"] for s in extracted.segments]
    assert slides == [1, 2, 3]
    assert extracted.segments[0].location["title"] == "Attachment Test"
    assert extracted.text.startswith("# Attachment Test\n")
    assert extracted.text.count("Attachment Test") == 1  # the title is not repeated


def test_word_headings_become_markdown_headings() -> None:
    text = read(DOCS / "testWORD.docx").text
    assert "\n# Heading Level 1\n" in text
    assert "\n## Heading Level 2\n" in text
    assert "\n### Heading Level 3\n" in text
    assert "More of our nested table" in text  # a table nested in a cell keeps its text


@pytest.mark.parametrize(("name", "row"), [
    ("testWORD_various.docx", "Row 1 Col 1: Row 2 Col 1; Row 1 Col 2: Row 2 Col 2; "
     "Row 1 Col 3: Row 2 Col 3"),
    ("testPPT_various.pptx", "Row 1 Col 1: Row 2 Col 1; Row 1 Col 2: Row 2 Col 2"),
    ("test-columnar.xlsx", "Record Number: 7; Square of the Record Number: 49; "
     "Description of the Row: This is row 7 of 10"),
    ("table.odt", "a: fixed; b: 20; c: 30; d: 40"),
    ("countrystatistics.ods", "HDI Rank: 2; Country: Norway; 2005: 968"),
    ("testEXCEL.xlsx", "Number: 12; Square: 144"),
])
def test_table_rows_carry_their_header(name: str, row: str) -> None:
    text = read(DOCS / name).text
    assert row in text


def test_spreadsheet_row_numbers_are_the_sheet_rows() -> None:
    extracted = read(DOCS / "test-columnar.xlsx")
    offset = extracted.text.index("This is row 7 of 10")
    first, last = location_at(extracted, offset)["rows"]
    assert first <= 9 <= last  # the header is row 1, so record 7 is row 9
    assert extracted.segments[0].location == {"sheet": "testing"}
    assert extracted.text.startswith("# testing\n")


def test_large_spreadsheet_comes_out_as_row_blocks_with_the_header(tmp_path: Path) -> None:
    import openpyxl

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Orders"
    sheet.append(["Order", "Customer", "Amount"])
    for n in range(5000):
        sheet.append([n, f"customer {n % 97}", n * 1.5])
    path = tmp_path / "orders.xlsx"
    workbook.save(path)

    extracted = read(path)
    blocks = [s for s in extracted.segments if "rows" in s.location]
    assert len(blocks) >= 5000 // ROWS_PER_BLOCK
    expected_first = 2
    for segment in blocks:
        first, last = segment.location["rows"]
        assert segment.location["sheet"] == "Orders"
        assert first == expected_first and 0 <= last - first < ROWS_PER_BLOCK
        expected_first = last + 1
        lines = block_at(extracted, segment.start).strip().split("\n")
        assert len(lines) == last - first + 1
        assert all(line.startswith("Order: ") and "; Customer: " in line for line in lines)
        assert lines[0].startswith(f"Order: {first - 2}; ")
    assert expected_first == 5002
    offset = extracted.text.index("Order: 4321; Customer: customer 53; Amount: 6481.5")
    first, last = location_at(extracted, offset)["rows"]
    assert first <= 4323 <= last


def test_opendocument_repeats_do_not_expand(tmp_path: Path) -> None:
    content = (
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
        ' xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
        ' xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body>'
        '<office:spreadsheet><table:table table:name="Big">'
        "<table:table-row><table:table-cell><text:p>Name</text:p></table:table-cell>"
        "<table:table-cell><text:p>Score</text:p></table:table-cell></table:table-row>"
        '<table:table-row table:number-rows-repeated="1048570"><table:table-cell '
        'table:number-columns-repeated="16384"/></table:table-row>'
        '<table:table-row><table:table-cell table:number-columns-repeated="1000000"/>'
        "<table:table-cell><text:p>far away</text:p></table:table-cell></table:table-row>"
        "<table:table-row><table:table-cell><text:p>Ada</text:p></table:table-cell>"
        '<table:table-cell office:value-type="float"><text:p>7</text:p></table:table-cell>'
        "</table:table-row></table:table></office:spreadsheet></office:body>"
        "</office:document-content>"
    )
    path = tmp_path / "big.ods"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
        archive.writestr("content.xml", content)
    extracted = read(path)
    assert "far away" not in extracted.text  # beyond the last column kept
    offset = extracted.text.index("Name: Ada; Score: 7")
    assert location_at(extracted, offset) == {"sheet": "Big", "rows": [1048573, 1048573]}


@pytest.mark.parametrize("name", sorted(ENCRYPTED))
def test_encrypted_files_are_skipped_with_the_reason(name: str) -> None:
    assert skip_reason(name, (DOCS / name).read_bytes()) == ENCRYPTED[name]


ZIP_FIXTURES = ["testWORD.docx", "testPPT.pptx", "testEXCEL.xlsx", "example.odt",
                "example.odp", "countrystatistics.ods", "testEPUB.epub"]


@pytest.mark.parametrize("name", ZIP_FIXTURES)
def test_truncated_zip_is_skipped(name: str) -> None:
    data = (DOCS / name).read_bytes()
    reason = skip_reason(name, data[: len(data) // 2])
    assert reason.startswith(f"damaged {Path(name).suffix}: truncated or corrupt zip")


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"


@pytest.mark.parametrize(("name", "data", "reason"), [
    ("photo.docx", PNG, "damaged .docx: not a zip file (it is a PNG image)"),
    ("notes.xlsx", b"just some text\n", "damaged .xlsx: not a zip file (it is plain text)"),
    ("slides.pptx", b"%PDF-1.4\n", "damaged .pptx: not a zip file (it is a PDF)"),
    ("book.epub", PNG, "damaged .epub: not a zip file (it is a PNG image)"),
    ("sheet.ods", b"col1,col2\n1,2\n", "damaged .ods: not a zip file (it is plain text)"),
    ("mail.msg", b"From: a@b\n\nhi\n", "damaged .msg: not an Outlook message (it is plain text)"),
    ("mail.eml", PNG, "damaged .eml: no mail header fields (it is a PNG image)"),
    ("notes.ipynb", PNG, "damaged .ipynb: not JSON (it is a PNG image)"),
    ("notes.ipynb", b'{"nbformat": 4}', "damaged .ipynb: not a Jupyter notebook (no cells)"),
    ("empty.docx", b"", "empty file"),
])
def test_wrong_content_is_skipped_with_a_clear_reason(name: str, data: bytes, reason: str) -> None:
    assert skip_reason(name, data) == reason


def test_legacy_office_file_renamed_is_skipped() -> None:
    data = (DOCS / "testMSG.msg").read_bytes()  # an OLE2 file, like a legacy .doc
    assert skip_reason("old.docx", data) == (
        "damaged .docx: an OLE2 file (a legacy .doc file renamed?), not a zip"
    )
    assert skip_reason("old.msg", (DOCS / "testWORD_protected_passtika.docx").read_bytes()) == (
        "damaged .msg: an OLE2 file but not an Outlook message"
    )


def _rezip(data: bytes, replace: dict[str, bytes]) -> bytes:
    """Return a copy of a zip with some members' bytes replaced."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, replace.get(info.filename, src.read(info.filename)))
    return out.getvalue()


@pytest.mark.parametrize(("name", "member"), [
    ("testWORD.docx", "word/document.xml"),
    ("testPPT.pptx", "ppt/slides/slide2.xml"),
    ("testEXCEL.xlsx", "xl/worksheets/sheet1.xml"),
    ("example.odt", "content.xml"),
    ("testEPUB.epub", "OPS/content.opf"),
    ("testEPUB.epub", "META-INF/container.xml"),
])
def test_broken_xml_inside_a_good_zip_is_skipped(name: str, member: str) -> None:
    data = _rezip((DOCS / name).read_bytes(), {member: b"<broken><xml"})
    assert skip_reason(name, data).startswith(f"damaged {Path(name).suffix}: ")


def test_zip_of_something_else_is_skipped() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("readme.txt", "not an office document")
    for name in ("a.docx", "a.pptx", "a.xlsx", "a.odt", "a.epub"):
        assert skip_reason(name, out.getvalue()).startswith(f"damaged {Path(name).suffix}: ")


def test_every_corruption_is_read_or_skipped_never_an_error() -> None:
    rng = random.Random(16)
    for name in READABLE:
        data = (DOCS / name).read_bytes()
        for _ in range(6):
            damaged = bytearray(data)
            start = rng.randrange(len(damaged))
            for i in range(start, min(len(damaged), start + rng.randrange(1, 64))):
                damaged[i] = rng.randrange(256)
            try:
                read_structured(Path(name), bytes(damaged), STRUCTURED_KINDS[Path(name).suffix])
            except SkippedFile:
                pass


def test_empty_documents_are_skipped_as_empty(tmp_path: Path) -> None:
    import docx
    import openpyxl

    docx.Document().save(tmp_path / "blank.docx")
    openpyxl.Workbook().save(tmp_path / "blank.xlsx")
    (tmp_path / "blank.ipynb").write_text('{"cells": [{"cell_type": "code", "source": ""}]}')
    for name in ("blank.docx", "blank.xlsx", "blank.ipynb"):
        assert skip_reason(name, (tmp_path / name).read_bytes()) == "empty file"


def test_html_only_mail_is_reduced_to_visible_text() -> None:
    message = email.message.EmailMessage()
    message["From"] = "Ann <ann@example.org>"
    message["To"] = "bob@example.org"
    message["Subject"] = "Minutes"
    message.set_content(
        "<html><head><style>p {color: red}</style><script>track()</script></head><body>"
        "<h1>Minutes</h1><p>The harbour crane was <b>repaired</b> on Tuesday.</p>"
        "<table><tr><th>Item</th><th>Cost</th></tr><tr><td>Bolts</td><td>12</td></tr></table>"
        "</body></html>",
        subtype="html",
    )
    data = message.as_bytes()
    extracted = read_structured(Path("m.eml"), data, "eml")
    body = extracted.text[extracted.text.index("Minutes\n\n") :]
    assert "The harbour crane was repaired on Tuesday." in body
    assert "Bolts | 12" in body
    assert "track()" not in extracted.text and "color" not in extracted.text and "<" not in body
    assert extracted.text.startswith("From: Ann <ann@example.org>\nTo: bob@example.org\n")


def test_notebook_outputs_are_short_and_reprs_dropped(tmp_path: Path) -> None:
    notebook = {"nbformat": 4, "cells": [
        {"cell_type": "markdown", "source": ["# Title\n", "Some words."]},
        {"cell_type": "code", "source": "for i in range(10000): print(i)",
         "outputs": [{"output_type": "stream", "text": "\n".join(map(str, range(10000)))}]},
        {"cell_type": "code", "source": "show()", "outputs": [
            {"output_type": "display_data", "data": {"text/plain": "<Figure at 0x7f3a2b>"}},
            {"output_type": "error", "ename": "ValueError", "evalue": "bad \x1b[31mvalue\x1b[0m"},
        ]},
    ]}
    extracted = read_structured(Path("n.ipynb"), json.dumps(notebook).encode(), "ipynb")
    second = block_at(extracted, extracted.text.index("for i in range"))
    assert len(second) < len("for i in range(10000): print(i)") + OUTPUT_CHARS + 20
    third = block_at(extracted, extracted.text.index("show()"))
    assert "Figure at" not in third and "ValueError: bad value" in third
    assert [s.location for s in extracted.segments] == [
        {"cell": 1, "type": "markdown"}, {"cell": 2, "type": "code"}, {"cell": 3, "type": "code"}
    ]


def test_merge_locations_makes_ranges_within_one_sheet_or_table() -> None:
    assert merge_locations([{"paragraph": 14, "heading": "Results"}, {"paragraph": 15},
                            {"paragraph": 19, "heading": "Discussion"}]) == {
        "paragraphs": [14, 19], "heading": "Results"}
    assert merge_locations([{"slide": 2}, {"slide": 3, "title": "B"}]) == {
        "slides": [2, 3], "title": "B"}
    assert merge_locations([{"sheet": "A", "rows": [2, 21]}, {"sheet": "A", "rows": [22, 41]},
                            {"sheet": "B", "rows": [1, 5]}]) == {"sheet": "A", "rows": [2, 41]}
    assert merge_locations([{"paragraph": 3}, {"paragraph": 4, "table": 1, "row": 2}]) == {
        "paragraphs": [3, 4]}
    assert merge_locations([{"paragraph": 4, "table": 1, "row": 2},
                            {"paragraph": 5, "table": 1, "row": 3}]) == {
        "paragraphs": [4, 5], "table": 1, "rows": [2, 3]}


def test_span_location_covers_the_segments_a_span_touches() -> None:
    extracted = Extracted("aaaa\n\nbbbb\n\ncccc", [Segment(0, {"cell": 1}), Segment(6, {"cell": 2}),
                                                   Segment(12, {"cell": 3})])
    assert span_location(extracted, 0, 4) == {"cell": 1}
    assert span_location(extracted, 2, 8) == {"cells": [1, 2]}
    assert span_location(extracted, 7, 16) == {"cells": [2, 3]}
    assert span_location(extracted, 12, 12) == {"cell": 3}
    assert span_location(Extracted("x", []), 0, 1) is None


def test_html_blocks_keep_order_headings_and_tables() -> None:
    blocks = html_blocks(
        "<body><h2>Part  one</h2><p>First <i>line</i><br/>second</p><script>x()</script>"
        "<table><tr><td>a<table><tr><td>in</td></tr></table></td><td>b</td></tr></table>"
        "<pre>  keep\n    indent</pre></body>"
    )
    assert [(b.text, b.level, b.rows) for b in blocks] == [
        ("Part one", 2, []),
        ("First line\nsecond", 0, []),
        ("", 0, [["a in", "b"]]),
        ("  keep\n    indent", 0, []),
    ]


def test_unknown_kind_is_skipped() -> None:
    with pytest.raises(SkippedFile, match="unsupported file type .doc"):
        read_structured(Path("a.doc"), b"data", "doc")


def test_anchor_breaks_are_where_the_sheet_section_or_part_changes() -> None:
    from psirag_kb.ingest.formats import anchor_breaks

    segments = [Segment(0, {"part": "header"}), Segment(10, {"part": "body"}),
                Segment(20, {"sheet": "A", "rows": [2, 3]}), Segment(30, {"sheet": "A"}),
                Segment(40, {"sheet": "B"}), Segment(50, {"slide": 1}), Segment(60, {"slide": 2})]
    assert anchor_breaks(segments) == [10, 20, 40, 50]
    eml = read(DOCS / "testEmailWithPNGAtt.eml")
    assert anchor_breaks(eml.segments) == [s.start for s in eml.segments[1:]]

"""OpenDocument (.odt, .odp, .ods) read from content.xml with the standard library.

Spreadsheets are streamed row by row (memory stays flat on large sheets); text documents and
presentations are parsed whole. What a file holds is decided by its body element, not its name.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Protocol

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats import Extracted
from psirag_kb.ingest.formats.builder import TextBuilder, one_line
from psirag_kb.ingest.formats.containers import open_zip
from psirag_kb.ingest.formats.flow import FlowWriter
from psirag_kb.ingest.formats.tables import SheetWriter, table_lines

OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"
DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
PRESENTATION = "{urn:oasis:names:tc:opendocument:xmlns:presentation:1.0}"

MAX_COLUMNS = 16384
"""Cells beyond this column are ignored (a repeat count can claim millions of empty ones)."""
MAX_REPEATS = 100
"""A repeated non-empty row or cell is written at most this many times."""

_SKIPPED = frozenset(
    {
        f"{TEXT}tracked-changes", f"{TEXT}table-of-content", f"{TEXT}alphabetical-index",
        f"{TEXT}illustration-index", f"{TEXT}table-index", f"{TEXT}object-index",
        f"{TEXT}user-index", f"{TEXT}bibliography", f"{TEXT}note-citation",
        f"{OFFICE}annotation", f"{OFFICE}annotation-end", f"{OFFICE}forms",
        f"{PRESENTATION}notes", f"{DRAW}image", f"{OFFICE}event-listeners",
    }
)
_DRAWINGS = frozenset(
    f"{DRAW}{name}"
    for name in ("frame", "custom-shape", "g", "a", "rect", "ellipse", "text-box", "polygon")
)
_BODIES = {f"{OFFICE}text": "text", f"{OFFICE}spreadsheet": "spreadsheet",
           f"{OFFICE}presentation": "presentation"}


class _Writer(Protocol):
    """Where the document walker sends paragraphs, headings and tables."""

    def paragraph(self, text: str) -> None: ...

    def heading(self, text: str, level: int) -> None: ...

    def table(self, rows: Any) -> None: ...


def read_opendocument(data: bytes, kind: str = "odt") -> Extracted:
    """Read an OpenDocument text, presentation or spreadsheet with its locations."""
    with open_zip(data, kind) as archive:
        if _has(archive, "META-INF/manifest.xml"):
            if b"encryption-data" in archive.read("META-INF/manifest.xml"):
                raise SkippedFile(f"encrypted .{kind} (password-protected)")
        if not _has(archive, "content.xml"):
            raise SkippedFile(f"damaged .{kind}: content.xml is missing")
        with archive.open("content.xml") as stream:
            extracted = _read_content(stream, kind)
        return replace(extracted, title=_meta_title(archive))


def _meta_title(archive: Any) -> str:
    """The document's dc:title in meta.xml ("" when it has none or meta.xml is damaged)."""
    if not _has(archive, "meta.xml"):
        return ""
    try:
        element = ET.fromstring(archive.read("meta.xml")).find(f".//{DC_TITLE}")
    except ET.ParseError:
        return ""
    return one_line(element.text or "") if element is not None else ""


def _has(archive: Any, name: str) -> bool:
    """Tell whether a zip holds a member."""
    try:
        archive.getinfo(name)
    except KeyError:
        return False
    return True


def _read_content(stream: Any, kind: str) -> Extracted:
    """Parse content.xml: stream spreadsheets by rows, build a tree for the other bodies."""
    builder = TextBuilder()
    stack: list[ET.Element] = []
    body = ""
    sheet: SheetWriter | None = None
    row_number = 0
    for event, element in ET.iterparse(stream, events=("start", "end")):
        if event == "start":
            stack.append(element)
            if element.tag in _BODIES and not body:
                body = _BODIES[element.tag]
            elif body == "spreadsheet" and element.tag == f"{TABLE}table":
                sheet = SheetWriter(builder, element.get(f"{TABLE}name") or "Sheet")
                row_number = 0
            continue
        stack.pop()
        if body != "spreadsheet" or sheet is None:
            continue
        if element.tag == f"{TABLE}table-row":
            repeat = _count(element, f"{TABLE}number-rows-repeated")
            values = _row_values(element)
            if any(values):
                for _ in range(min(repeat, MAX_REPEATS)):
                    row_number += 1
                    sheet.add_row(row_number, values)
                row_number += max(0, repeat - MAX_REPEATS)
            else:
                row_number += repeat
            if stack:
                stack[-1].remove(element)  # keep memory flat on long sheets
        elif element.tag == f"{TABLE}table":
            sheet.finish()
            sheet = None
            if stack:
                stack[-1].remove(element)
    if not body:
        raise SkippedFile(f"damaged .{kind}: content.xml has no document body")
    if body == "text":
        root = element
        for office_text in root.iter(f"{OFFICE}text"):
            _walk(office_text, FlowWriter(builder))
            break
    elif body == "presentation":
        _read_slides(element, builder)
    return builder.build()


def _count(element: ET.Element, attribute: str) -> int:
    """Return a repeat count attribute (1 when absent or invalid)."""
    try:
        return max(1, int(element.get(attribute, "1")))
    except ValueError:
        return 1


def _row_values(row: ET.Element) -> list[str]:
    """Return a table row's cell texts, expanding repeated cells within MAX_COLUMNS."""
    values: list[str] = []
    pending = 0
    for cell in row:
        if cell.tag not in (f"{TABLE}table-cell", f"{TABLE}covered-table-cell"):
            continue
        repeat = _count(cell, f"{TABLE}number-columns-repeated")
        value = _cell_text(cell)
        if not value:
            pending += repeat
            continue
        if len(values) + pending >= MAX_COLUMNS:
            break
        values.extend([""] * pending)
        pending = 0
        values.extend([value] * min(repeat, MAX_REPEATS, MAX_COLUMNS - len(values)))
    return values


def _cell_text(cell: ET.Element) -> str:
    """Return a table cell's paragraphs as one line."""
    parts = []
    for child in cell:
        if child.tag in (f"{TEXT}p", f"{TEXT}h"):
            parts.append(_inline(child)[0])
        elif child.tag == f"{TEXT}list":
            parts.extend(_inline(p)[0] for p in child.iter(f"{TEXT}p"))
    return one_line(" ".join(parts))


def _inline(element: ET.Element) -> tuple[str, list[ET.Element]]:
    """Return a paragraph's text and the drawings (text boxes, shapes) anchored inside it."""
    parts: list[str] = [element.text or ""]
    drawings: list[ET.Element] = []
    for child in element:
        tag = child.tag
        if tag == f"{TEXT}s":
            parts.append(" " * min(_count(child, f"{TEXT}c"), 100))
        elif tag == f"{TEXT}tab":
            parts.append("\t")
        elif tag == f"{TEXT}line-break":
            parts.append("\n")
        elif tag == f"{TEXT}note":
            body = child.find(f"{TEXT}note-body")
            if body is not None:
                note = " ".join(_inline(p)[0] for p in body.iter(f"{TEXT}p"))
                parts.append(f" [{one_line(note)}]")
        elif tag in _DRAWINGS:
            drawings.append(child)
        elif tag not in _SKIPPED:
            text, inner = _inline(child)
            parts.append(text)
            drawings.extend(inner)
        parts.append(child.tail or "")
    return "".join(parts), drawings


def _walk(element: ET.Element, writer: _Writer) -> None:
    """Send the paragraphs, headings and tables under an element to a writer, in order."""
    for child in element:
        tag = child.tag
        if tag in _SKIPPED:
            continue
        if tag in (f"{TEXT}p", f"{TEXT}h"):
            text, drawings = _inline(child)
            if tag == f"{TEXT}h":
                writer.heading(text, _count(child, f"{TEXT}outline-level"))
            else:
                writer.paragraph(text)
            for drawing in drawings:
                _walk(drawing, writer)
        elif tag == f"{TABLE}table":
            writer.table(_table_rows(child))
        else:
            _walk(child, writer)


def _table_rows(table: ET.Element) -> Iterator[list[str]]:
    """Yield a table's rows (inside header-row and row-group wrappers too) as cell texts."""
    for row in table.iter(f"{TABLE}table-row"):
        values = _row_values(row)
        if any(values):
            for _ in range(min(_count(row, f"{TABLE}number-rows-repeated"), MAX_REPEATS)):
                yield values


class _SlideText:
    """Collects one slide's text as lines (a _Writer for _walk)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def paragraph(self, text: str) -> None:
        self.lines.append(text)

    def heading(self, text: str, level: int) -> None:
        self.lines.append(text)

    def table(self, rows: Any) -> None:
        self.lines.extend(line for _, line in table_lines(rows))


def _read_slides(root: ET.Element, builder: TextBuilder) -> None:
    """Write each draw:page as a slide: title, the other shapes' text, then the notes."""
    for number, page in enumerate(root.iter(f"{DRAW}page"), start=1):
        title = ""
        body = _SlideText()
        for child in page:
            if child.get(f"{PRESENTATION}class") == "title" and not title:
                title_text = _SlideText()
                _walk(child, title_text)
                title = one_line(" ".join(title_text.lines))
                if title:
                    continue
            _walk(child, body)
        location: dict[str, Any] = {"slide": number}
        if title:
            location["title"] = title
            builder.add(f"# {title}", location)
        builder.add("\n".join(body.lines), location, separator="\n" if title else "\n\n")
        notes = _SlideText()
        for part in page.iter(f"{PRESENTATION}notes"):
            for child in part:
                _walk(child, notes)
        note_text = "\n".join(line for line in notes.lines if line.strip())
        if note_text.strip():
            builder.add(f"Notes: {note_text}", location, separator="\n")

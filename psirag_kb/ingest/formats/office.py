"""Office Open XML: .docx (python-docx), .pptx (python-pptx) and .xlsx (openpyxl, streaming)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from psirag_kb.ingest.formats import Extracted
from psirag_kb.ingest.formats.builder import TextBuilder, one_line
from psirag_kb.ingest.formats.containers import open_zip
from psirag_kb.ingest.formats.flow import FlowWriter
from psirag_kb.ingest.formats.tables import SheetWriter, format_value, table_lines

_HEADING_STYLE = re.compile(r"(?:heading|überschrift|titre|título|titolo)\s*(\d)", re.I)
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
_TEXT_BOX_PATH: Any = None


def read_docx(data: bytes, kind: str = "docx") -> Extracted:
    """Read a Word document: paragraphs and headings in order, tables as header: value rows."""
    open_zip(data, kind).close()
    import docx

    document = docx.Document(io.BytesIO(data))
    builder = TextBuilder()
    writer = FlowWriter(builder)
    _docx_blocks(document.element.body, document, writer, {})
    return replace(builder.build(), title=_core_title(document.core_properties))


def _docx_blocks(container: Any, parent: Any, writer: FlowWriter, levels: dict) -> None:
    """Write the paragraphs and tables of a body (or content control) in document order.

    `levels` caches each paragraph style's heading level (a style lookup is slow).
    """
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for child in container.iterchildren():
        if child.tag == f"{_W}p":
            paragraph = Paragraph(child, parent)
            level = _outline_level(child)
            if level is None:
                style_id = child.style
                if style_id not in levels:
                    levels[style_id] = _heading_level(paragraph)
                level = levels[style_id]
            if level:
                writer.heading(paragraph.text, level)
            else:
                writer.paragraph(paragraph.text)
            for box in _text_boxes(child):
                _docx_blocks(box, parent, writer, levels)
        elif child.tag == f"{_W}tbl":
            writer.table(_docx_rows(Table(child, parent)))
        elif child.tag == f"{_W}sdt":
            for content in child.iterchildren(f"{_W}sdtContent"):
                _docx_blocks(content, parent, writer, levels)


def _text_boxes(paragraph: Any) -> list[Any]:
    """Return the text boxes anchored in a paragraph (not their fallback copies)."""
    from lxml import etree

    global _TEXT_BOX_PATH
    if _TEXT_BOX_PATH is None:
        _TEXT_BOX_PATH = etree.XPath(
            ".//w:txbxContent[not(ancestor::mc:Fallback)]",
            namespaces={"w": _W[1:-1], "mc": _MC},
        )
    return _TEXT_BOX_PATH(paragraph)


def _heading_level(paragraph: Any) -> int:
    """Return the heading level of a paragraph's style (Title is 1), 0 for body text."""
    try:
        style = paragraph.style
    except (KeyError, ValueError):
        return 0
    for _ in range(10):  # the style chain: a style and the styles it is based on
        if style is None:
            return 0
        name = (style.name or "").lower()
        if name == "title":
            return 1
        match = _HEADING_STYLE.match(name)
        if match:
            return int(match.group(1))
        level = _outline_level(style.element)
        if level is not None:
            return level
        style = style.base_style
    return 0


def _outline_level(element: Any) -> int | None:
    """Return the 1-based heading level in an element's w:pPr/w:outlineLvl (None if absent)."""
    found = element.find(f"{_W}pPr/{_W}outlineLvl")
    if found is None:
        return None
    try:
        value = int(found.get(f"{_W}val", "9"))
    except ValueError:
        return None
    return value + 1 if 0 <= value < 9 else 0


def _docx_rows(table: Any) -> Iterator[list[str]]:
    """Yield a Word table's rows as cell texts, a merged cell once per row."""
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            if cell._tc is previous:
                continue
            previous = cell._tc
            cells.append(_docx_cell_text(cell))
        yield cells


def _docx_cell_text(cell: Any) -> str:
    """Return a table cell's text on one line, nested tables included."""
    from docx.table import Table

    parts: list[str] = []
    for item in cell.iter_inner_content():
        if isinstance(item, Table):
            parts.extend(" | ".join(v for v in row if v) for row in _docx_rows(item))
        else:
            parts.append(item.text)
    return one_line(" ".join(parts))


def read_pptx(data: bytes, kind: str = "pptx") -> Extracted:
    """Read a presentation slide by slide: title, text boxes, tables, then the speaker notes."""
    open_zip(data, kind).close()
    import pptx

    presentation = pptx.Presentation(io.BytesIO(data))
    builder = TextBuilder()
    for number, slide in enumerate(presentation.slides, start=1):
        title_shape = slide.shapes.title
        title = one_line(title_shape.text_frame.text) if title_shape is not None else ""
        location: dict[str, Any] = {"slide": number}
        if title:
            location["title"] = title
            builder.add(f"# {title}", location)
        title_id = title_shape.shape_id if title_shape is not None else None
        pieces = [_shape_text(shape) for shape in _shapes(slide.shapes)
                  if not (title and shape.shape_id == title_id)]
        text = "\n".join(piece for piece in pieces if piece)
        builder.add(text, location, separator="\n" if title else "\n\n")
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                builder.add(f"Notes: {notes}", location, separator="\n")
    return replace(builder.build(), title=_core_title(presentation.core_properties))


def _shapes(shapes: Any) -> Iterator[Any]:
    """Yield a slide's shapes in order, descending into groups."""
    for shape in shapes:
        if hasattr(shape, "shapes"):  # a group shape
            yield from _shapes(shape.shapes)
        else:
            yield shape


def _shape_text(shape: Any) -> str:
    """Return the text of a text box, placeholder or table shape ("" for pictures, charts)."""
    if getattr(shape, "has_table", False):
        rows = ([cell.text for cell in row.cells] for row in shape.table.rows)
        return "\n".join(line for _, line in table_lines(rows))
    if getattr(shape, "has_text_frame", False):
        return shape.text_frame.text
    return ""


def read_xlsx(data: bytes, kind: str = "xlsx") -> Extracted:
    """Read a workbook sheet by sheet as blocks of rows, streaming (bounded memory)."""
    open_zip(data, kind).close()
    import openpyxl

    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    builder = TextBuilder()
    try:
        for sheet in workbook.worksheets:
            writer = SheetWriter(builder, sheet.title)
            sheet.reset_dimensions()  # some writers record wrong sizes; read every stored row
            for number, row in enumerate(sheet.iter_rows(min_row=1, values_only=True), start=1):
                writer.add_row(number, [format_value(value) for value in row])
            writer.finish()
        title = _core_title(workbook.properties)
    finally:
        workbook.close()
    return replace(builder.build(), title=title)


def _core_title(properties: Any) -> str:
    """The title in a document's core properties ("" when it has none or they are damaged)."""
    try:
        return one_line(str(properties.title or ""))
    except Exception:  # noqa: BLE001 - a damaged docProps/core.xml must not lose the text
        return ""

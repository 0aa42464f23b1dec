"""Running text (word processing, e-books): numbered paragraphs under their nearest heading.

Locations are {"paragraph": n, "heading": h}, plus {"table": t, "row": r} for table rows.
Paragraph numbers count the non-empty paragraphs, headings and table rows in reading order,
starting at 1 (per section when a section is set, as in an EPUB).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from psirag_kb.ingest.formats.builder import TextBuilder, clean_text, one_line
from psirag_kb.ingest.formats.tables import table_lines


class FlowWriter:
    """Adds paragraphs, headings and tables to a TextBuilder with paragraph/heading locations."""

    def __init__(self, builder: TextBuilder, base: dict[str, Any] | None = None) -> None:
        self._builder = builder
        self._base: dict[str, Any] = dict(base or {})
        self._paragraph = 0
        self._tables = 0
        self._heading = ""

    def section(self, base: dict[str, Any]) -> None:
        """Start a new section (its location keys, e.g. {"section": file}); numbering restarts."""
        self._base = dict(base)
        self._paragraph = 0

    def _location(self, **extra: Any) -> dict[str, Any]:
        """Return the location of the current paragraph."""
        location = {**self._base, "paragraph": self._paragraph}
        if self._heading:
            location["heading"] = self._heading
        location.update(extra)
        return location

    def paragraph(self, text: str) -> None:
        """Add a paragraph (empty ones are not counted)."""
        text = clean_text(text)
        if not text:
            return
        self._paragraph += 1
        self._builder.add(text, self._location())

    def heading(self, text: str, level: int) -> None:
        """Add a heading, written as a Markdown heading so chunks start there."""
        text = one_line(text)
        if not text:
            return
        self._heading = text
        self._paragraph += 1
        self._builder.add(f"{'#' * min(max(level, 1), 6)} {text}", self._location())

    def table(self, rows: Iterable[Sequence[str]]) -> None:
        """Add a table, one line per row with the header folded in (see tables.row_line)."""
        lines = table_lines(rows)
        if not lines:
            return
        self._tables += 1
        separator = "\n\n"
        for number, line in lines:
            self._paragraph += 1
            location = self._location(table=self._tables, row=number)
            self._builder.add(line, location, separator=separator)
            separator = "\n"

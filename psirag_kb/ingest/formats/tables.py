"""Tables and spreadsheets as searchable text: each row as "header: value; header: value".

Every row carries its column names, so a row still reads as facts ("Country: Austria;
Population in millions: 8.3") wherever the chunker cuts a table, and a search for a column name
and a value matches the row itself. A table without a header row is written as "a | b | c".
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from itertools import zip_longest
from typing import Any

from psirag_kb.ingest.formats.builder import TextBuilder, one_line

ROWS_PER_BLOCK = 20
"""Spreadsheet rows per block (one segment {"sheet", "rows": [first, last]} each)."""
BLOCK_CHARS = 2000
"""A block also ends once its text reaches this many characters."""
_HEADER_SEARCH_ROWS = 10
_NUMBER_LIKE = re.compile(r"[\s\d.,:;%/+\-−eE$€£¥()#]*")
_YEAR = re.compile(r"(?:1[5-9]|20|21)\d\d")


def format_value(value: Any) -> str:
    """Render a cell value (number, date, boolean, text) as a short, stable string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.15g}"
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0):
            return value.date().isoformat()
        return value.isoformat(sep=" ", timespec="seconds")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return one_line(str(value))


def trim(values: Sequence[str]) -> list[str]:
    """Drop the empty cells at the end of a row."""
    end = len(values)
    while end and not values[end - 1]:
        end -= 1
    return list(values[:end])


def looks_like_header(values: Sequence[str]) -> bool:
    """Tell whether a row looks like column names: two or more cells, no numbers but years."""
    filled = [v for v in values if v]
    numbers = [v for v in filled if _NUMBER_LIKE.fullmatch(v)]
    return (
        len(filled) >= 2
        and len(numbers) < len(filled)
        and all(_YEAR.fullmatch(v.strip()) for v in numbers)
    )


def row_line(header: Sequence[str] | None, values: Sequence[str]) -> str:
    """Write one row as "name: value; name: value" (or "a | b" without a header)."""
    if not header:
        return " | ".join(v for v in values if v)
    parts = []
    for name, value in zip_longest(header, values, fillvalue=""):
        if value:
            parts.append(f"{name}: {value}" if name and name != value else value)
    return "; ".join(parts)


def table_lines(rows: Iterable[Sequence[str]]) -> list[tuple[int, str]]:
    """Return (1-based row number, text) for a document table's non-empty rows.

    The first row is taken as the header when it looks like column names and more rows follow;
    it is then folded into every other row instead of being written on its own.
    """
    table = [trim([one_line(v) for v in row]) for row in rows]
    header: list[str] | None = None
    if len(table) > 1 and looks_like_header(table[0]):
        header = table[0]
    lines = []
    for number, values in enumerate(table, start=1):
        if header is not None and number == 1:
            continue
        line = row_line(header, values)
        if line:
            lines.append((number, line))
    return lines


class SheetWriter:
    """Writes one sheet's rows into a TextBuilder as blocks of rows, each row with its header."""

    def __init__(self, builder: TextBuilder, sheet: str) -> None:
        self._builder = builder
        self._sheet = sheet
        self._header: list[str] | None = None
        self._header_row = 0
        self._decided = False
        self._seen = 0
        self._rows_after_header = 0
        self._titled = False
        self._block: list[str] = []
        self._block_chars = 0
        self._first = self._last = 0

    def add_row(self, number: int, values: Sequence[str]) -> None:
        """Take the next non-empty row (1-based sheet row number, cell texts left to right)."""
        values = trim(values)
        if not any(values):
            return
        self._seen += 1
        if not self._decided:
            if looks_like_header(values):
                self._header, self._header_row, self._decided = values, number, True
                return
            filled = sum(1 for v in values if v)
            self._decided = filled > 1 or self._seen >= _HEADER_SEARCH_ROWS
        elif self._header is not None:
            self._rows_after_header += 1
        self._append(number, row_line(self._header, values))

    def _append(self, number: int, line: str) -> None:
        """Add a row's line to the current block, starting a new block when it is full."""
        if not self._block:
            self._first = number
        self._block.append(line)
        self._block_chars += len(line) + 1
        self._last = number
        if len(self._block) >= ROWS_PER_BLOCK or self._block_chars >= BLOCK_CHARS:
            self._flush()

    def _flush(self) -> None:
        """Write the current block (if any) with its row range."""
        if not self._block:
            return
        if not self._titled:
            self._builder.add(f"# {self._sheet}", {"sheet": self._sheet})
            self._titled = True
        location = {"sheet": self._sheet, "rows": [self._first, self._last]}
        self._builder.add("\n".join(self._block), location)
        self._block, self._block_chars = [], 0

    def finish(self) -> None:
        """Write what is left; a sheet holding only a header row keeps that row as text."""
        if self._header is not None and not self._rows_after_header:
            self._append(self._header_row, row_line(None, self._header))
        self._flush()

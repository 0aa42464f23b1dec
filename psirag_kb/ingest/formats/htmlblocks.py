"""HTML to a list of blocks (headings, paragraphs, tables) for e-book chapters and mail bodies."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

_SKIPPED = frozenset({"script", "style", "head", "title", "template", "svg", "math", "object"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCKS = frozenset(
    {
        "p", "div", "li", "dt", "dd", "blockquote", "pre", "section", "article", "header",
        "footer", "aside", "figure", "figcaption", "caption", "address", "hr", "ul", "ol", "dl",
        "body", "nav", "main", "center", "form", "fieldset", "legend", "details", "summary",
    }
)
_SPACES = re.compile(r"\s+")


@dataclass
class Block:
    """One block of an HTML page: a heading (level > 0), a paragraph, or a table (rows)."""

    text: str = ""
    level: int = 0
    rows: list[list[str]] = field(default_factory=list)


@dataclass
class _Table:
    """A table being parsed: its rows so far and the open cell's text."""

    rows: list[list[str]] = field(default_factory=list)
    cell: list[str] | None = None


def _end_cell(table: _Table) -> None:
    """Store a table's open cell (if any) in its current row."""
    if table.cell is None:
        return
    if not table.rows:
        table.rows.append([])
    table.rows[-1].append(_SPACES.sub(" ", "".join(table.cell)).strip())
    table.cell = None


class _BlockParser(HTMLParser):
    """Collects the visible text of an HTML page as blocks, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self._buffer: list[str] = []
        self._skip = 0
        self._pre = 0
        self._level = 0
        self._tables: list[_Table] = []

    def _flush(self) -> None:
        """End the current paragraph or heading."""
        text = "".join(self._buffer)
        self._buffer = []
        if self._pre:
            text = text.strip("\n")
        else:
            text = "\n".join(_SPACES.sub(" ", line).strip() for line in text.split("\n"))
        if text.strip():
            self.blocks.append(Block(text=text.strip("\n"), level=self._level))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skip += 1
        elif self._skip:
            return
        elif self._tables:
            self._table_tag(tag, start=True)
        elif tag == "table":
            self._flush()
            self._tables.append(_Table())
        elif tag in _HEADINGS:
            self._flush()
            self._level = _HEADINGS[tag]
        elif tag in _BLOCKS:
            self._flush()
            self._pre += tag == "pre"
        elif tag == "br":
            self._buffer.append("\n")
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt:
                self._buffer.append(f" {alt} ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            return
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self._skip = max(0, self._skip - 1)
        elif self._skip:
            return
        elif self._tables:
            self._table_tag(tag, start=False)
        elif tag in _HEADINGS:
            self._flush()
            self._level = 0
        elif tag in _BLOCKS:
            self._flush()
            if tag == "pre":
                self._pre = max(0, self._pre - 1)

    def _table_tag(self, tag: str, *, start: bool) -> None:
        """Track rows and cells; a table nested in a cell becomes text of that cell."""
        table = self._tables[-1]
        if tag == "table":
            if start:
                self._tables.append(_Table())
                return
            _end_cell(table)
            self._tables.pop()
            if not self._tables:
                self.blocks.append(Block(rows=[row for row in table.rows if any(row)]))
            elif self._tables[-1].cell is not None:
                inner = " ".join(" ".join(row) for row in table.rows)
                self._tables[-1].cell.append(f" {inner} ")
        elif tag == "tr":
            _end_cell(table)
            if start:
                table.rows.append([])
        elif tag in ("td", "th"):
            _end_cell(table)
            if start:
                table.cell = []
        elif table.cell is not None and (tag == "br" or tag in _BLOCKS or tag in _HEADINGS):
            table.cell.append(" ")

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._tables:
            if self._tables[-1].cell is not None:
                self._tables[-1].cell.append(data)
            return
        self._buffer.append(data)

    def close(self) -> None:
        super().close()
        while self._tables:
            self._table_tag("table", start=False)
        self._flush()


def html_blocks(source: str) -> list[Block]:
    """Split an HTML page's visible text into headings, paragraphs and tables, in order."""
    parser = _BlockParser()
    parser.feed(source)
    parser.close()
    return parser.blocks

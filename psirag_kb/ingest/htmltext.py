"""HTML to its visible text, with every source newline kept so result lines are file lines."""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser

from psirag_kb.ingest.context import Heading, one_line

_HTML_DROPPED = frozenset({"script", "style", "template", "title"})
_HTML_HEAD_TAGS = frozenset(
    {"title", "meta", "link", "style", "script", "base", "noscript", "template"}
)
_HTML_BREAKING = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "caption", "dd", "div", "dl", "dt",
        "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
        "hr", "img", "li", "main", "nav", "ol", "p", "pre", "section", "table", "td", "th", "tr",
        "ul", "option", "button", "label", "input", "textarea", "select",
    }
)
_SPACES = re.compile(r"[^\S\n]+")
_LINE_EDGE_SPACES = re.compile(r" *\n *")


class _VisibleTextParser(HTMLParser):
    """Collects the visible text of an HTML page, keeping every source newline in place."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.parts: list[str] = []
        self.newlines = 0
        self._dropped = 0
        self._in_head = False

    def _sync(self) -> None:
        """Emit the newlines skipped since the last event so output lines track source lines."""
        missing = self.getpos()[0] - 1 - self.newlines
        if missing > 0:
            self.parts.append("\n" * missing)
            self.newlines += missing

    def _emit(self, text: str) -> None:
        """Append visible text unless inside dropped content."""
        if not self._dropped and not self._in_head:
            self.parts.append(text)
            self.newlines += text.count("\n")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._sync()
        if tag == "head":
            self._in_head = True
            return
        if self._in_head and tag not in _HTML_HEAD_TAGS:
            self._in_head = False
        if tag in _HTML_DROPPED:
            self._dropped += 1
        elif tag in _HTML_BREAKING:
            self._emit(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._sync()
        if tag in _HTML_BREAKING:
            self._emit(" ")

    def handle_endtag(self, tag: str) -> None:
        self._sync()
        if tag == "head":
            self._in_head = False
        elif tag in _HTML_DROPPED:
            self._dropped = max(0, self._dropped - 1)
        elif tag in _HTML_BREAKING:
            self._emit(" ")

    def handle_data(self, data: str) -> None:
        self._sync()
        if self._dropped or self._in_head:
            return
        self._emit(data)

    def handle_entityref(self, name: str) -> None:
        self._sync()
        self._emit(_single_line(unescape(f"&{name};")))

    def handle_charref(self, name: str) -> None:
        self._sync()
        self._emit(_single_line(unescape(f"&#{name};")))


def _single_line(text: str) -> str:
    """Replace line breaks produced by a character reference, which would shift line numbers."""
    return text.replace("\n", " ").replace("\r", " ")


def html_visible_text(source: str) -> str:
    """Return the visible text of HTML source with tags removed and every newline kept in place."""
    parser = _VisibleTextParser()
    parser.feed(source)
    parser.close()
    missing = source.count("\n") - parser.newlines
    if missing > 0:
        parser.parts.append("\n" * missing)
    text = _SPACES.sub(" ", "".join(parser.parts))
    return _LINE_EDGE_SPACES.sub("\n", text).strip(" ")


_HEADING_TAGS = {f"h{n}": n for n in range(1, 7)}


class _OutlineParser(HTMLParser):
    """Collects an HTML page's <title> and its h1-h6 headings with the source line of each."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title: list[str] = []
        self.headings: list[Heading] = []
        self._open: tuple[int, int, list[str]] | None = None
        self._in_title = False
        self._skipped = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in ("script", "style", "template"):
            self._skipped += 1
        elif tag in _HEADING_TAGS and self._open is None:
            self._open = (self.getpos()[0], _HEADING_TAGS[tag], [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in ("script", "style", "template"):
            self._skipped = max(0, self._skipped - 1)
        elif tag in _HEADING_TAGS and self._open is not None:
            line, level, parts = self._open
            text = one_line("".join(parts)).rstrip("¶§# ")  # Sphinx's and others' anchors
            if text:
                self.headings.append(Heading(line, level, text))
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._skipped:
            return
        if self._in_title:
            self.title.append(data)
        elif self._open is not None:
            self._open[2].append(data)


def html_outline(source: str) -> tuple[str, list[Heading]]:
    """Return an HTML page's <title> text and its h1-h6 headings (on their source lines)."""
    parser = _OutlineParser()
    parser.feed(source)
    parser.close()
    return "".join(parser.title), parser.headings

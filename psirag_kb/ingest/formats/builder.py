"""Assembles extracted text piece by piece, recording a segment wherever the location changes."""

from __future__ import annotations

import re
from typing import Any

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats import Extracted, Segment

# Control characters other than tab and newline; vertical tab and form feed are line breaks.
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f\ufeff]")
_BREAKS = re.compile(r"\r\n?|[\x0b\x0c\u2028\u2029]")
_TRAILING_SPACE = re.compile(r"[ \t]+\n")
_BLANK_RUNS = re.compile(r"\n{3,}")
_LEADING_BLANK_LINES = re.compile(r"^(?:[ \t]*\n)+")


def clean_text(text: str) -> str:
    """Normalise line breaks, drop control characters, blank-line runs and blank ends.

    The first line's indentation is kept (code cells).
    """
    if text.isprintable():  # one line, nothing to replace: the common case
        return text.rstrip()
    text = _CONTROLS.sub("", _BREAKS.sub("\n", text)).replace("\xa0", " ")
    text = _BLANK_RUNS.sub("\n\n", _TRAILING_SPACE.sub("\n", text))
    return _LEADING_BLANK_LINES.sub("", text).rstrip()


def one_line(text: str) -> str:
    """Collapse a text (a table cell, a header field) to one line of single spaces."""
    return " ".join(clean_text(text).split())


class TextBuilder:
    """Collects text blocks with their locations and builds an Extracted from them."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._segments: list[Segment] = []
        self._size = 0
        self._last: dict[str, Any] | None = None

    def add(self, text: str, location: dict[str, Any], *, separator: str = "\n\n") -> None:
        """Append a block of text (cleaned; empty blocks are dropped) found at a location."""
        text = clean_text(text)
        if not text:
            return
        if self._parts:
            self._parts.append(separator)
            self._size += len(separator)
        if location != self._last:
            self._segments.append(Segment(self._size, dict(location)))
            self._last = dict(location)
        self._parts.append(text)
        self._size += len(text)

    @property
    def empty(self) -> bool:
        """Whether no text was added yet."""
        return not self._parts

    def build(self) -> Extracted:
        """Return the text and segments, raising SkippedFile("empty file") when there is no text."""
        if not self._parts:
            raise SkippedFile("empty file")
        return Extracted(text="".join(self._parts), segments=list(self._segments))

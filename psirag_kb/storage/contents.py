"""How much of a chunk is a contents or index listing, scored once as the chunk is stored.

A table of contents points at the text a question is about ("7.6. Helgrind Command-line
Options ..... 131") and shares its words, so retrieval likes it; search ranks such chunks
below the text they point to (`search/contents.py`). The score is the share of the chunk's
lines that look like listing entries:

- a dot leader before a page number ("Overview ........ 119", "Index . . . . 7");
- a numbered heading ending in a page number ("7.6 Helgrind Command-line Options 131");
- a numbered heading of two or more levels alone on its line ("7.4.1. A Simple Data Race"),
  the form of an HTML page's contents list;
- an index entry: words, then page numbers after a comma ("--tool option, 5, 17-19");
- the heading of such a page ("Table of Contents", "Contents", "Index").

Blank lines do not count; a chunk of one short line is never a listing.
"""

from __future__ import annotations

import re

LISTING = 0.5
"""A chunk with at least this share of listing lines is a contents or index listing."""
MIN_LINES = 3
"""Fewer non-blank lines than this score 0: a lone heading is not a listing."""

_PAGE = r"(?:\d{1,4}|[ivxlcdm]{1,7})"
_LEADER = re.compile(rf"\S.*?(?:\.\s?){{4,}}\s*{_PAGE}\s*$", re.IGNORECASE)
_NUMBER = r"(?:[A-Z]\.|\d{1,3}\.)(?:\d{1,3}\.?)*"
_PAGED_HEADING = re.compile(rf"^{_NUMBER}\s+\S.{{0,120}}?\s{_PAGE}$", re.IGNORECASE)
_DEEP_HEADING = re.compile(r"^(?:[A-Z]|\d{1,3})\.\d{1,3}(?:\.\d{1,3})*\.?\s+[^\s.].{0,110}$")
_INDEX_ENTRY = re.compile(r"^[^\d\s].{0,80}?,\s*\d{1,4}(?:\s*[-–,]\s*\d{1,4})*\s*$")
_TITLES = frozenset({"contents", "table of contents", "index", "list of figures",
                     "list of tables", "list of examples"})


def listing_line(line: str) -> bool:
    """Whether one (stripped, non-blank) line looks like an entry of a contents or index page."""
    if line.lower().rstrip(":") in _TITLES:
        return True
    if len(line) > 200 or line.endswith((".", ":", ";", "?", "!")):
        return False
    return bool(_LEADER.match(line) or _PAGED_HEADING.match(line)
                or _DEEP_HEADING.match(line) or _INDEX_ENTRY.match(line))


def contents_score(text: str) -> float:
    """The share (0 to 1) of a chunk's non-blank lines that are contents or index entries."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if len(lines) < MIN_LINES:
        return 0.0
    return round(sum(listing_line(line) for line in lines) / len(lines), 3)

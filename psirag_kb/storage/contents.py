"""How much of a chunk is a contents or index listing, scored once as the chunk is stored.

A table of contents points at the text a question is about ("7.6. Helgrind Command-line
Options ..... 131") and shares its words, so retrieval likes it; search ranks such chunks
below the text they point to (`search/contents.py`). The score is the share of the chunk's
lines that look like listing entries:

- a dot leader before a page number ("Overview ........ 119", "Index . . . . 7"), or cut
  short by a chunk's boundary ("2.4. OPTIONS . . . .", ". . . . 26");
- a numbered heading ending in a page number ("7.6 Helgrind Command-line Options 131");
- a numbered heading of two or more levels alone on its line ("7.4.1. A Simple Data Race"),
  the form of an HTML page's contents list;
- an index entry: words, then page numbers after a comma ("--tool option, 5, 17-19");
- a page or section number alone on its line ("131", "7.6."), where a chunk's boundary cut an
  entry in two;
- the heading of such a page ("Table of Contents", "Contents", "Index").

Blank lines do not count; in a chunk of one or two lines only dot leaders and lone numbers
do (a lone numbered heading is a section's start).
"""

from __future__ import annotations

import re

LISTING = 0.5
"""A chunk with at least this share of listing lines is a contents or index listing."""
MIN_LINES = 3
"""In a chunk of fewer non-blank lines only dot leaders and lone numbers count."""

_PAGE = r"(?:\d{1,4}|[ivxlcdm]{1,7})"
_LEADER = re.compile(rf"(?:\S.*?)?(?:(?:\.\s?){{4,}}\s*{_PAGE}|(?:\.\s?){{8,}})\s*$",
                     re.IGNORECASE)
_NUMBER = r"(?:[A-Z]|\d{1,3})\.(?:\d{1,3}\.)*(?:\d{1,3})?"
"""A section number ("7.", "7.6", "7.4.1.", "A.2"): one way to read any digits (a dot between
groups, never an optional one, which made a long number's backtracking exponential)."""
_PAGED_HEADING = re.compile(rf"^{_NUMBER}\s+\S.{{0,120}}?\s{_PAGE}$", re.IGNORECASE)
_DEEP_HEADING = re.compile(r"^(?:[A-Z]|\d{1,3})\.\d{1,3}(?:\.\d{1,3})*\.?\s+[^\s.].{0,110}$")
_FRAGMENT = re.compile(rf"^(?:{_PAGE}|(?:\d{{1,3}}\.)+\d{{0,3}})$", re.IGNORECASE)
_INDEX_ENTRY = re.compile(r"^[^\d\s].{0,80}?,\s*\d{1,4}(?:\s*[-–,]\s*\d{1,4})*\s*$")
_TITLES = frozenset({"contents", "table of contents", "index", "list of figures",
                     "list of tables", "list of examples"})


def listing_line(line: str) -> bool:
    """Whether one (stripped, non-blank) line looks like an entry of a contents or index page."""
    if line.lower().rstrip(":") in _TITLES:
        return True
    if len(line) > 200:
        return False
    if _LEADER.match(line):
        return True
    if line.endswith((".", ":", ";", "?", "!")):
        return False
    return bool(_PAGED_HEADING.match(line) or _DEEP_HEADING.match(line)
                or _INDEX_ENTRY.match(line) or _FRAGMENT.match(line))


def contents_score(text: str) -> float:
    """The share (0 to 1) of a chunk's non-blank lines that are contents or index entries."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return 0.0
    listed = (listing_line if len(lines) >= MIN_LINES else lambda line: len(line) <= 200 and
              bool(_LEADER.match(line) or _FRAGMENT.match(line)))
    return round(sum(map(listed, lines)) / len(lines), 3)

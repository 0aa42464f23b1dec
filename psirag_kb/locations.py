"""Locations for people: {"sheet": "Q1", "rows": [2, 41]} becomes `sheet Q1 rows 2-41`.

A result carries `lines` (of the extracted text) and, for PDFs, office, e-book, mail and notebook
files, a `location` a person can open. `place` is how the CLI, the TUI and the agent's citations
name a result: `report.pptx slide 3`, `paper.pdf p. 4`, `notes.md:12-18`.
"""

from __future__ import annotations

from typing import Any

LABEL_CHARS = 40
"""Headings and titles longer than this are cut in a description."""

# (key, word before a single value, word before a [first, last] range), in the order shown
_PARTS = (
    ("section", "section", "section"),
    ("sheet", "sheet", "sheet"),
    ("page", "p.", "pp."),
    ("pages", "p.", "pp."),
    ("slide", "slide", "slides"),
    ("slides", "slide", "slides"),
    ("paragraph", "paragraph", "paragraphs"),
    ("paragraphs", "paragraph", "paragraphs"),
    ("table", "table", "tables"),
    ("row", "row", "rows"),
    ("rows", "row", "rows"),
    ("cell", "cell", "cells"),
    ("cells", "cell", "cells"),
)
_LABELS = {"title", "heading", "type", "part"}


def describe(location: dict[str, Any] | None) -> str:
    """A location in words: `slide 3 "Results"`, `sheet Q1 rows 2-41`, `p. 4`, `cell 4 (code)`."""
    if not location:
        return ""
    words: list[str] = []
    known = {key for key, _, _ in _PARTS} | _LABELS
    for key, single, plural in _PARTS:
        if key in location:
            words.append(_item(location[key], single, plural))
    if "part" in location:
        words.append(str(location["part"]))
    words.extend(f"{key} {_value(value)}" for key, value in location.items() if key not in known)
    if location.get("type"):
        words.append(f"({location['type']})")
    if location.get("title"):
        words.append(_quoted(location["title"]))
    if location.get("heading"):
        words.append(f"under {_quoted(location['heading'])}")
    return " ".join(w for w in words if w)


def suffix(item: dict[str, Any]) -> str:
    """What follows a result's source: ` slide 3` for a location, `:12-18` for lines, or ""."""
    location = item.get("location")
    if isinstance(location, dict) and location:
        return " " + describe(location)
    lines = item.get("lines")
    if lines:
        return f":{lines[0]}-{lines[1]}"
    return ""


def place(item: dict[str, Any]) -> str:
    """Where a result is: `source slide 3`, `source:12-18`, or the source (a corpus record)."""
    return str(item.get("source") or item.get("path") or "") + suffix(item)


def _item(value: Any, single: str, plural: str) -> str:
    """`p. 4`, `pp. 4-5`, `sheet Q1`: a word and a value or range."""
    if isinstance(value, list | tuple) and len(value) == 2:
        first, last = value
        return f"{single} {first}" if first == last else f"{plural} {first}-{last}"
    return f"{single} {_value(value)}"


def _value(value: Any) -> str:
    """A value on one line, quoted when it holds spaces (a sheet named `Q1 2024`)."""
    if isinstance(value, list | tuple):
        return "-".join(map(str, value))
    text = " ".join(str(value).split())
    return _quoted(text) if " " in text else text


def _quoted(value: Any) -> str:
    """A heading or title in quotes, cut to LABEL_CHARS."""
    text = " ".join(str(value).split())
    if len(text) > LABEL_CHARS:
        text = text[: LABEL_CHARS - 1].rstrip() + "…"
    return f'"{text}"'

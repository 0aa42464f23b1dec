"""Document text for the page: escaped first, then the query's terms wrapped in <mark>."""

from __future__ import annotations

import re
from typing import Any

from markupsafe import Markup, escape

from psirag_kb.locations import describe

MIN_TERM = 2
MAX_TERMS = 20


def terms(query: str) -> list[str]:
    """The words of a query worth highlighting (two characters or more), longest first."""
    words = {w.lower() for w in re.findall(r"\w+", query) if len(w) >= MIN_TERM}
    return sorted(words, key=lambda w: (-len(w), w))[:MAX_TERMS]


def highlight(text: str, query: str) -> Markup:
    """`text` escaped, with the query's terms marked: the raw text is split at the terms and
    every piece escaped on its own, so no markup of the document survives."""
    found = terms(query)
    if not found:
        return Markup(escape(text))
    pattern = re.compile(r"\b(" + "|".join(re.escape(t) for t in found) + r")\b", re.IGNORECASE)
    pieces = pattern.split(text)
    out = []
    for index, piece in enumerate(pieces):
        out.append(Markup("<mark>%s</mark>") % piece if index % 2 else escape(piece))
    return Markup("").join(out)


def where(item: dict[str, Any]) -> str:
    """A location a person reads: `p. 4`, `slide 3 "Results"`, `sheet Q1 rows 2-41`,
    `lines 12-18` ("" for a corpus record)."""
    location = item.get("location")
    if isinstance(location, dict) and set(location) == {"lines"}:
        item, location = location, None
    if isinstance(location, dict) and location:
        return describe(location)
    lines = item.get("lines")
    if lines:
        first, last = lines
        return f"line {first}" if first == last else f"lines {first}-{last}"
    return ""


def file_name(source: str) -> str:
    """The last part of a path (the whole source for a corpus record)."""
    return source.rstrip("/").rsplit("/", 1)[-1] or source


def title(node: dict[str, Any]) -> str:
    """A topic's display label, else its abstract, else (not summarised yet) its number."""
    return str(node.get("label") or node.get("abstract") or f"Topic {node.get('id', '')}".strip())

"""Document text for the page: escaped first, then the query's terms wrapped in <mark>."""

from __future__ import annotations

import re
from typing import Any

from markupsafe import Markup, escape

from psirag_kb.locations import describe

MIN_TERM = 2
MAX_TERMS = 20
EXCERPT_CHARS = 600
"""How much of a passage a search result shows."""


def terms(query: str) -> list[str]:
    """The words of a query worth highlighting (two characters or more), longest first."""
    words = {w.lower() for w in re.findall(r"\w+", query) if len(w) >= MIN_TERM}
    return sorted(words, key=lambda w: (-len(w), w))[:MAX_TERMS]


def _pattern(query: str) -> re.Pattern[str] | None:
    """A regular expression matching the query's terms as whole words (None without terms)."""
    found = terms(query)
    if not found:
        return None
    return re.compile(r"\b(" + "|".join(re.escape(t) for t in found) + r")\b", re.IGNORECASE)


def excerpt(text: str, query: str, width: int = EXCERPT_CHARS) -> str:
    """About `width` characters of `text` on one line, from where the query's first term is
    when it lies beyond them (a long passage's match stays in view), "…" where cut."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    pattern = _pattern(query)
    found = pattern.search(flat) if pattern is not None else None
    start = 0
    if found is not None and found.end() > width - width // 4:
        start = max(0, min(found.start() - width // 4, len(flat) - width))
        space = flat.find(" ", start, found.start()) if start else -1
        start = space + 1 if space >= 0 else start  # at a word
    end = start + width
    if end < len(flat):
        space = flat.rfind(" ", start, end)
        end = space if space > start else end
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) else "")


def highlight(text: str, query: str) -> Markup:
    """`text` escaped, with the query's terms marked: the raw text is split at the terms and
    every piece escaped on its own, so no markup of the document survives."""
    pattern = _pattern(query)
    if pattern is None:
        return Markup(escape(text))
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


def distinct_names(sources: list[str]) -> list[str]:
    """Each path's shortest tail of folders that no other path in the list ends with
    ("findutils/changelog.gz" beside "bash/changelog.gz"; a lone name stays a name)."""
    parts = [source.rstrip("/").split("/") for source in sources]
    names = []
    for mine in parts:
        depth = 1
        while depth < len(mine) and any(
                other is not mine and other[-depth:] == mine[-depth:] for other in parts):
            depth += 1
        names.append("/".join(mine[-depth:]) or "/".join(mine))
    return names


def title(node: dict[str, Any]) -> str:
    """A topic's display label, else its abstract, else (not summarised yet) its number."""
    return str(node.get("label") or node.get("abstract") or f"Topic {node.get('id', '')}".strip())


def shaped(result: dict[str, Any]) -> dict[str, Any]:
    """An agent result as the page shows it: MCP's shape (the same note without an LLM), with
    the answer's [n] markers linked to their citations."""
    from psirag_kb.serving.shapes import answer_result

    out: dict[str, Any] = dict(answer_result(result))
    numbers = {int(c.get("number") or i + 1): c for i, c in enumerate(out["citations"])}
    out["answer_html"] = cited(out.get("answer") or "", numbers)
    return out


def cited(text: str, numbers: dict[int, Any]) -> Markup:
    """The answer escaped, each known [n] made a link to its source view."""
    escaped = str(escape(text))

    def link(match: re.Match[str]) -> str:
        citation = numbers.get(int(match.group(1)))
        if citation is None:
            return match.group(0)
        return f'<a class="cite" href="/source/{int(citation["id"])}">[{int(match.group(1))}]</a>'

    return Markup(re.sub(r"\[(\d{1,4})\]", link, escaped))

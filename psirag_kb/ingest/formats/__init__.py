"""Readers for structured formats (office, OpenDocument, EPUB, mail, notebooks) with locations.

Each reader turns a file's bytes into an `Extracted`: plain text plus `Segment`s that say where in
the original document each part of the text comes from, in a form a person can open (slide 3,
sheet "Q1" rows 2-41, paragraph 12 under heading "Results", cell 4, the mail's body).
"""

from __future__ import annotations

import bisect
import importlib
import logging
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats.bounds import UnpackLimits, check_unpacked

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Segment:
    """Where a part of the extracted text comes from: it starts at `start` and runs to the next."""

    start: int
    location: dict[str, Any]


@dataclass(frozen=True)
class Extracted:
    """A document's text and its segments, sorted by start (the first starts at 0)."""

    text: str
    segments: list[Segment]
    title: str = ""
    """The title the file's metadata gives (a mail's subject); "" when it has none."""


STRUCTURED_KINDS: dict[str, str] = {
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".odt": "odt",
    ".odp": "odp",
    ".ods": "ods",
    ".epub": "epub",
    ".eml": "eml",
    ".msg": "msg",
    ".ipynb": "ipynb",
}
"""Lower-case file suffix -> kind, for every kind `read_structured` reads."""

_READERS: dict[str, tuple[str, str]] = {
    "docx": ("office", "read_docx"),
    "pptx": ("office", "read_pptx"),
    "xlsx": ("office", "read_xlsx"),
    "odt": ("opendocument", "read_opendocument"),
    "odp": ("opendocument", "read_opendocument"),
    "ods": ("opendocument", "read_opendocument"),
    "epub": ("epub", "read_epub"),
    "eml": ("mail", "read_eml"),
    "msg": ("mail", "read_msg"),
    "ipynb": ("notebook", "read_notebook"),
}

# Errors a reader's library may raise on bad content; anything else is a bug and propagates.
_CONTENT_ERRORS = (
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    LookupError,
    EOFError,
    OSError,
    RecursionError,
    UnicodeError,
    AssertionError,
    NotImplementedError,
    zipfile.BadZipFile,
    zlib.error,
    SyntaxError,  # xml.etree's ParseError is a SyntaxError
)


ZIP_KINDS = frozenset({"docx", "pptx", "xlsx", "odt", "odp", "ods", "epub"})
"""Kinds stored in a zip container: unpacked in bounded reads against limits before parsing."""


def read_structured(path: Path, data: bytes, kind: str,
                    limits: UnpackLimits | None = None) -> Extracted:
    """Extract a structured file's text and locations, raising SkippedFile when it cannot be.

    A zip-based document is first checked against `limits` (defaults: UnpackLimits()).
    """
    try:
        module_name, function_name = _READERS[kind]
    except KeyError:
        raise SkippedFile(f"unsupported file type .{kind}") from None
    if not data:
        raise SkippedFile("empty file")
    reader = getattr(importlib.import_module(f"{__name__}.{module_name}"), function_name)
    try:
        if kind in ZIP_KINDS:
            check_unpacked(data, kind, limits or UnpackLimits())
        extracted = reader(data, kind)
    except SkippedFile:
        raise
    except _CONTENT_ERRORS as exc:
        logger.debug("%s: %s reader failed", path, kind, exc_info=True)
        raise SkippedFile(f"damaged .{kind}: {_describe(exc)}", damaged=True) from exc
    except Exception as exc:  # libraries raise their own error classes on malformed input
        if type(exc).__module__.startswith(("builtins", "psirag_kb")):
            raise
        logger.debug("%s: %s reader failed", path, kind, exc_info=True)
        raise SkippedFile(f"damaged .{kind}: {_describe(exc)}", damaged=True) from exc
    logger.debug("read %s (%s, %d chars, %d segments)", path, kind, len(extracted.text),
                 len(extracted.segments))
    return extracted


def _describe(exc: BaseException) -> str:
    """Return a one-line description of a library error for a skip reason."""
    message = " ".join(str(exc).split())[:200]
    if isinstance(exc, zlib.error):
        return f"corrupt compressed data ({message})"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def location_at(extracted: Extracted, offset: int) -> dict[str, Any] | None:
    """Return the location of the segment covering a character offset (None without segments)."""
    starts = [s.start for s in extracted.segments]
    index = bisect.bisect_right(starts, offset) - 1
    return dict(extracted.segments[max(index, 0)].location) if extracted.segments else None


def span_location(extracted: Extracted, start: int, end: int) -> dict[str, Any] | None:
    """Return the merged location of the segments a span [start, end) covers (see merge)."""
    return span_locations(extracted, [(start, end)])[0]


def span_locations(extracted: Extracted,
                   spans: list[tuple[int, int]]) -> list[dict[str, Any] | None]:
    """Return the merged location of each span [start, end), bisecting one list of starts."""
    if not extracted.segments:
        return [None] * len(spans)
    starts = [s.start for s in extracted.segments]
    out: list[dict[str, Any] | None] = []
    for start, end in spans:
        first = max(bisect.bisect_right(starts, start) - 1, 0)
        last = max(bisect.bisect_left(starts, max(end, start + 1)) - 1, first)
        out.append(merge_locations([s.location for s in extracted.segments[first : last + 1]]))
    return out


_ANCHORS = ("sheet", "section", "part")


def anchor_breaks(segments: list[Segment]) -> list[int]:
    """Return the starts of segments in another sheet, section or mail part than the one before
    (a chunk should not run across them: one location cannot name two sheets)."""
    breaks = []
    for before, segment in zip(segments, segments[1:], strict=False):
        if any(before.location.get(k) != segment.location.get(k) for k in _ANCHORS):
            breaks.append(segment.start)
    return breaks
_PLURALS = {"paragraph": "paragraphs", "slide": "slides", "cell": "cells", "row": "rows",
            "page": "pages"}


def merge_locations(locations: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge consecutive locations into one: numbers become [first, last] ranges.

    A number that differs ({"slide": 2}, {"slide": 3}) becomes a range under the plural key
    ({"slides": [2, 3]}); [first, last] ranges are joined; other values (a heading, a title) keep
    the first location's value. Only locations in the first one's sheet, section and part are
    merged, so a range never spans two sheets; table rows are kept only when all the locations are
    rows of one table (the paragraph range covers the rest).
    """
    if not locations:
        return {}
    head = locations[0]
    same = [loc for loc in locations if all(loc.get(k) == head.get(k) for k in _ANCHORS)]
    if len({repr(loc.get("table")) for loc in same}) > 1:
        same = [{k: v for k, v in loc.items() if k not in ("table", "row")} for loc in same]
    merged: dict[str, Any] = {}
    for key in dict.fromkeys(k for loc in same for k in loc):
        values = [loc[key] for loc in same if key in loc]
        if all(v == values[0] for v in values):
            merged[key] = values[0]
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            merged[_PLURALS.get(key, key)] = [min(values), max(values)]
        elif all(_is_range(v) for v in values):
            merged[key] = [min(v[0] for v in values), max(v[1] for v in values)]
        else:
            merged[key] = values[0]
    return merged


def _is_range(value: object) -> bool:
    """Tell whether a value is a [first, last] pair of integers."""
    return (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) for v in value)
    )


def same_place(first: dict[str, Any] | None, second: dict[str, Any] | None) -> bool:
    """Tell whether two chunks' locations lie in one sheet, section and mail part (so one
    location can name them both)."""
    return all((first or {}).get(k) == (second or {}).get(k) for k in _ANCHORS)


def join_locations(locations: list[dict[str, Any]]) -> dict[str, Any]:
    """Join the locations of consecutive chunks in one place (see `same_place`), each a number
    or already a range ({"cell": 2}, {"cells": [3, 6]}), into one: {"cells": [2, 6]}."""
    singular = {plural: key for key, plural in _PLURALS.items()}
    if len({repr(loc.get("table")) for loc in locations}) > 1:  # rows of different tables
        locations = [{k: v for k, v in loc.items() if k not in ("table", "row", "rows")}
                     for loc in locations]
    ranges = [{_PLURALS[k] if k in _PLURALS and _is_number(v) else k:
               [v, v] if k in _PLURALS and _is_number(v) else v for k, v in loc.items()}
              for loc in locations]
    joined = merge_locations(ranges)
    return {singular[k] if k in singular and _is_range(v) and v[0] == v[1] else k:
            v[0] if k in singular and _is_range(v) and v[0] == v[1] else v
            for k, v in joined.items()}


def _is_number(value: object) -> bool:
    """Tell whether a location value is a plain integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)

"""Chunk context: a short header (document title, heading path) embedded and indexed with a chunk.

A chunk cut from the middle of a document no longer says what the document is about. Its
header names the document (a title the reader found, else the file name) and the headings above
the chunk, "Garbage collection > Generations > Thresholds". The header is embedded and indexed
with the chunk's text; results show the text alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from psirag_kb.ingest.chunking import word_token_count
from psirag_kb.storage.titles import SEPARATOR

HEADER_TOKENS = 30
"""A header is cut to about this many tokens (a fifth of a ~100-token chunk at most)."""
_PART_CHARS = 300
"""Characters of one title or heading kept before the header is fitted to HEADER_TOKENS."""
_ATX = re.compile(r"^[ ]{0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$", re.M)
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_FRONT_TITLE = re.compile(r"^title:[ \t]*(.+?)[ \t]*$", re.M)
_FILE_TITLE = re.compile(
    r"\.(?:docx?|pdf|tex|dvi|ps|rtf|odt|odp|ods|pptx?|xlsx?|indd|qxd|txt|md|html?)$", re.I
)
_PLACEHOLDER_TITLES = frozenset(
    {"untitled", "title", "document", "presentation", "slide 1", "powerpoint presentation",
     "no title", "(anonymous)", "none"}
)
_CODE_CELLS = frozenset({"code", "raw"})


@dataclass(frozen=True)
class Heading:
    """A heading of a document: its 1-based line in the document's text, level (1 is the top)
    and text."""

    line: int
    level: int
    text: str


def one_line(text: str) -> str:
    """Collapse whitespace to single spaces and cut to _PART_CHARS characters."""
    return " ".join(text.split())[:_PART_CHARS].strip()


def usable_title(title: str | None) -> str:
    """A reader's title when it names the document, else "" (empty, a placeholder or a file
    name such as "Microsoft Word - draft3.doc")."""
    text = one_line(title or "")
    if not text or text.lower() in _PLACEHOLDER_TITLES or _FILE_TITLE.search(text):
        return ""
    if text.lower().startswith("microsoft ") and " - " in text:
        return ""
    return text


def hash_headings(text: str, skipped: Sequence[tuple[int, int]] = ()) -> list[Heading]:
    """Markdown-style "# Heading" lines of a text, except those in the `skipped` [start, end)
    offset ranges (code cells)."""
    found = []
    line, last = 1, 0
    for match in _ATX.finditer(text):
        line += text.count("\n", last, match.start())
        last = match.start()
        if any(start <= match.start() < end for start, end in skipped):
            continue
        heading = one_line(match.group(2))
        if heading:
            found.append(Heading(line, len(match.group(1)), heading))
    return found


def code_ranges(text_length: int, segments: Sequence[tuple[int, dict]]) -> list[tuple[int, int]]:
    """The [start, end) offsets of notebook code and raw cells among (start, location)
    segments."""
    ranges = []
    for index, (start, location) in enumerate(segments):
        if location.get("type") in _CODE_CELLS:
            end = segments[index + 1][0] if index + 1 < len(segments) else text_length
            ranges.append((start, end))
    return ranges


def front_matter(source: str) -> tuple[str, int]:
    """A Markdown file's YAML front matter: its `title:` ("" if none) and its last line (0
    when there is no front matter)."""
    match = _FRONT_MATTER.match(source)
    if match is None:
        return "", 0
    title = _FRONT_TITLE.search(match.group(1))
    value = title.group(1).strip("'\"") if title else ""
    return value, source.count("\n", 0, match.end()) + (not match.group(0).endswith("\n"))


def title_heading(headings: Sequence[Heading]) -> Heading | None:
    """The document's own title among its headings: the first one, when no other heading is at
    its level or above (a lone top heading, as docutils promotes it)."""
    if not headings:
        return None
    first = headings[0]
    if any(h.level <= first.level for h in headings[1:]):
        return None
    return first


def file_title(path: Path | str) -> str:
    """A file's name without its extension, as the title of a document that has none."""
    return one_line(Path(path).stem or Path(path).name)


def chunk_headers(title: str, headings: Sequence[Heading], name: str,
                  first_lines: Sequence[int], cap: int = HEADER_TOKENS) -> list[str]:
    """The header of each chunk, given the chunks' first lines in document order.

    The title is the reader's `title`, else the document's lone top heading. The path is the
    headings open at the chunk's first line, less those the chunk starts with (its text says
    them) and the title. A chunk that starts with its title gets no title. Without a title,
    the file's `name` stands in only for chunks with no heading at all, above or at their
    start: a name like "notes-0012" said nothing the headings do not, and cost dense recall.
    """
    headings = sorted(headings, key=lambda h: h.line)
    given = usable_title(title)
    top = None if given else title_heading(headings)
    title = given or (top.text if top else "")
    stack: list[Heading] = []
    headers: list[str] = []
    index = 0
    for first in first_lines:
        while index < len(headings) and headings[index].line < first:
            heading = headings[index]
            index += 1
            if heading is not top:
                _push(stack, heading)
        opening = _starting(headings, index, first)
        below = min((h.level for h in opening), default=None)
        path = [h.text for h in stack if (below is None or h.level < below)
                and not said_by(title, h.text)]
        if not title:
            headers.append(fit(path or ([] if opening else [name]), cap))
            continue
        named = not any(said_by(title, h.text) for h in opening)
        headers.append(fit([title, *path] if named else path, cap))
    return headers


def said_by(title: str, heading: str) -> bool:
    """Tell whether a title already says a heading: the same words, or the heading followed by
    a separator ("gc — Garbage Collector" in "gc — Garbage Collector — Python docs")."""
    if heading.lower() == title.lower():
        return True
    return re.match(re.escape(heading) + r"\s*[—–|:·-]\s", title, re.I) is not None


def _starting(headings: Sequence[Heading], index: int, line: int) -> list[Heading]:
    """The headings on `line`, from `index` on (headings sorted by line)."""
    end = index
    while end < len(headings) and headings[end].line == line:
        end += 1
    return list(headings[index:end])


def _push(stack: list[Heading], heading: Heading) -> None:
    """Open a heading: it closes the open headings at its level and below."""
    while stack and stack[-1].level >= heading.level:
        stack.pop()
    stack.append(heading)


def fit(parts: list[str], cap: int = HEADER_TOKENS) -> str:
    """Join header parts with " > ", dropping outer headings (after the title) and then
    cutting words until the header is at most `cap` tokens."""
    parts = [one_line(p) for p in parts if p and p.strip()]
    while len(parts) > 2 and word_token_count(SEPARATOR.join(parts)) > cap:
        del parts[1]
    if word_token_count(SEPARATOR.join(parts)) <= cap:
        return SEPARATOR.join(parts)
    share = max(1, (cap - 2 * (len(parts) - 1)) // max(len(parts), 1))
    return SEPARATOR.join(_cut(part, share) for part in parts)


def _cut(text: str, tokens: int) -> str:
    """The first words of a text that fit in `tokens` tokens (a first word too long is cut)."""
    words = text.split()
    kept = [words[0][:6 * tokens]] if words else []
    for word in words[1:]:
        if word_token_count(" ".join([*kept, word])) > tokens:
            break
        kept.append(word)
    return " ".join(kept)

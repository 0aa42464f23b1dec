"""Text to chunks of about `max_tokens` tokens that never cut a sentence; pure and deterministic."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)

_HEADING = re.compile(r"[ ]{0,3}#{1,6}(?:\s|$)")
_UNDERLINE = re.compile(r"\s*([=\-~^\"'`#*+_:.])\1{2,}\s*$")
_BLOCK_START = re.compile(
    r"\s*(?:[-*+•]\s|\d{1,3}[.)]\s|>|\||```|~~~|\.\.\s|[}\])])"
)
_FENCE = re.compile(r"\s*(?:```|~~~)")
_CODE_CHARS = re.compile(r"[=;{}<>|\\$@^~]")
_CSV_FIELD = re.compile(r"[,;]\S")
_HARD_LINE_END = frozenset("{};:[(")
MAX_GAP = 256
"""Whitespace runs longer than this (characters) always separate chunks."""
_LONG_GAP = re.compile(rf"\s{{{MAX_GAP + 1},}}")
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s)|[。！？]+[」』）]*")
_NEXT_NONSPACE = re.compile(r"\s*")
_WORD_BEFORE = re.compile(r"(\w+)$")
_ABBREVIATIONS = frozenset(
    {
        "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "eg", "ie", "cf", "fig",
        "figs", "no", "vol", "pp", "ch", "sec", "approx", "inc", "ltd", "co", "jan", "feb", "mar",
        "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "e", "g", "i",
    }
)
_TOKEN = re.compile(r"\w+|[^\w\s]")
_LONG_WORD = re.compile(r"\w{7,}")
_CODE_DENSITY = 0.05

Span = tuple[int, int]


@dataclass(frozen=True)
class Chunk:
    """A passage of a document: its place (offsets, lines), text and content hash."""

    ordinal: int
    start: int
    end: int
    line_first: int
    line_last: int
    text: str
    hash: str


def word_token_count(text: str) -> int:
    """Approximate a subword tokenizer: one token per word or symbol, more for long words."""
    extra = sum((len(word) - 1) // 6 for word in _LONG_WORD.findall(text))
    return len(_TOKEN.findall(text)) + extra


def content_hash(text: str) -> str:
    """Return the hash that identifies a chunk's text (32 hex characters of sha256)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def split_sentences(text: str) -> list[Span]:
    """Return the (start, end) spans of sentences and line-based pieces, trimmed of whitespace."""
    return [(s, e) for s, e, _ in _sentence_units(text)]


def chunk_text(
    text: str,
    count_tokens: Callable[[str], int],
    *,
    max_tokens: int = 100,
    hard_max_tokens: int = 240,
    breaks: Sequence[int] = (),
) -> list[Chunk]:
    """Pack whole sentences into chunks of at most `max_tokens` (never over `hard_max_tokens`).

    `count_tokens` should count a text's tokens without special tokens; it is called once per
    sentence (and a few more times only for sentences over `hard_max_tokens`). A chunk never
    runs past one of the `breaks` offsets (where a document's sheet, section or mail part
    changes): the sentence starting there starts a new chunk.
    """
    if not 1 <= max_tokens <= hard_max_tokens:
        raise ValueError(f"need 1 <= max_tokens ({max_tokens}) <= hard_max_tokens "
                         f"({hard_max_tokens})")
    units: list[tuple[int, int, int, bool]] = []
    for start, end, heading in _without_gaps(text, _sentence_units(text)):
        tokens = count_tokens(text[start:end])
        if tokens <= hard_max_tokens:
            units.append((start, end, tokens, heading))
            continue
        pieces = _split_long(text, start, end, tokens, count_tokens, max_tokens, hard_max_tokens)
        for i, (s, e, n) in enumerate(pieces):
            units.append((s, e, n, heading and i == 0))
    return _pack(text, units, max_tokens, sorted(breaks))


def _without_gaps(
    text: str, units: list[tuple[int, int, bool]]
) -> Iterator[tuple[int, int, bool]]:
    """Split units at whitespace runs longer than MAX_GAP (padding must not swell a chunk)."""
    for start, end, heading in units:
        cut = start
        for gap in _LONG_GAP.finditer(text, start, end):
            yield cut, gap.start(), heading and cut == start
            cut = gap.end()
        yield cut, end, heading and cut == start


def _pack(text: str, units: list[tuple[int, int, int, bool]], max_tokens: int,
          breaks: list[int]) -> list[Chunk]:
    """Greedily pack consecutive units into chunks, starting a new chunk at full, at headings
    or past a break (sorted offsets)."""
    chunks: list[Chunk] = []
    line = 1
    line_offset = 0
    first = last = 0
    total = 0
    open_chunk = False
    next_break = 0

    def flush() -> None:
        nonlocal line, line_offset
        line += text.count("\n", line_offset, first)
        line_first = line
        line_last = line + text.count("\n", first, last)
        line, line_offset = line_last, last
        body = text[first:last]
        chunks.append(Chunk(len(chunks), first, last, line_first, line_last, body,
                            content_hash(body)))

    for start, end, tokens, heading in units:
        full = total + tokens > max_tokens or (heading and total * 2 > max_tokens)
        crossed = False
        while next_break < len(breaks) and breaks[next_break] <= start:
            next_break += 1
            crossed = True
        if open_chunk and (full or crossed or start - last > MAX_GAP):
            flush()
            open_chunk = False
        if not open_chunk:
            first, total, open_chunk = start, 0, True
        last = end
        total += tokens
    if open_chunk:
        flush()
    return chunks


def _split_long(
    text: str,
    start: int,
    end: int,
    tokens: int,
    count_tokens: Callable[[str], int],
    max_tokens: int,
    hard_max_tokens: int,
) -> list[tuple[int, int, int]]:
    """Split an over-long sentence at line breaks, then whitespace, then anywhere."""
    if "\n" in text[start:end]:
        pieces: list[tuple[int, int, int]] = []
        for s, e in _line_spans(text, start, end):
            n = count_tokens(text[s:e])
            if n <= hard_max_tokens:
                pieces.append((s, e, n))
            else:
                pieces.extend(_split_line(text, s, e, n, count_tokens, max_tokens, hard_max_tokens))
        return pieces
    return _split_line(text, start, end, tokens, count_tokens, max_tokens, hard_max_tokens)


def _split_line(
    text: str,
    start: int,
    end: int,
    tokens: int,
    count_tokens: Callable[[str], int],
    max_tokens: int,
    hard_max_tokens: int,
) -> list[tuple[int, int, int]]:
    """Cut a long line into windows of about `max_tokens` at whitespace, bisecting any overflow."""
    width = max(1, (end - start) * max_tokens // max(tokens, 1))
    pieces: list[tuple[int, int, int]] = []
    pos = start
    while pos < end:
        cut = min(end, pos + width)
        if cut < end:
            space = _last_space(text, pos + 1, cut + 1)
            if space < 0:
                space = _first_space(text, cut, min(end, cut + 4 * width))
            cut = space if space > pos else cut
        span = _trim(text, pos, cut)
        if span is not None:
            s, e = span
            n = count_tokens(text[s:e])
            pieces.extend(_bisect(text, s, e, n, count_tokens, hard_max_tokens))
        pos = cut
    return pieces


def _bisect(
    text: str,
    start: int,
    end: int,
    tokens: int,
    count_tokens: Callable[[str], int],
    hard_max_tokens: int,
) -> list[tuple[int, int, int]]:
    """Halve a piece (at whitespace near the middle when there is some) until it fits."""
    if tokens <= hard_max_tokens or end - start <= 1:
        return [(start, end, tokens)]
    mid = (start + end) // 2
    before = _last_space(text, start + 1, mid + 1)
    after = _first_space(text, mid, end - 1)
    candidates = [c for c in (before, after) if start < c < end]
    cut = min(candidates, key=lambda c: abs(c - mid)) if candidates else mid
    out: list[tuple[int, int, int]] = []
    for span in (_trim(text, start, cut), _trim(text, cut, end)):
        if span is not None:
            s, e = span
            out.extend(_bisect(text, s, e, count_tokens(text[s:e]), count_tokens, hard_max_tokens))
    return out


def _last_space(text: str, lo: int, hi: int) -> int:
    """Return the offset of the last whitespace character in text[lo:hi], or -1."""
    for i in range(hi - 1, lo - 1, -1):
        if text[i].isspace():
            return i
    return -1


def _first_space(text: str, lo: int, hi: int) -> int:
    """Return the offset of the first whitespace character in text[lo:hi], or -1."""
    for i in range(lo, hi):
        if text[i].isspace():
            return i
    return -1


def _skip_space(text: str, pos: int, end: int) -> int:
    """The first position at or after pos (before end) that is not whitespace, else end."""
    found = _NEXT_NONSPACE.match(text, pos, end)
    return end if found is None else found.end()


def _trim(text: str, start: int, end: int) -> Span | None:
    """Shrink a span to exclude surrounding whitespace; None when nothing is left."""
    piece = text[start:end]
    stripped = piece.lstrip()
    if not stripped:
        return None
    s = start + len(piece) - len(stripped)
    return (s, s + len(stripped.rstrip()))


def _line_spans(text: str, start: int, end: int) -> list[Span]:
    """Return the trimmed, non-empty line spans within text[start:end]."""
    spans: list[Span] = []
    pos = start
    while pos < end:
        nl = text.find("\n", pos, end)
        stop = end if nl < 0 else nl
        span = _trim(text, pos, stop)
        if span is not None:
            spans.append(span)
        pos = stop + 1
    return spans


@dataclass(frozen=True, slots=True)
class _Line:
    """One non-blank line and what it says about its neighbours."""

    start: int
    end: int
    heading: bool
    underline: bool
    block_start: bool
    fence: bool
    hard_end: bool
    line_based: bool


def _classify(text: str, start: int, end: int) -> _Line:
    """Describe a non-blank line for the decision whether a line break ends a sentence."""
    line = text[start:end]
    body = line.strip()
    code_chars = len(_CODE_CHARS.findall(body))
    line_based = (
        "\t" in body
        or code_chars > _CODE_DENSITY * len(body)
        or len(_CSV_FIELD.findall(body)) >= 2
    )
    return _Line(
        start=start,
        end=end,
        heading=_HEADING.match(line) is not None,
        underline=_UNDERLINE.match(line) is not None,
        block_start=_BLOCK_START.match(line) is not None,
        fence=_FENCE.match(line) is not None,
        hard_end=body[-1] in _HARD_LINE_END,
        line_based=line_based,
    )


def _breaks_between(prev: _Line, cur: _Line) -> bool:
    """Tell whether the line break between two adjacent non-blank lines ends a piece."""
    return (
        prev.heading or cur.heading or prev.underline or cur.underline or prev.fence
        or cur.block_start or prev.hard_end or prev.line_based or cur.line_based
    )


def _segments(text: str) -> list[tuple[int, int, bool]]:
    """Split text into runs of lines that may flow into each other: (start, end, heading)."""
    lines: list[_Line | None] = []
    pos = 0
    size = len(text)
    while pos <= size:
        blank = text.rfind("\n", pos, _skip_space(text, pos, len(text)))
        if blank >= pos:  # a run of blank lines separates like a single one
            lines.append(None)
            pos = blank + 1
            continue
        nl = text.find("\n", pos)
        stop = size if nl < 0 else nl
        lines.append(None if _trim(text, pos, stop) is None else _classify(text, pos, stop))
        pos = stop + 1
    segments: list[tuple[int, int, bool]] = []
    prev: _Line | None = None
    for index, line in enumerate(lines):
        if line is None:
            prev = None
            continue
        if prev is not None and not _breaks_between(prev, line):
            seg_start, _, heading = segments[-1]
            segments[-1] = (seg_start, line.end, heading)
        else:
            following = lines[index + 1] if index + 1 < len(lines) else None
            heading = line.heading or (following is not None and following.underline
                                       and not line.underline)
            segments.append((line.start, line.end, heading))
        prev = line
    return segments


def _sentence_units(text: str) -> list[tuple[int, int, bool]]:
    """Return trimmed sentence spans with a flag marking those that start a section heading."""
    units: list[tuple[int, int, bool]] = []
    for seg_start, seg_end, heading in _segments(text):
        first = len(units)
        cur = seg_start
        for match in _SENTENCE_END.finditer(text, seg_start, seg_end):
            nxt = _skip_space(text, match.end(), seg_end)
            if nxt >= seg_end or text[nxt].islower() or _is_abbreviation(text, match, cur):
                continue
            _append_trimmed(units, text, cur, match.end())
            cur = nxt
        _append_trimmed(units, text, cur, seg_end)
        if heading and len(units) > first:
            s, e, _ = units[first]
            units[first] = (s, e, True)
    return units


def _is_abbreviation(text: str, match: re.Match[str], floor: int) -> bool:
    """Tell whether a full stop ends a known abbreviation ("e.g.", "Dr.") rather than a sentence."""
    if match.group()[0] != "." or match.end() - match.start() != 1:
        return False
    word = _WORD_BEFORE.search(text, max(floor, match.start() - 12), match.start())
    return word is not None and word.group(1).lower() in _ABBREVIATIONS


def _append_trimmed(units: list[tuple[int, int, bool]], text: str, start: int, end: int) -> None:
    """Append a span without its surrounding whitespace, if anything is left."""
    span = _trim(text, start, end)
    if span is not None:
        units.append((*span, False))

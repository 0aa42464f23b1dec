"""reStructuredText to the text a reader sees, cleaned line by line so line N stays on line N.

Follows docutils' syntax rules: section adornments, comments, targets and directive markup are
blanked; a directive's argument and content stay (code directives and `::` literal blocks are
kept verbatim); roles, links, substitutions and emphasis are reduced to their text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from psirag_kb.ingest.context import Heading, one_line

_ADORNMENT = re.compile(r"""^([!-/:-@\[-`{-~])\1{2,}\s*$""")
_TABLE_BORDER = re.compile(r"^\s*[=+-]{2,}[=+\- ]*\s*$|^\s*\+[-=+]+\+\s*$")
_EXPLICIT = re.compile(r"^(\s*)\.\.(?:\s+(.*))?$")
_DIRECTIVE = re.compile(r"^(?:\|[^|]+\|\s+)?([\w:.+-]+)::(?:\s+(.*))?$")
_OPTION = re.compile(r"^\s*:[\w -]+:(?:\s.*)?$")
_CODE = frozenset({
    "code", "code-block", "sourcecode", "doctest", "testcode", "testoutput", "literalinclude",
    "productionlist", "parsed-literal", "math",
})
_DROPPED = frozenset({
    "toctree", "image", "figure", "raw", "include", "highlight", "contents", "sectnum",
    "index", "currentmodule", "module", "only", "tabularcolumns", "default-role", "role",
    "meta", "csv-table", "autosummary", "automodule", "autoclass", "autofunction",
    "literalinclude", "highlightlang", "sectionauthor", "moduleauthor", "codeauthor",
})
_ARGUMENT_DROPPED = _CODE | _DROPPED | {"class", "container", "tab-set", "grid", "card"}

_ROLE_LINK = re.compile(r":[A-Za-z][\w.+:-]*:`([^`<]*?)\s*<[^`>]*>`|`([^`<]+?)\s*<[^`>]*>`__?")
_ROLE = re.compile(r":[A-Za-z][\w.+:-]*:`([^`]*)`|`([^`]*)`:[A-Za-z][\w.+:-]*:")
_LITERAL = re.compile(r"``(.+?)``", re.S)
_REFERENCE = re.compile(r"`([^`]+)`__?|\|([^|\s][^|\n]*)\|_{0,2}|\[(?:#\w*|\*|\d+)\]_")
_WORD_REF = re.compile(r"(?<![\w`])([A-Za-z0-9][\w.-]*[A-Za-z0-9])__?(?=[\s.,;:!?)]|$)")
_INTERPRETED = re.compile(r"`([^`]+)`")
_STRONG = re.compile(r"\*\*(\S(?:.*?\S)?)\*\*", re.S)
_EMPHASIS = re.compile(r"(?<![\w*])\*(\S(?:.*?\S)?)\*(?![\w*])", re.S)
_FIELD = re.compile(r"^(\s*):([^:`\s][^:`\n]*):(\s|$)", re.M)


def rest_text(source: str) -> str:
    """Return reST's visible text with one output line per source line."""
    lines = source.split("\n")
    out = list(lines)
    prose = [False] * len(lines)
    n = 0
    while n < len(lines):
        line = lines[n]
        explicit = _EXPLICIT.match(line)
        if explicit:
            n = _explicit_block(lines, out, n, explicit)
            continue
        stripped = line.rstrip()
        if _ADORNMENT.match(line) or _TABLE_BORDER.match(line):
            out[n] = ""
        elif stripped.endswith("::"):
            head = stripped[:-2]
            out[n] = _inline(head.rstrip() + ("" if not head or head[-1].isspace() else ":"))
            n = _keep_indented(lines, out, n + 1, _indent(line))
            continue
        else:
            prose[n] = True
        n += 1
    _clean_paragraphs(out, prose)
    return "\n".join(text.rstrip() for text in out)


def rest_headings(source: str) -> list[Heading]:
    """Return reST's section titles, levels numbered in the order their adornment styles
    (underline, or overline and underline) first appear, as docutils numbers them."""
    lines = source.split("\n")
    styles: list[tuple[str, bool]] = []
    found = []
    for n in range(1, len(lines)):
        title = lines[n - 1]
        if not _ADORNMENT.match(lines[n]) or not _is_title(title, lines[n]):
            continue
        char = lines[n][0]
        over = n >= 2 and lines[n - 2].rstrip() == lines[n].rstrip()
        if title[:1].isspace() and not over:
            continue
        if (char, over) not in styles:
            styles.append((char, over))
        text = one_line(_inline(title))
        if text:
            found.append(Heading(n, styles.index((char, over)) + 1, text))
    return found


def _is_title(line: str, adornment: str) -> bool:
    """Tell whether a line above an adornment line is a section title it underlines."""
    text = line.strip()
    return (bool(text) and not _ADORNMENT.match(line) and not text.startswith("..")
            and len(adornment.rstrip()) >= len(text))


def _clean_paragraphs(out: list[str], prose: list[bool]) -> None:
    """Reduce inline markup over each run of prose lines, so a role may span lines."""
    n = 0
    while n < len(out):
        if not prose[n] or not out[n].strip():
            n += 1
            continue
        end = n
        while end < len(out) and prose[end] and out[end].strip():
            end += 1
        out[n:end] = _inline("\n".join(out[n:end])).split("\n")
        n = end


def _indent(line: str) -> int:
    """Return a line's indentation width."""
    return len(line) - len(line.lstrip())


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """Return the index after the block indented deeper than `indent` that starts at `start`."""
    end = n = start
    while n < len(lines):
        if lines[n].strip():
            if _indent(lines[n]) <= indent:
                break
            end = n + 1
        n += 1
    return end


def _keep_indented(lines: list[str], out: list[str], start: int, indent: int) -> int:
    """Keep an indented literal block verbatim; return the index after it."""
    end = _block_end(lines, start, indent)
    out[start:end] = lines[start:end]
    return max(end, start)


def _explicit_block(lines: list[str], out: list[str], n: int, match: re.Match[str]) -> int:
    """Clean one explicit markup block (directive, comment, target, footnote); return the next."""
    indent = len(match.group(1))
    body = (match.group(2) or "").strip()
    end = _block_end(lines, n + 1, indent)
    directive = _DIRECTIVE.match(body)
    if directive:
        name = directive.group(1).split(":")[-1].lower()
        argument = directive.group(2) or ""
        out[n] = "" if name in _ARGUMENT_DROPPED else _inline(argument)
        m = n + 1
        while m < end and _OPTION.match(lines[m]):
            out[m] = ""
            m += 1
        for k in range(m, end):
            if name in _DROPPED and name not in _CODE:
                out[k] = ""
            elif name in _CODE:
                out[k] = lines[k]
            else:
                out[k] = _inline(lines[k])
        if name not in _CODE and name not in _DROPPED:
            _clean_nested(lines, out, m, end)
        return max(end, n + 1)
    footnote = re.match(r"^\[([^\]]+)\]\s*(.*)$", body)
    if footnote:
        out[n] = _inline(footnote.group(2))
        for k in range(n + 1, end):
            out[k] = _inline(lines[k])
        return max(end, n + 1)
    for k in range(n, max(end, n + 1)):  # a comment or a hyperlink target: nothing to read
        out[k] = ""
    return max(end, n + 1)


def _clean_nested(lines: list[str], out: list[str], start: int, end: int) -> None:
    """Clean a directive's content as reST in its own right (nested directives, adornments)."""
    if start >= end:
        return
    width = min(_indent(line) for line in lines[start:end] if line.strip())
    inner = rest_text("\n".join(line[width:] for line in lines[start:end])).split("\n")
    out[start:end] = inner


def _inline(text: str) -> str:
    """Reduce a line's inline markup (roles, links, literals, emphasis) to its text."""
    text = _FIELD.sub(lambda m: f"{m.group(1)}{m.group(2)}:{m.group(3)}", text)
    literals: list[str] = []

    def hold(match: re.Match[str]) -> str:
        literals.append(match.group(1))
        return f"\x00{len(literals) - 1}\x00"

    text = _LITERAL.sub(hold, text)
    text = _sub(_ROLE_LINK, lambda m: _target_text(_first(m)), text)
    text = _sub(_ROLE, lambda m: _target_text(_first(m)), text)
    text = _sub(_REFERENCE, lambda m: _first(m), text)
    text = _sub(_INTERPRETED, _first, text)
    text = _WORD_REF.sub(r"\1", text)
    text = _sub(_STRONG, _first, text)
    text = _sub(_EMPHASIS, _first, text)
    return re.sub("\x00(\\d+)\x00", lambda m: literals[int(m.group(1))], text)


def _sub(pattern: re.Pattern[str], shown: Callable[[re.Match[str]], str], text: str) -> str:
    """Replace each match by what it shows, keeping the newlines the match spanned."""

    def replace(match: re.Match[str]) -> str:
        new = shown(match)
        return new + "\n" * (match.group(0).count("\n") - new.count("\n"))

    return pattern.sub(replace, text)


def _first(match: re.Match[str]) -> str:
    """Return the first group of a match that took part in it ("" when none did)."""
    return next((group for group in match.groups() if group is not None), "")


def _target_text(text: str) -> str:
    """Return what a role shows: `~a.b.c` shows `c`, a leading `!` is dropped."""
    text = text.strip(" ").lstrip("!")
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return text

"""Markdown to the text a reader sees, parsed by markdown-it-py, line N kept on line N."""

from __future__ import annotations

import functools
import re

from markdown_it import MarkdownIt
from markdown_it.token import Token

from psirag_kb.ingest.context import Heading, front_matter, one_line
from psirag_kb.ingest.htmltext import html_visible_text

_MYST_CODE = frozenset({"code", "code-block", "code-cell", "doctest", "testcode", "eval-rst",
                        "math", "literalinclude", "mermaid", "raw", "toctree", "include"})
_MYST_OPTION = re.compile(r"^\s*:[\w-]+:(?:\s.*)?$")
_MYST_ROLE = re.compile(r"\{[\w:.-]+\}$")
_ROLE_TARGET = re.compile(r"^(.*?)\s*<[^<>]+>$", re.S)
_PARSER = MarkdownIt("commonmark", {"html": True}).enable("table")


@functools.lru_cache(maxsize=2)
def _tokens(source: str) -> tuple[Token, ...]:
    """The parse of a source, kept for the file's next reader (its text, then its outline)."""
    return tuple(_PARSER.parse(source))


def markdown_text(source: str) -> str:
    """Return Markdown's visible text: links, emphasis and heading marks gone, code kept as is."""
    lines = source.split("\n")
    out: list[list[str]] = [[] for _ in lines]
    block_map: list[int] | None = None
    for token in _tokens(source):
        if token.map is not None:
            block_map = token.map
        if token.type in ("fence", "code_block") and token.map:
            _keep_code(token, lines, out)
        elif token.type == "html_block" and token.map:
            first, last = token.map
            visible = html_visible_text("\n".join(lines[first:last])).split("\n")
            for offset, text in enumerate(visible[: last - first]):
                out[first + offset].append(text)
        elif token.type == "inline" and block_map is not None:
            _place(_inline_lines(token), block_map, out)
    return "\n".join(" ".join(part for part in parts if part) for parts in out)


def markdown_outline(source: str) -> tuple[str, list[Heading]]:
    """Return a Markdown file's front-matter title ("" if none) and its headings (ATX and
    setext, as a reader sees their text), outside the front matter."""
    title, skip = front_matter(source)
    tokens = _tokens(source)
    headings = []
    for token, inline in zip(tokens, tokens[1:], strict=False):
        if token.type != "heading_open" or not token.map or token.map[0] < skip:
            continue
        text = one_line(" ".join(_inline_lines(inline)))
        if text:
            headings.append(Heading(token.map[0] + 1, int(token.tag[1:]), text))
    return title, headings


def _keep_code(token: Token, lines: list[str], out: list[list[str]]) -> None:
    """Keep a code block's lines verbatim, blanking a fence's opening and closing lines."""
    first, last = token.map or (0, 0)
    body = range(first, last)
    if token.type == "fence":
        if _myst_prose(token):
            inner = markdown_text("\n".join(lines[first + 1 : last - 1]))
            for offset, text in enumerate(inner.split("\n")):
                out[first + 1 + offset].append("" if _MYST_OPTION.match(text) else text)
            return
        closing = last - 1 if last - 1 > first and _is_fence(lines[last - 1]) else last
        body = range(first + 1, closing)
    for n in body:
        out[n].append(lines[n])


def _myst_prose(token: Token) -> bool:
    """Tell whether a fence is a MyST directive whose content is prose (`{note}`, not code)."""
    name = token.info.strip()
    if not (name.startswith("{") and "}" in name):
        return False
    closed = token.map is not None and token.map[1] - token.map[0] >= 2
    return closed and name[1 : name.index("}")].split(":")[-1] not in _MYST_CODE


def _is_fence(line: str) -> bool:
    """Tell whether a line is a closing code fence."""
    stripped = line.strip()
    return bool(len(stripped) >= 3 and set(stripped) <= {"`"}
                or set(stripped) <= {"~"} and stripped)


def _inline_lines(token: Token) -> list[str]:
    """Render an inline token's children to plain text, one string per source line."""
    lines = [""]
    for child in token.children or []:
        if child.type in ("softbreak", "hardbreak"):
            lines.append("")
        elif child.type == "code_inline" and _MYST_ROLE.search(lines[-1]):
            lines[-1] = _MYST_ROLE.sub("", lines[-1]) + _role_text(child.content)
        elif child.type in ("text", "code_inline"):
            lines[-1] += child.content
        elif child.type == "image":
            lines[-1] += "".join(c.content for c in child.children or [] if c.type == "text")
    return lines


def _role_text(content: str) -> str:
    """Return what a MyST role shows: `text <target>` shows text, `~a.b` shows b."""
    match = _ROLE_TARGET.match(content)
    text = (match.group(1) if match else content).lstrip("!")
    return text[1:].rsplit(".", 1)[-1] if text.startswith("~") else text


def _place(rendered: list[str], block_map: list[int], out: list[list[str]]) -> None:
    """Put rendered lines on their source lines (extra lines join the block's last line)."""
    first, last = block_map
    for offset, text in enumerate(rendered):
        n = min(first + offset, max(first, last - 1), len(out) - 1)
        out[n].append(text.strip())

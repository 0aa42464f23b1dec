"""Document titles as index keys: a name written in a passage finds the document it titles."""

from __future__ import annotations

import os
import re

SEPARATOR = " > "
"""Between the parts of a chunk's context header ("Title > Section > Subsection")."""
TITLE_CHARS = 120
"""A text's first line is its title when at most this long and followed by more lines."""
_NON_WORD = re.compile(r"[\W_]+")
_QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")
"""A title's closing "(qualifier)": "Brother (Pearl Jam song)" is written "Brother"."""


def title_key(name: str) -> str:
    """A name as the title index holds it: case folded, punctuation and spacing as one space
    ("Person - centered therapy" and "Person-centered therapy" are one key)."""
    return " ".join(_NON_WORD.sub(" ", name.casefold()).split())


def short_forms(title: str) -> list[str]:
    """A title and the shorter forms a text writes it by: without its closing "(qualifier)"
    and without what follows its first comma ("Johnnycake, West Virginia": "Johnnycake")."""
    bare = _QUALIFIER.sub("", title)
    return [title, bare, bare.split(",")[0]]


def split_title(text: str) -> tuple[str, str]:
    """(title, body): the first line is a title when short and followed by more lines."""
    text = text.strip()
    first, _, rest = text.partition("\n")
    if rest and len(first.strip()) <= TITLE_CHARS:
        return first.strip(), rest
    return "", text


def title_keys(indexed: str, path: str | None) -> list[str]:
    """The keys a chunk is found under: its document's title (the first part of its context
    header, or a corpus record's short first line) and its file's name without extension,
    each with its `short_forms`."""
    first, _ = split_title(indexed)
    names = []
    if first:
        names.extend(short_forms(first.split(SEPARATOR)[0]))
    if path is not None:
        names.extend(short_forms(os.path.splitext(os.path.basename(path))[0]))
    return list(dict.fromkeys(key for key in map(title_key, names) if key))

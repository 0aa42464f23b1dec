"""Quoted phrases in a query: "like this" means the phrase must occur in a result."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from psirag_kb.access import OWNER, Access
from psirag_kb.storage.scope import Scope
from psirag_kb.storage.scripts import segment
from psirag_kb.storage.sparse import phrase_words

PHRASE_CANDIDATES = 1000
"""Chunks holding the quoted phrases (the best by BM25) that dense and tree search rank among."""

_QUOTED = re.compile(r'["“”„]([^"“”„]+)["“”„]')


def quoted(text: str) -> list[str]:
    """The phrases between double quotes (straight or curly) that hold a word, each once."""
    found = (" ".join(m.group(1).split()) for m in _QUOTED.finditer(text))
    return list(dict.fromkeys(p for p in found if phrase_words(p)))


_IDENTIFIER = re.compile(
    r"(?<![\w.:-])(?:--?[A-Za-z][\w-]*[A-Za-z0-9]"  # a command-line option: --no-edit
    r"|[A-Za-z_]\w*(?:(?:_|::)\w+|\.[A-Za-z_]\w+)+"  # PyMem_RawMalloc, std::move, os.path
    r"|[a-z]+[A-Z]\w*)")  # camelCase: setUpClass
"""A word of a question that names one thing of a program (written so it is not prose)."""
IDENTIFIERS = 3
"""At most this many identifiers of one question are looked up as phrases."""


def identifiers(text: str) -> list[str]:
    """The option names and code identifiers a question holds ("Which release taught git
    checkout --no-overwrite-ignore?"), each once, at most IDENTIFIERS: a dotted word counts
    when both its sides have two characters ("os.path", not "U.S.")."""
    found = []
    for match in _IDENTIFIER.finditer(text):
        word = match.group().rstrip(".")
        if "." in word and not re.search(r"\w{2,}\.\w{2,}", word):
            continue
        found.append(word)
    return list(dict.fromkeys(found))[:IDENTIFIERS]


SEARCH_WORDS = 4
"""At most this many words outside the quotes make a search whose quoted phrases must occur;
a longer question that quotes a title ("Which album of \"X\" ...") searches its words as usual,
since the passages it needs (the singer's, the album's) need not hold the title."""


def required(text: str) -> list[str]:
    """The quoted phrases that must occur in every result: those of a search (the quotes and at
    most SEARCH_WORDS other words), none for a question that quotes a name in passing."""
    phrases = quoted(text)
    if not phrases:
        return []
    outside = _QUOTED.sub(" ", text)
    # a CJK run counts its bigrams: a question in Chinese has no spaces between words
    return phrases if len(segment(phrase_words(outside)).split()) <= SEARCH_WORDS else []


Search = Callable[..., tuple[np.ndarray, np.ndarray]]
"""SparseIndex.search: (text, k, within paths, phrases) -> (ids, scores)."""


def phrase_scope(search: Search, text: str, phrases: list[str],
                 paths: tuple[str, ...] | None, access: Access = OWNER) -> Scope:
    """The chunks (within `paths` when given) that hold every phrase, at most
    PHRASE_CANDIDATES of them, the best for the query's words by BM25, for this person."""
    ids, _ = search(text, PHRASE_CANDIDATES, paths, phrases)
    return Scope(paths or (), ids, access)


def no_match_note(phrases: list[str]) -> str:
    """What a query whose quoted phrases occur nowhere is told."""
    shown = ", ".join(f'"{p}"' for p in phrases)
    return (f"no indexed text contains {shown}: quoted text must occur as written; "
            "remove the quotes to search for the words")

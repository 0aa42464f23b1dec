"""Follow-up questions: one that leans on earlier turns is made into a standalone query.

"What is Helgrind?" then "What are its command-line options?": the second is searched as
"Helgrind command-line options". A question leans on the history when it points back (a
pronoun such as "its", "they", "this"), continues ("and ...?", "what about ...?", "also ..."),
or says too little to be searched alone (one content word or none, and no name); then the
subject of the last turn (the names of its question and of the query it was searched as, then
its question's other content words) is put in front of the question's own content words. "What
about X?" naming something new swaps the last turn's names of X's kind (a version for a
version, a word for a word) for X and keeps the rest of its query. A question that stands on
its own is searched as it is. These rules were chosen on the conversational dev set
(`benchmarks/conversations.py`): the subject's other content words beside its names took the
follow-ups' top-1 file from 82% to 91%; the title of the last cited passage did not help.

An LLM may rewrite instead (`resolve`'s `rewriter`); its rewrite is used only when every
content word of it occurs in the history or the question, else the offline one is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from psirag_kb.text import QUESTION_STOP_WORDS, TECHNICAL_WORD

AS_IS, OFFLINE, LLM = "as_is", "offline", "llm"
METHODS = (AS_IS, OFFLINE, LLM)

POINTERS = frozenset("""it its it's itself they them their theirs themselves this these those
he him his she her hers there thereof therein such same latter former one's""".split())
"""Words that point back to something named earlier."""
THAT = "that"
"""'that' points back only where no noun follows it ("is that safe?", not "options that ...")."""
CONTINUERS = ("and", "also", "but", "or", "then", "so", "plus", "what about", "how about",
              "and what about", "and how about", "same for", "what else", "anything else",
              "why", "why not", "how so", "which one", "in what way")
"""Openings that continue the last turn."""
QUESTION_WORDS = frozenset("""what which who whom whose when where why how is are was were do
does did can could should would will shall may might must have has had be been being""".split())
STOPWORDS = QUESTION_STOP_WORDS | QUESTION_WORDS | POINTERS | {THAT}
"""Words that say nothing about a subject."""
SHORT = 1
"""A question of this many content words or fewer leans on the history."""


@dataclass(frozen=True)
class Turn:
    """An earlier turn as the rewrite sees it."""

    question: str
    searched: str = ""
    """The standalone query it was searched as ('' when it was searched as asked)."""
    headers: tuple[str, ...] = ()
    """"Title > Heading" of the passages it cited, best first."""
    answer: str = ""

    @property
    def query(self) -> str:
        """What the turn was searched as."""
        return self.searched or self.question


@dataclass(frozen=True)
class Rewrite:
    """The query to search for a question, and how it was made (as_is, offline or llm)."""

    query: str
    method: str

    def as_dict(self) -> dict[str, Any]:
        """{"searched", "rewrite"} as results show them."""
        return {"searched": self.query, "rewrite": self.method}


Rewriter = Callable[[Sequence[Turn], str], "str | None"]
"""(history, question) -> a standalone query, or None when it has none (an LLM)."""


def words(text: str) -> list[str]:
    """The words of a text as written (apostrophes and inner dots, dashes kept)."""
    return [w.replace("’", "'") for w in TECHNICAL_WORD.findall(text)]


def content_words(text: str) -> list[str]:
    """The words that name something (not stopwords, pronouns or question words)."""
    return [w for w in words(text) if _content(w)]


def _content(word: str) -> bool:
    low = word.lower()
    stem = low[:-2] if low.endswith("'s") else low
    return stem not in STOPWORDS and not (len(stem) == 1 and stem.isalpha())


def is_name(word: str, first: bool = False) -> bool:
    """Whether a word looks like a name: capitals beyond the first letter of a sentence,
    digits, inner dots, underscores or pluses, an option's leading dash (Helgrind, ms_print,
    --track-origins, 2.6.3; not command-line)."""
    if any(c.isdigit() for c in word) or any(c in word for c in "._+#/") or word[:1] == "-":
        return True
    if any(c.isupper() for c in word[1:]):
        return True
    return word[:1].isupper() and not first


def names(text: str, query: bool = False) -> list[str]:
    """The name-like content words of a text, in order, each once (in a `query` made by a
    rewrite, a capital counts at the start too)."""
    found: list[str] = []
    for sentence in re.split(r"(?<=[.?!])\s+", text.strip()):
        for position, word in enumerate(words(sentence)):
            first = position == 0 and not query
            if _content(word) and is_name(word, first) and word not in found:
                found.append(word)
    return found


def _pointer_words(text: str) -> list[str]:
    """The words of a text that point back ("its", "they", a bare "that")."""
    tokens = words(text)
    out = []
    for i, word in enumerate(tokens):
        low = word.lower()
        if low in POINTERS:
            out.append(word)
        elif low == THAT and (i == len(tokens) - 1 or not _content(tokens[i + 1])
                              and tokens[i + 1].lower() not in ("i", "you", "we", "they")):
            out.append(word)
    return out


def _continues(text: str) -> str | None:
    """The opening that continues the last turn ("and", "what about"), if the text has one."""
    low = " ".join(words(text.lower()))
    for opening in sorted(CONTINUERS, key=len, reverse=True):
        if low == opening or low.startswith(opening + " "):
            return opening
    return None


def leans(question: str) -> bool:
    """Whether a question leans on earlier turns (points back, continues, or is too short)."""
    if not question.strip():
        return False
    if _pointer_words(question) or _continues(question):
        return True
    return len(content_words(question)) <= SHORT and not names(question)


def subject(turn: Turn) -> list[str]:
    """What a turn was about: the names of its question and of the query it was rewritten
    to, then its question's other content words (else its query's content words)."""
    found = [*turn_names(turn), *content_words(turn.question)]
    return _unique(found) or _unique(content_words(turn.query))


def turn_names(turn: Turn) -> list[str]:
    """The names of a turn's question and of the query it was rewritten to."""
    found = names(turn.question)
    if turn.searched and turn.searched != turn.question:
        found += names(turn.searched, query=True)
    return _unique(found)


def offline(history: Sequence[Turn], question: str) -> str:
    """The standalone query from the history without an LLM (see the module's docstring)."""
    last = next((t for t in reversed(history) if t.query.strip()), None)
    if last is None:
        return question.strip()
    own = content_words(question)
    opening = _continues(question)
    new_names = [w for w in names(question) if w.lower() not in {"and", "also"}]
    earlier = subject(last)
    if opening in ("what about", "how about", "and what about", "and how about", "and",
                   "same for", "or") and new_names and not _pointer_words(question):
        # "what about Helgrind?": the last query with its names of the same kind (numbers
        # for a number, words for a word) swapped for the new ones, in place
        kinds = {_kind(w) for w in new_names}
        swapped = {w for w in turn_names(last) if _kind(w) in kinds}
        out: list[str] = []
        for word in content_words(last.query):
            out.extend(new_names if word in swapped else [word])
        return " ".join(_unique([*out, *new_names, *own]))
    return " ".join(_unique([*earlier, *own]))


def _kind(word: str) -> str:
    """"number" for a version or a year (2.6.3, v2.30, 2023), else "word"."""
    return "number" if any(c.isdigit() for c in word) else "word"


def resolve(history: Sequence[Turn], question: str,
            rewriter: Rewriter | None = None) -> Rewrite:
    """The query to search for a question after these turns, and how it was made."""
    question = question.strip()
    if not history or not leans(question):
        return Rewrite(question, AS_IS)
    fallback = offline(history, question)
    if rewriter is not None:
        proposed = rewriter(history, question)
        if proposed and grounded(proposed, history, question):
            return Rewrite(" ".join(proposed.split()), LLM)
    if not fallback or fallback.lower() == question.lower():
        return Rewrite(question, AS_IS)
    return Rewrite(fallback, OFFLINE)


def grounded(rewrite: str, history: Sequence[Turn], question: str) -> bool:
    """Whether every content word of a rewrite occurs in the history or the question."""
    known = _vocabulary([question, *(part for t in history for part in
                                     (t.question, t.searched, t.answer, *t.headers))])
    own = content_words(rewrite)
    return bool(own) and all(_forms(w) & known for w in own)


def _vocabulary(texts: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for text in texts:
        for word in words(text):
            found |= _forms(word)
    return found


def _forms(word: str) -> set[str]:
    """A word lower-cased, without a possessive "'s" or a plural "s" (its, it's, Helgrind's)."""
    low = word.lower()
    low = low[:-2] if low.endswith("'s") else low
    return {low, low[:-1]} if low.endswith("s") and len(low) > 3 else {low}


def _unique(items: Iterable[str]) -> list[str]:
    """Items in order, each once (ignoring case)."""
    seen: set[str] = set()
    out = []
    for item in items:
        if item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out


def history_turns(history: Sequence[Any]) -> list[Turn]:
    """Turns from what a client sends: {"role", "content"} messages (a user's message is a
    question, an assistant's its answer) or earlier turns ({"question", "searched", ...})."""
    turns: list[Turn] = []
    for item in history:
        if isinstance(item, Turn):
            turns.append(item)
            continue
        if not isinstance(item, dict):
            raise ValueError("each earlier turn is an object: {role, content} or {question}")
        if "role" in item:
            role, content = item.get("role"), item.get("content")
            if not isinstance(content, str):
                content = _text_parts(content)
            if role == "user":
                turns.append(Turn(question=content))
            elif role == "assistant" and turns:
                last = turns[-1]
                turns[-1] = Turn(last.question, last.searched, last.headers, content)
            elif role not in ("system", "assistant", "tool"):
                raise ValueError(f"unknown role {role!r}: use user or assistant")
            continue
        question = item.get("question")
        if not isinstance(question, str):
            raise ValueError("an earlier turn needs its 'question' (or a role and content)")
        searched = item.get("searched") or ""
        answer = item.get("answer") or ""
        if not isinstance(searched, str) or not isinstance(answer, str):
            raise ValueError("an earlier turn's 'searched' and 'answer' are strings")
        turns.append(Turn(question, searched, (), answer))
    return turns


def _text_parts(content: Any) -> str:
    """The text of a message's content given as parts ([{"type": "text", "text": ...}])."""
    if isinstance(content, list):
        return " ".join(str(p.get("text") or "") for p in content
                        if isinstance(p, dict) and p.get("type") == "text")
    if content is None:
        return ""
    raise ValueError("a message's content is a string or a list of text parts")

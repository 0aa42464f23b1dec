"""Grounding checks on LLM output: an abstract or an answer must rest on the text it was given."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from psirag_kb.text import ALNUM_RUN, CLAIM_STOP_WORDS, JOINED_WORD

MIN_SUPPORT = 0.6
"""Share of an abstract's content words that must occur in its sources."""
MIN_ANSWER_SUPPORT = 0.5
"""Share of an answer's content words that must occur in the passages it rests on."""
MAX_ECHO = 0.75
"""Share of the question's content words an answer repeats (adding little) to restate it."""

_CITATION = re.compile(r"\[\d{1,3}\]")
_URL = re.compile(r"(?:https?://|www\.)\S+|\b[\w-]+\.(?:com|org|net|io|edu|gov)\b\S*", re.I)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NAME = re.compile(r"(?<![\w.])[A-Z][\w’'-]*[a-z][\w’'-]*")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_ACRONYM = re.compile(r"(?<![\w.])[A-Z]{2,}[A-Z0-9]*(?![\w’'-])")
"""A word in capitals ("PC", "GPL", "MT19937" aside): a name wherever it stands."""
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n)\s*[\"'“(]*$")
_CODE = re.compile(r"\w[\[\]{}()=<>*+\\|@$_:]|[\[\]{}()=<>*+\\|@$_:]\w")
"""Punctuation against a word character: an identifier, a call, a slice, an expression."""
_EDGES = "\"'`“”‘’.,;:!?()[]{}"


@dataclass(frozen=True)
class Verdict:
    """Whether an output is grounded, and why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def _stem(word: str) -> str:
    """A crude stem so that "licences"/"licence" and "managed"/"manage" match."""
    word = word.lower().replace("’", "'")
    for end in ("'s", "ies", "ing", "ed", "ly", "s"):
        if word.endswith(end) and len(word) - len(end) >= 3:
            word = word[: -len(end)] + ("y" if end == "ies" else "")
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def content_words(text: str) -> list[str]:
    """The stems of a text's content words (no function words, no bare numbers), in order."""
    out = []
    for word in JOINED_WORD.findall(text):
        low = word.lower()
        if low in CLAIM_STOP_WORDS or len(low) < 2 or _NUMBER.fullmatch(low):
            continue
        out.append(_stem(low))
    return out


def _vocabulary(sources: Iterable[str]) -> tuple[set[str], str]:
    """The stems and the lower-cased, space-joined text of the sources."""
    text = " ".join(sources)
    stems = {_stem(w) for w in JOINED_WORD.findall(text)}
    stems |= {_stem(w) for w in ALNUM_RUN.findall(text)}  # "debian-releases.csv" holds "debian"
    stems |= {_stem(w) for w in _CAMEL.findall(text)}  # "osiApproved" holds "osi"
    return stems, " ".join(text.lower().split())


def names_of(text: str) -> set[str]:
    """Capitalised words that are not the first word of a sentence, and words in capitals
    anywhere (likely names)."""
    found = set(_ACRONYM.findall(text))
    for match in _NAME.finditer(text):
        if _SENTENCE_START.search(text[: match.start()]):
            continue
        if match.group().lower() in CLAIM_STOP_WORDS:
            continue
        found.add(match.group())
    return found


def _unsupported_specifics(text: str, source_text: str, stems: set[str]) -> str:
    """The first URL, code (an identifier, a call, an expression), number or name of `text`
    that the sources do not hold, or ""."""
    for url in _URL.findall(text):
        if url.lower().rstrip(".,;)") not in source_text:
            return f"the URL {url!r} is not in the text"
    without_urls = _URL.sub(" ", text)
    for token in without_urls.split():
        code = token.strip(_EDGES)
        if _CODE.search(code) and code.lower() not in source_text:
            return f"the code {code!r} is not in the text"
    for number in _NUMBER.findall(without_urls):
        if not re.search(rf"(?<!\d)(?<!\d[.,]){re.escape(number)}(?!\d)(?![.,]\d)", source_text):
            return f"the number {number!r} is not in the text"
    for name in sorted(names_of(without_urls)):
        parts = [_stem(w) for w in ALNUM_RUN.findall(name) if not w.isdigit()]
        if parts and not all(p in stems for p in parts):
            return f"the name {name!r} is not in the text"
    return ""


def check_abstract(text: str, sources: Sequence[str],
                   example_words: Iterable[str] = ()) -> Verdict:
    """Whether an abstract rests on its children's text: most content words occur there, and
    no URL, number, name or word of the prompt's example (`example_words`) that they lack."""
    stems, source_text = _vocabulary(sources)
    words = content_words(text)
    if not words:
        return Verdict(False, "the abstract has no content words")
    specific = _unsupported_specifics(text, source_text, stems)
    if specific:
        return Verdict(False, specific)
    example = {_stem(w) for w in example_words}
    if example:
        borrowed = sorted(example & set(words) - stems)
        if borrowed:
            return Verdict(False, f"{borrowed[0]!r} comes from the prompt's example")
    support = sum(w in stems for w in words) / len(words)
    if support < MIN_SUPPORT:
        return Verdict(False, f"only {support:.0%} of its words occur in the text")
    return Verdict(True)


def similarity(a: str, b: str) -> float:
    """Overlap of two texts' content words: shared over the smaller set (0..1)."""
    left, right = set(content_words(a)), set(content_words(b))
    if not left or not right:
        return 0.0
    return len(left & right) / min(len(left), len(right))


def restates(text: str, question: str) -> bool:
    """Whether a text (an answer, a retrieval query) is the question again, rephrased."""
    if " ".join(text.lower().split()).rstrip("?.! ") == " ".join(
            question.lower().split()).rstrip("?.! "):
        return True
    if re.match(r"\W*(?:yes|no)\b", text, re.I):
        return False  # "Yes, Python uses reference counting" answers "Does Python use ...?"
    left, right = set(content_words(text)), set(content_words(question))
    if not left or not right:
        return False
    covered = len(left & right) / len(right)
    return covered >= MAX_ECHO and len(left - right) <= max(1, len(left) // 4)


def check_answer(answer: str, question: str, passages: Sequence[str],
                 example_names: Iterable[str] = ()) -> Verdict:
    """Whether an answer rests on its passages: not the question again, no entity of the
    prompt's example (`example_names`) absent from the passages or the question, and its
    words and names in the passages."""
    answer = _CITATION.sub(" ", answer)
    if restates(answer, question):
        return Verdict(False, "the answer restates the question")
    stems, source_text = _vocabulary(passages)
    question_stems = set(content_words(question))
    said = {_stem(w) for w in JOINED_WORD.findall(answer)}
    leaked = sorted(n for n in example_names
                    if _stem(n) in said and _stem(n) not in stems | question_stems)
    if leaked:
        return Verdict(False, f"{leaked[0]!r} comes from the prompt's example")
    specific = _unsupported_specifics(answer, source_text + " " + question.lower(),
                                      stems | question_stems)
    if specific:
        return Verdict(False, specific)
    words = [w for w in content_words(answer) if w not in question_stems]
    if words:
        support = sum(w in stems for w in words) / len(words)
        if support < MIN_ANSWER_SUPPORT:
            return Verdict(False, f"only {support:.0%} of the answer's words occur in the passages")
    return Verdict(True)


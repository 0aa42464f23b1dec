"""Text in scripts written without spaces (CJK ideographs, kana, hangul) cut into character
bigrams before Tantivy's English tokenizer sees it, for the index and for queries alike."""

from __future__ import annotations

import re

ANALYZER = "en_stem+cjk-bigram-1"
"""The name of the tokenisation the BM25 index is built with: an index recording another (or
none: the previous release) is rebuilt from DuckDB when opened."""

_RUN = re.compile(
    "["
    "\u1100-\u11ff"  # hangul jamo
    "\u3005-\u3007"  # ideographic iteration mark, closing mark, number zero
    "\u3041-\u309f"  # hiragana
    "\u30a0-\u30fa\u30fc-\u30ff"  # katakana (not the middle dot, a separator)
    "\u3130-\u318f"  # hangul compatibility jamo
    "\u31f0-\u31ff"  # katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f\uac00-\ud7ff"  # hangul jamo extended, syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # half-width katakana
    "\U00020000-\U0003134f"  # CJK extensions B to G
    "]+"
)


def bigrams(run: str) -> str:
    """The overlapping character pairs of a run, space-separated (a lone character alone)."""
    if len(run) < 2:
        return run
    return " ".join(run[i:i + 2] for i in range(len(run) - 1))


def segment(text: str) -> str:
    """The text with every CJK, kana or hangul run replaced by its bigrams (set apart from the
    words around it by spaces); other text, English included, is left as it is."""
    if text.isascii():
        return text
    return _RUN.sub(lambda m: f" {bigrams(m.group(0))} ", text)


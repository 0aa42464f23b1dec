"""reST and Markdown become the text a reader sees, with every line where it was in the file."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psirag_kb.ingest.documents import read_document
from psirag_kb.ingest.markdowntext import markdown_text
from psirag_kb.ingest.rest import rest_text

REST = """\
.. _intro:

Reference Counting
==================

Objects are freed when :c:func:`Py_DECREF` drops the count to zero, see
:ref:`the memory chapter <memory>` and `the CPython site <https://example.org>`_.
A *weak* reference is **not** counted; ``sys.getrefcount`` shows the count.

.. note::

   Cycles need the garbage collector, :func:`gc.collect` finds them.

.. code-block:: python

   import sys
   print(sys.getrefcount(obj))

An example follows::

   x = [] # a list
   y = x

.. dropdown:: Hidden details
   :open:

   Hidden text explains the arena allocator.

.. versionadded:: 3.4
"""

MARKDOWN = """\
Reference Counting
==================

## Weak references

Read [the guide](https://example.org/guide) or *emphasis* and **strong** with `code`.
Also ![a diagram](d.png) and [a reference][ref].

```python
import weakref
r = weakref.ref(obj)
```

<div class="note">
<p>An HTML block about arenas.</p>
</div>

[ref]: https://example.org/ref
"""


def line_with(text: str, words: str) -> int:
    """Return the 1-based number of the line of `text` that holds `words`."""
    return next(n for n, line in enumerate(text.split("\n"), 1) if words in line)


def test_rest_markup_is_gone_and_words_kept():
    clean = rest_text(REST)
    for markup in ("====", ":c:func:", ":ref:", "`", "<memory>", "https://", ".. ", "::",
                   ":open:", "*weak*", "**not**", "_intro"):
        assert markup not in clean, markup
    for words in ("Reference Counting", "Py_DECREF drops the count", "the memory chapter and",
                  "the CPython site.", "A weak reference is not counted; sys.getrefcount shows",
                  "gc.collect finds them", "Hidden text explains the arena allocator",
                  "An example follows:", "Hidden details"):
        assert words in clean, words


def test_rest_code_is_kept_verbatim():
    clean = rest_text(REST)
    assert "   print(sys.getrefcount(obj))" in clean
    assert "   x = [] # a list" in clean and "   y = x" in clean


@pytest.mark.parametrize("text", [REST, MARKDOWN])
def test_every_sentence_stays_on_its_source_line(text: str):
    clean = (rest_text if text is REST else markdown_text)(text)
    assert clean.count("\n") == text.count("\n")
    for words in ("Reference Counting", "print(sys.getrefcount(obj))", "y = x",
                  "Hidden text explains", "Weak references", "import weakref",
                  "An HTML block about arenas", "or *emphasis*"):
        if words in text:
            shown = words.replace("*", "")
            assert line_with(clean, shown) == line_with(text, words), words


def test_unknown_sphinx_markup_neither_raises_nor_warns(caplog):
    source = ".. versionchanged:: 3.12\n   Now :pep:`683` :unknown-role:`x`.\n\n.. weird::\n"
    with caplog.at_level(logging.DEBUG):
        clean = rest_text(source)
    assert clean.split("\n")[:2] == ["3.12", "Now 683 x."]
    assert not caplog.records


def test_markdown_markup_is_gone_and_words_kept():
    clean = markdown_text(MARKDOWN)
    for markup in ("===", "## ", "](", "**", "*emphasis*", "`", "<div", "<p>", "[ref]",
                   "https://"):
        assert markup not in clean, markup
    for words in ("Reference Counting", "Weak references",
                  "Read the guide or emphasis and strong with code.",
                  "Also a diagram and a reference.", "An HTML block about arenas."):
        assert words in clean, words


def test_markdown_fenced_code_is_kept_without_its_fences():
    lines = markdown_text(MARKDOWN).split("\n")
    start = line_with(MARKDOWN, "```python")
    assert lines[start - 1] == "" and lines[start + 2] == ""
    assert lines[start:start + 2] == ["import weakref", "r = weakref.ref(obj)"]


def test_read_document_cleans_rst_and_markdown(tmp_path: Path):
    (tmp_path / "a.rst").write_text(REST)
    (tmp_path / "b.md").write_text(MARKDOWN)
    assert read_document(tmp_path / "a.rst").text == rest_text(REST)
    assert read_document(tmp_path / "b.md").text == markdown_text(MARKDOWN)


def test_a_result_over_rst_has_clean_text_and_its_file_lines(config, minilm, tmp_path: Path):
    from psirag_kb.kb import KnowledgeBase

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "refs.rst").write_text(REST)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        top = kb.query("arena allocator hidden text", mode="hybrid", k=3)["results"][0]
    assert top["source"].endswith("refs.rst")
    assert ":func:" not in top["text"] and ".. " not in top["text"] and "===" not in top["text"]
    first, last = top["lines"]
    source_lines = REST.split("\n")[first - 1 : last]
    assert any("Hidden text explains the arena allocator" in line for line in source_lines)
    assert "Hidden text explains the arena allocator" in top["text"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["Title", "=====", ".. note::", "   body *x* :ref:`a", "<b>`_",
                                 "::", "   code", "```", "# h", "[a](b)", "<div>", "", "  - i",
                                 ".. _t:", "``lit", "**", "|s|", "~~~ {x}", ":f: v"]),
                max_size=30))
def test_any_mix_of_markup_keeps_the_line_count(lines: list[str]):
    text = "\n".join(lines)
    assert rest_text(text).count("\n") == text.count("\n")
    assert markdown_text(text).count("\n") == text.count("\n")

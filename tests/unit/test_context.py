"""Chunk headers: the document's title (or file name) and the heading path above each chunk."""

from __future__ import annotations

from pathlib import Path

from psirag_kb.ingest.chunking import chunk_text, word_token_count
from psirag_kb.ingest.context import (
    HEADER_TOKENS,
    Heading,
    chunk_headers,
    code_ranges,
    fit,
    hash_headings,
    title_heading,
    usable_title,
)
from psirag_kb.ingest.documents import read_document
from psirag_kb.storage.records import indexed_text

GUIDE = """\
# Python memory management

CPython frees most objects as soon as their reference count drops to zero.

## Garbage collection

The cycle collector finds groups of objects that refer to each other.

### Generations

Objects start in the youngest generation. Survivors move to older ones.

## Allocators

Small objects come from pymalloc arenas.
"""


def _headers(path: Path, tokens: int = 8) -> list[tuple[str, str]]:
    """(header, first line of text) of each chunk of a file, chunked small."""
    document = read_document(path)
    chunks = chunk_text(document.text, word_token_count, max_tokens=tokens)
    headers = document.headers([c.line_first for c in chunks])
    return [(h, c.text.splitlines()[0]) for h, c in zip(headers, chunks, strict=True)]


def test_markdown_chunks_get_title_and_heading_path(tmp_path: Path) -> None:
    path = tmp_path / "memory.md"
    path.write_text(GUIDE)
    headers = dict((line, header) for header, line in _headers(path))
    # the chunk that starts with the title says it already: no header at all
    assert headers["Python memory management"] == ""
    assert headers["Garbage collection"] == "Python memory management"
    assert headers["Generations"] == "Python memory management > Garbage collection"
    mid = next(h for h, line in _headers(path, 8) if line.startswith("Survivors"))
    assert mid == "Python memory management > Garbage collection > Generations"
    # a sibling section closes the one before it
    assert headers["Allocators"] == "Python memory management"
    assert headers["Small objects come from pymalloc arenas."] == (
        "Python memory management > Allocators")


def test_file_name_stands_in_only_where_no_title_or_heading_does(tmp_path: Path) -> None:
    plain = tmp_path / "meeting_notes.txt"
    plain.write_text("We agreed to ship on Friday.\n")
    assert _headers(plain) == [("meeting_notes", "We agreed to ship on Friday.")]
    two_tops = tmp_path / "chapters.md"  # two top headings: neither is the document's title
    two_tops.write_text("A preface before any heading.\n\n# One\n\nFirst part.\n\n# Two\n\n"
                        "Second part of the book.\n")
    assert dict((line, h) for h, line in _headers(two_tops, 2)) == {
        "A preface before any heading.": "chapters", "One": "", "First part.": "One",
        "Two": "", "Second part of the book.": "Two"}


def test_reader_titles_win_over_headings(tmp_path: Path) -> None:
    page = tmp_path / "birds.html"
    page.write_text("<html><head><title>Kestrel guide</title></head><body>\n\n<h1>Kestrels</h1>"
                    "\n\n<p>They hover over fields.</p>\n\n<h2>Diet</h2>\n\n"
                    "<p>Voles and mice.</p>\n</body></html>\n")
    assert read_document(page).title == "Kestrel guide"
    assert dict((line, h) for h, line in _headers(page, 2))["Voles and mice."] == (
        "Kestrel guide > Kestrels > Diet")
    front = tmp_path / "post.md"
    front.write_text("---\ntitle: 'Release 2.0'\nauthor: me\n---\n\nFaster ingest, fewer bugs.\n")
    document = read_document(front)
    assert document.title == "Release 2.0" and document.headings == ()  # not "title: ..."
    assert {header for header, _ in _headers(front)} == {"Release 2.0"}


def test_headings_the_title_already_says_are_left_out(tmp_path: Path) -> None:
    page = tmp_path / "gc.html"
    page.write_text("<html><head><title>gc — Garbage Collector interface — Python docs</title>"
                    "</head><body>\n\n<h1>gc — Garbage Collector interface<a>¶</a></h1>\n\n"
                    "<p>This module provides an interface to the collector.</p>\n\n"
                    "<h2>Functions<a>¶</a></h2>\n\n<p>Enable automatic collection.</p>\n"
                    "</body></html>\n")
    assert [h.text for h in read_document(page).headings] == [
        "gc — Garbage Collector interface", "Functions"]
    headers = dict((line, h) for h, line in _headers(page, 2))
    assert headers["Enable automatic collection."] == (
        "gc — Garbage Collector interface — Python docs > Functions")
    assert headers["gc — Garbage Collector interface¶"] == ""


def test_rest_section_titles(tmp_path: Path) -> None:
    path = tmp_path / "notes.rst"
    path.write_text("=============\nRelease notes\n=============\n\nVersion 2\n---------\n\n"
                    "Faster ingest.\n\nVersion 1\n---------\n\nFirst release.\n")
    assert [(h.line, h.level, h.text) for h in read_document(path).headings] == [
        (2, 1, "Release notes"), (5, 2, "Version 2"), (10, 2, "Version 1")]
    assert dict((line, h) for h, line in _headers(path, 2))["First release."] == (
        "Release notes > Version 1")


def test_placeholder_titles_are_not_titles() -> None:
    assert usable_title("  Annual   report ") == "Annual report"
    for junk in ("", "Untitled", "Microsoft Word - draft3.doc", "slides.pptx", "Slide 1"):
        assert usable_title(junk) == "", junk


def test_lone_top_heading_is_the_title() -> None:
    assert title_heading([Heading(1, 1, "A"), Heading(3, 2, "B")]) == Heading(1, 1, "A")
    assert title_heading([Heading(1, 2, "A"), Heading(3, 1, "B")]) is None
    assert title_heading([Heading(1, 1, "A"), Heading(3, 1, "B")]) is None


def test_header_is_capped_keeping_title_and_nearest_heading() -> None:
    levels = [Heading(n, n, f"Section {n} about subject number {n}") for n in range(1, 7)]
    [header] = chunk_headers("The complete handbook of everything", levels, "file", [99])
    assert word_token_count(header) <= HEADER_TOKENS
    assert header.startswith("The complete handbook of everything > ")
    assert header.endswith("Section 6 about subject number 6")
    huge = fit(["word " * 200, "x" * 2000])
    assert word_token_count(huge) <= HEADER_TOKENS + 2


def test_hash_comments_in_code_cells_are_not_headings() -> None:
    text = "# Analysis\n\nSome prose.\n\n# load the data\nimport pandas\n"
    code = code_ranges(len(text), [(0, {"type": "markdown"}), (text.index("# load"),
                                                              {"type": "code"})])
    assert [h.text for h in hash_headings(text, code)] == ["Analysis"]
    assert [h.text for h in hash_headings(text)] == ["Analysis", "load the data"]


def test_indexed_text_puts_the_header_first() -> None:
    assert indexed_text("Guide > Setup", "Run make.") == "Guide > Setup\nRun make."
    assert indexed_text("", "Run make.") == "Run make."

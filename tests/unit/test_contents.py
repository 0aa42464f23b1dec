"""Contents and index listings are recognised per chunk and rank below the text they point to;
copies of one passage in other files are shown once (pure logic)."""

from __future__ import annotations

import numpy as np

from psirag_kb.search.contents import DEMOTION, below_their_text
from psirag_kb.search.copies import fold_copies
from psirag_kb.storage.contents import LISTING, contents_score, listing_line
from psirag_kb.storage.records import Hit, Ranking

PDF_CONTENTS = """Valgrind User Manual
7. Helgrind: a thread error detector ............................................. 119
7.1. Overview ...................................................................... 119
7.2. Detected errors: Misuses of the POSIX pthreads API ............................ 119
7.4.1. A Simple Data Race .......................................................... 122
7.6. Helgrind Command-line Options ................................................. 131
7.7. Helgrind Monitor Commands ..................................................... 133
"""
SPACED_LEADERS = """Contents
Introduction . . . . . . . . . . . . . . . 1
Installing the tool . . . . . . . . . . . 4
Appendix A . . . . . . . . . . . . . . . iv
"""
HTML_CONTENTS = """Table of Contents
7.1. Overview
7.2. Detected errors: Misuses of the POSIX pthreads API
7.4.1. A Simple Data Race
7.6. Helgrind Command-line Options
"""
PAGED_HEADINGS = """2 Getting started 7
2.1 Installing 7
2.2 A first run 9
3 Options 12
"""
INDEX_PAGE = """Index
--tool option, 5, 17-19
data races, 122, 126
lock orderings, 120
"""
SECTION = """7.6. Helgrind Command-line Options
The following end-user options are available:
--free-is-write=no|yes [default: no]
When enabled (not the default), Helgrind treats freeing of heap memory as if the memory
was written immediately before the free. This exposes races where memory is referenced by
one thread, and freed by another.
--track-lockorders=no|yes [default: yes]
When enabled (the default), Helgrind performs lock order consistency checking.
"""
STEPS = """To build it:
1. Unpack the archive.
2. Run make.
3. Run make install as root.
Then read the manual, chapter 2.1 explains the options in 4 pages.
"""


def test_dotted_leaders_paged_headings_html_lists_and_index_pages_are_listings() -> None:
    for text in (PDF_CONTENTS, SPACED_LEADERS, HTML_CONTENTS, PAGED_HEADINGS, INDEX_PAGE):
        assert contents_score(text) >= LISTING, text


def test_sections_prose_and_numbered_steps_are_not_listings() -> None:
    for text in (SECTION, STEPS, "7.6. Helgrind Command-line Options", ""):
        assert contents_score(text) < LISTING, text
    assert contents_score("7.1. Overview\n7.2. Races\n") == 0  # too short to tell
    assert contents_score("7.6. Helgrind Command-line Options ........ 131\n7.7.") == 1
    assert contents_score("7.6. Helgrind Command-line Options\nThe options are:") == 0


def test_a_contents_list_above_its_first_section_scores_its_share_of_lines() -> None:
    mixed = HTML_CONTENTS + SECTION
    assert 0 < contents_score(mixed) < contents_score(HTML_CONTENTS)


def test_single_lines() -> None:
    assert listing_line("7.6. Helgrind Command-line Options ........ 131")
    assert listing_line("Table of Contents")
    assert listing_line("2.4. OPTIONS . . . . . . . . . . . .")  # cut by a chunk boundary
    assert listing_line(". . . . . . . . . . . . 26")
    assert not listing_line("When enabled, Helgrind performs lock order checking.")
    assert not listing_line("See page 12.")


def hit(chunk_id: int, contents: float = 0.0) -> Hit:
    return Hit(chunk_id, f"/d/{chunk_id}.txt", "file", f"/d/{chunk_id}.txt", 0, 1, 1,
               f"text {chunk_id}", contents=contents)


def ranking(ids: list[int]) -> Ranking:
    return Ranking(np.array(ids, np.int64), np.linspace(1, 0.1, len(ids)).astype(np.float32))


def test_a_listing_gives_its_place_to_the_passages_below_it() -> None:
    ids = list(range(1, 15))
    hits = {i: hit(i, 0.9 if i in (1, 2) else 0.0) for i in ids}
    order = below_their_text(ranking(ids), hits, "Helgrind command-line options").ids.tolist()
    others = [i for i in ids if i not in (1, 2)]
    assert order == others[:DEMOTION] + [1, 2] + others[DEMOTION:]


def test_a_listing_with_little_below_it_stays_in_the_results() -> None:
    hits = {1: hit(1, 0.8), 2: hit(2)}
    assert below_their_text(ranking([1, 2]), hits, "options").ids.tolist() == [2, 1]


def test_a_question_for_the_contents_keeps_the_listings_first() -> None:
    hits = {1: hit(1, 0.8), 2: hit(2)}
    asked = below_their_text(ranking([1, 2]), hits, "table of contents of the manual")
    assert asked.ids.tolist() == [1, 2]


def test_scores_under_the_threshold_keep_their_place() -> None:
    hits = {1: hit(1, LISTING - 0.01), 2: hit(2)}
    assert below_their_text(ranking([1, 2]), hits, "options").ids.tolist() == [1, 2]


def row(chunk_id: int, path: str, text: str) -> dict:
    return {"rank": chunk_id, "chunk_id": chunk_id, "path": path, "source": path, "text": text,
            "lines": None, "location": {"page": chunk_id}, "score": 1.0 / chunk_id}


def test_a_copy_in_another_file_is_folded_into_the_better_result() -> None:
    html = row(1, "/m/manual.html", SECTION)
    # the PDF's chunk: other line breaks, a page header, half the next section
    pdf_text = ("Helgrind: a thread error detector\n" + " ".join(SECTION.split()[:60]).replace(
        "free.", "free.\n131\n") + " 7.7. Helgrind Monitor Commands The Helgrind tool provides")
    pdf = row(2, "/m/manual.pdf", pdf_text)
    other = row(3, "/m/faq.html", "Helgrind reports races between threads that share memory "
                                  "without a lock; read the manual's chapter on data races first.")
    folded = fold_copies([html, other, pdf])
    assert [r["chunk_id"] for r in folded] == [1, 3]
    assert [r["rank"] for r in folded] == [1, 2]
    assert folded[0]["also_in"] == [{"source": "/m/manual.pdf", "path": "/m/manual.pdf",
                                     "chunk_id": 2, "lines": None, "location": {"page": 2}}]
    assert "also_in" not in folded[1]


def test_repeats_within_one_file_and_short_texts_are_not_folded() -> None:
    same_file = [row(1, "/m/a.txt", SECTION), row(2, "/m/a.txt", SECTION)]
    assert len(fold_copies(same_file)) == 2
    short = [row(1, "/m/a.txt", "See the options."), row(2, "/m/b.txt", "See the options.")]
    assert len(fold_copies(short)) == 2


def test_the_other_copies_are_named_by_the_cli_and_mcp(capsys) -> None:
    from psirag_kb.cli.results import print_results
    from psirag_kb.serving.shapes import passage

    kept = fold_copies([row(1, "/m/manual.html", SECTION), row(2, "/m/manual.pdf", SECTION)])
    shown = kept[0] | {"score": 0.5}
    assert passage(shown)["also_in"] == ["/m/manual.pdf p. 2"]
    print_results({"query": "options", "mode": "auto", "results": [shown]})
    assert "also in: /m/manual.pdf p. 2" in capsys.readouterr().out


def test_texts_made_from_one_template_are_not_copies() -> None:
    """A diary's days share their frame but each names its own place every few words."""
    def day(n: int, place: str) -> str:
        return (f"Hiking diary, day {n}. We walked past an old volcano on the way to the {place}, "
                f"stopped for lunch by the water at the {place}, counted the birds over the "
                f"{place} and slept in a tent beside the {place} until the rain came down the "
                "mountain in the early morning.")
    days = [row(1, "/d/day1.md", day(1, "blue lake")), row(2, "/d/day2.md", day(2, "old quarry"))]
    assert len(fold_copies(days)) == 2


def test_a_long_number_is_read_in_one_way() -> None:
    """A section number's digits have one reading: a line opening with a long number (digits of
    pi, a hash) once took exponential time here, and an ingest stood still on one chunk."""
    assert not listing_line("3." + "14159265358979323846" * 4 + " is pi, to eighty places")
    assert listing_line("7.6 Helgrind Command-line Options 131")

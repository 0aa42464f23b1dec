"""Locations in words, as the CLI, the TUI and the agent's citations show them."""

from __future__ import annotations

import pytest

from psirag_kb.cli.results import print_answer, print_results
from psirag_kb.locations import describe, place


@pytest.mark.parametrize(("location", "words"), [
    ({"page": 4}, "p. 4"),
    ({"pages": [4, 5]}, "pp. 4-5"),
    ({"slide": 3, "title": "Results"}, 'slide 3 "Results"'),
    ({"slides": [2, 3]}, "slides 2-3"),
    ({"sheet": "Q1", "rows": [2, 41]}, "sheet Q1 rows 2-41"),
    ({"sheet": "Q1 2024", "rows": [5, 5]}, 'sheet "Q1 2024" row 5'),
    ({"paragraphs": [14, 19], "heading": "Results"}, 'paragraphs 14-19 under "Results"'),
    ({"paragraph": 4, "table": 1, "row": 3}, "paragraph 4 table 1 row 3"),
    ({"section": "ch2.xhtml", "paragraph": 12}, "section ch2.xhtml paragraph 12"),
    ({"cell": 4, "type": "code"}, "cell 4 (code)"),
    ({"cells": [2, 4], "type": "markdown"}, "cells 2-4 (markdown)"),
    ({"part": "body"}, "body"),
    ({"slide": 1, "title": "A very long title that goes on and on and on forever"},
     'slide 1 "A very long title that goes on and on a…"'),
    ({"verse": 7}, "verse 7"),
    ({}, ""),
    (None, ""),
])
def test_describe(location, words) -> None:
    assert describe(location) == words


def test_place_prefers_the_location_then_lines() -> None:
    assert place({"source": "/d/report.pptx", "lines": [1, 9], "location": {"slide": 3}}) == (
        "/d/report.pptx slide 3")
    assert place({"source": "/d/notes.md", "lines": [12, 18], "location": None}) == (
        "/d/notes.md:12-18")
    assert place({"source": "record-7", "lines": None}) == "record-7"


def test_cli_prints_locations(capsys: pytest.CaptureFixture[str]) -> None:
    result = {"query": "q", "mode": "hybrid", "results": [
        {"rank": 1, "score": 0.5, "source": "/d/budget.xlsx", "lines": [3, 9],
         "location": {"sheet": "Q1", "rows": [2, 41]}, "text": "Amount: 5"},
        {"rank": 2, "score": 0.4, "source": "/d/paper.pdf", "lines": [1, 2],
         "location": {"page": 4}, "text": "Abstract"},
        {"rank": 3, "score": 0.3, "source": "/d/a.md", "lines": [5, 6], "text": "Notes"}]}
    print_results(result)
    out = capsys.readouterr().out
    assert "/d/budget.xlsx sheet Q1 rows 2-41\n" in out
    assert "/d/paper.pdf p. 4\n" in out and "/d/a.md:5-6\n" in out
    print_answer({"status": "answered", "answer": "Five.", "message": "", "hops": 1,
                   "steps": [], "citations": [result["results"][0]]})
    assert "[1] /d/budget.xlsx sheet Q1 rows 2-41: Amount: 5" in capsys.readouterr().out

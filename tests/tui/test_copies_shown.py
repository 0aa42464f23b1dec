"""A passage found in several copies of one document is listed once, naming the others."""

from __future__ import annotations

from tui.format import chunk_text, copies_line, result_label

RESULT = {"rank": 1, "score": 0.8, "source": "manual/valgrind.html", "chunk_id": 7,
          "text": "Helgrind command-line options control lock order checks.",
          "also_in": [{"source": "manual/valgrind.pdf", "chunk_id": 9,
                       "location": {"page": 127}},
                      {"source": "manual/valgrind.txt", "chunk_id": 11, "lines": [3, 9]}]}


def test_a_folded_result_names_its_other_copies_in_the_list_and_the_chunk_view() -> None:
    line = copies_line(RESULT, 60)
    assert line.startswith("also in ")
    assert "valgrind.pdf" in line and "valgrind.txt" in line
    assert "also in" in result_label(RESULT, ["helgrind"]).plain
    assert "valgrind.pdf" in chunk_text(RESULT, ["helgrind"]).plain


def test_a_result_without_copies_has_no_such_line() -> None:
    plain = {key: value for key, value in RESULT.items() if key != "also_in"}
    assert copies_line(plain) == ""
    assert "also in" not in result_label(plain, []).plain
    assert result_label(plain, []).plain.count("\n") == 1
    # a copy given as a place string (the API's OpenAI-shaped rows) is shown as it is
    assert copies_line({"also_in": ["b/manual.pdf p. 3"]}) == "also in b/manual.pdf p. 3"

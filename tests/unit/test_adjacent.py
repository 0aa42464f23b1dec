"""Touching chunks of one file merge into one result; k results stay k places."""

from __future__ import annotations

from typing import Any

from psirag_kb.search.adjacent import merge_adjacent
from psirag_kb.search.rows import result_row
from psirag_kb.storage.records import Hit


def _hit(chunk_id: int, path: str, ordinal: int, origin: str = "file",
         location: dict[str, Any] | None = None) -> Hit:
    """Chunk `ordinal` of a file: two lines each, a blank line between chunks."""
    first = 1 + 3 * ordinal
    return Hit(chunk_id, path, origin, path, ordinal, first, first + 1,
               f"text {ordinal} of {path}", location)


def _rows(hits: list[Hit], scores: list[float]) -> tuple[list[dict[str, Any]], dict[int, Hit]]:
    rows = [result_row(h, h.id, s, n) for n, (h, s) in enumerate(zip(hits, scores,
                                                                       strict=True), start=1)]
    return rows, {h.id: h for h in hits}


def test_touching_chunks_become_one_result_in_file_order() -> None:
    hits = [_hit(12, "/a.md", 5), _hit(30, "/b.md", 0), _hit(11, "/a.md", 4),
            _hit(13, "/a.md", 6)]
    rows, by_id = _rows(hits, [0.9, 0.8, 0.7, 0.6])
    merged = merge_adjacent(rows, by_id, 5)
    assert [r["chunk_ids"] for r in merged] == [[11, 12, 13], [30]]
    top = merged[0]
    assert (top["chunk_id"], top["score"], top["rank"]) == (12, 0.9, 1)  # the best chunk's
    assert top["text"] == "text 4 of /a.md\n\ntext 5 of /a.md\n\ntext 6 of /a.md"
    assert top["lines"] == [13, 20]
    assert merged[1]["rank"] == 2 and merged[1]["text"] == "text 0 of /b.md"


def test_a_chunk_between_two_hits_joins_them() -> None:
    hits = [_hit(1, "/a.md", 0), _hit(3, "/a.md", 2), _hit(9, "/z.md", 0), _hit(2, "/a.md", 1)]
    rows, by_id = _rows(hits, [0.5, 0.4, 0.3, 0.2])
    assert [r["chunk_ids"] for r in merge_adjacent(rows, by_id, 5)] == [[1, 2, 3], [9]]


def test_gaps_and_other_files_stay_apart_and_k_places_remain() -> None:
    hits = [_hit(1, "/a.md", 0), _hit(3, "/a.md", 2), _hit(20, "/b.md", 1),
            _hit(40, "/c.md", 3), _hit(21, "/b.md", 2), _hit(50, "/d.md", 0),
            _hit(60, "/e.md", 0), _hit(70, "/f.md", 0)]
    rows, by_id = _rows(hits, [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
    merged = merge_adjacent(rows, by_id, 5)
    assert [r["chunk_ids"] for r in merged] == [[1], [3], [20, 21], [40], [50]]
    places = [(by_id[r["chunk_id"]].path, tuple(r["chunk_ids"])) for r in merged]
    assert len(set(places)) == 5


def test_corpus_records_never_merge() -> None:
    hits = [_hit(1, "/corpus.jsonl", 0, origin="corpus"),
            _hit(2, "/corpus.jsonl", 1, origin="corpus")]
    rows, by_id = _rows(hits, [0.9, 0.8])
    assert [r["chunk_ids"] for r in merge_adjacent(rows, by_id, 5)] == [[1], [2]]


def test_locations_of_merged_chunks_span_them() -> None:
    hits = [_hit(1, "/p.pdf", 0, location={"page": 3}),
            _hit(2, "/p.pdf", 1, location={"page": 4})]
    rows, by_id = _rows(hits, [0.9, 0.8])
    [merged] = merge_adjacent(rows, by_id, 5)
    assert merged["location"] == {"pages": [3, 4]}


def test_chunks_in_different_sheets_or_mail_parts_stay_apart() -> None:
    hits = [_hit(1, "/m.eml", 0, location={"part": "header"}),
            _hit(2, "/m.eml", 1, location={"part": "body"}),
            _hit(3, "/m.eml", 2, location={"part": "body"})]
    rows, by_id = _rows(hits, [0.9, 0.8, 0.7])
    merged = merge_adjacent(rows, by_id, 5)
    assert [r["chunk_ids"] for r in merged] == [[1], [2, 3]]
    assert [r["location"] for r in merged] == [{"part": "header"}, {"part": "body"}]


def test_merged_cells_and_rows_become_one_range() -> None:
    hits = [_hit(1, "/n.ipynb", 0, location={"cell": 2, "type": "markdown"}),
            _hit(2, "/n.ipynb", 1, location={"cells": [3, 6], "type": "code"}),
            _hit(3, "/s.xlsx", 0, location={"sheet": "Q1", "rows": [2, 9]}),
            _hit(4, "/s.xlsx", 1, location={"sheet": "Q1", "row": 10})]
    rows, by_id = _rows(hits, [0.9, 0.8, 0.7, 0.6])
    assert [r["location"] for r in merge_adjacent(rows, by_id, 5)] == [
        {"cells": [2, 6], "type": "markdown"}, {"sheet": "Q1", "rows": [2, 10]}]

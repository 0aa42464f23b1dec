"""A contents page is not an answer, and one passage is one result: real files (a manual with a
dotted-leader contents page; one guide as Markdown and as HTML), the real MiniLM, DuckDB,
Tantivy and hnswlib."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.storage.contents import LISTING

SECTIONS = {
    "1. Introduction": "Quillmark is a typesetting daemon for sheet music. It watches a folder "
    "of score files and renders each one to a printable page whenever it changes.",
    "2. Installing Quillmark": "Unpack the release archive, run the configure script and then "
    "make. The build needs a C compiler, the cairo library and about two hundred megabytes.",
    "2.1. Building from source": "A checkout of the repository builds like a release once the "
    "autogen script has made the configure script; the fonts are fetched on the first build.",
    "3. Quillmark Command-line Options": "The following options change how Quillmark renders. "
    "--paper=a4|letter picks the paper size, letter by default in the United States. "
    "--staff-size=N sets the height of a staff in points; twenty is the default. "
    "--no-lyrics leaves the words out of vocal parts. --watch keeps the daemon running and "
    "renders a score again each time its file is saved.",
    "4. Error Messages": "Unknown clef means the score names a clef Quillmark cannot draw. "
    "Overfull system means a line of music is wider than the page at this staff size.",
    "5. Fonts and Engraving": "Noteheads, clefs and accidentals come from the bundled Emmentaler "
    "font; another music font can be named in the score's header.",
    "6. A To-Do List": "Figured bass, guitar tablature and a preview window are planned.",
}
TOPICS = ("page margins", "titles and composers", "repeat signs", "tempo marks", "dynamics",
          "slurs and ties", "grace notes", "chord symbols", "transposing parts", "drum staves",
          "page turns", "rehearsal marks", "multi-bar rests", "lyrics hyphenation")


def chapters() -> dict[str, str]:
    """The manual's sections by numbered heading: the hand-written ones, then one chapter of
    short sections on other topics (so the contents page is as long as a real one's)."""
    more = {f"7.{n}. Engraving {topic}": f"Quillmark engraves {topic} by the rules of the house "
            f"style. The score's header may change how {topic} look on the page, and the "
            f"preview shows {topic} as they will be printed."
            for n, topic in enumerate(TOPICS, start=1)}
    return SECTIONS | {"7. Engraving in detail": "This chapter goes through the engraving "
                       "rules one notation element at a time."} | more


def manual_text() -> str:
    """A manual as text extracted from a PDF: a contents page with dot leaders, then sections
    (each with a page header, as a PDF's text has)."""
    sections = chapters()
    contents = "Quillmark User Manual\nTable of Contents\n" + "".join(
        f"{heading} {'.' * (70 - len(heading))} {page}\n"
        for page, heading in enumerate(sections, start=1))
    body = "".join(f"\n\nQuillmark User Manual\n{heading}\n{text} {text}\n"
                   for heading, text in sections.items())
    return contents + body


GUIDE = ("Before the first concert season, tune every harpsichord of the collection to the "
         "historical pitch of four hundred and fifteen hertz, using the unequal temperament "
         "written on the lid of each instrument; the tuning holds about two weeks in a heated "
         "hall, and less when the humidity changes quickly between rehearsals.")


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, minilm):
    docs = tmp_path_factory.mktemp("docs")
    (docs / "quillmark-manual.txt").write_text(manual_text())
    (docs / "tuning-guide.md").write_text(f"# Harpsichord care\n\n## Tuning\n\n{GUIDE}\n")
    (docs / "tuning-guide.html").write_text(
        "<html><head><title>Harpsichord care</title></head><body><h1>Harpsichord care</h1>"
        f"<h2>Tuning</h2><p>{GUIDE}</p></body></html>")
    (docs / "concert-notes.md").write_text(
        "# Concert notes\n\nThe spring concerts moved to the small hall; the harpsichord "
        "stays there from March to May and is tuned by the visiting technician.\n")
    config = Config().with_data_dir(tmp_path_factory.mktemp("data") / "data")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([docs])
        yield kb


def contents_rows(kb: KnowledgeBase) -> list[tuple[int, float]]:
    """(chunk id, contents score) of the manual's chunks that hold its contents page."""
    db = kb.stores.store.reader()
    return db.execute("SELECT id, contents FROM chunks WHERE text LIKE '%Table of Contents%'"
                      ).fetchall()


def test_the_contents_page_is_scored_as_it_is_stored(kb) -> None:
    rows = contents_rows(kb)
    assert rows and all(score >= LISTING for _, score in rows)
    db = kb.stores.store.reader()
    prose = db.execute("SELECT max(contents) FROM chunks WHERE text LIKE '%Emmentaler%'"
                       ).fetchone()[0]
    assert prose < LISTING


@pytest.mark.parametrize("mode", ["auto", "hybrid"])
def test_the_section_ranks_above_its_contents_line(kb, mode) -> None:
    result = kb.query("What are Quillmark's command-line options?", mode=mode, k=3)
    texts = [row["text"] for row in result["results"]]
    section = next(i for i, text in enumerate(texts) if "--staff-size" in text)
    listing = next((i for i, text in enumerate(texts) if "Table of Contents" in text), None)
    assert section == 0
    assert listing is None or listing > section


def test_a_question_for_the_contents_still_finds_them(kb) -> None:
    result = kb.query("Quillmark user manual table of contents", mode="hybrid", k=5)
    assert "Table of Contents" in result["results"][0]["text"]


def test_one_passage_in_two_formats_is_shown_once_naming_the_other(kb) -> None:
    result = kb.query("tune the harpsichord to four hundred and fifteen hertz", k=5)
    guides = [row for row in result["results"] if Path(row["path"]).stem == "tuning-guide"]
    assert len(guides) == 1
    shown, = guides
    other = {".md": ".html", ".html": ".md"}[Path(shown["path"]).suffix]
    assert [Path(copy["path"]).suffix for copy in shown["also_in"]] == [other]
    assert shown["also_in"][0]["chunk_id"] != shown["chunk_id"]
    notes = [row for row in result["results"] if "concert-notes" in row["path"]]
    assert notes and "also_in" not in notes[0]  # a passage about the same thing is no copy


def test_an_older_database_gets_its_chunks_scored_by_the_migration(tmp_path, minilm) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "quillmark-manual.txt").write_text(manual_text())
    config = Config().with_data_dir(tmp_path / "data")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([docs])
    db = duckdb.connect(str(config.data_dir / "kb.duckdb"))  # as schema 8 left it
    for (name,) in db.execute("SELECT index_name FROM duckdb_indexes() "
                              "WHERE table_name = 'chunks'").fetchall():
        db.execute(f'DROP INDEX "{name}"')
    db.execute("ALTER TABLE chunks DROP COLUMN contents")
    db.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")
    db.close()
    with KnowledgeBase(config, embedder=minilm) as kb:
        rows = contents_rows(kb)
        assert rows and all(score >= LISTING for _, score in rows)
        result = kb.query("What are Quillmark's command-line options?", mode="hybrid", k=5)
        assert "--staff-size" in result["results"][0]["text"]

"""Chunk headers and merged results end to end: real files, DuckDB, Tantivy, hnswlib."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from psirag_kb.config import Config
from psirag_kb.ingest.chunking import content_hash
from psirag_kb.kb import KnowledgeBase
from psirag_kb.serving.shapes import search_result
from psirag_kb.storage.migrations import SCHEMA_VERSION

CARE = [
    "The animal needs a large enclosure with places to hide and room to move.",
    "Keep the temperature steady and check it twice a day with a reliable thermometer.",
    "Feed adults a varied diet and never leave uneaten food in the enclosure overnight.",
    "Young animals grow quickly and need smaller meals more often than adults.",
    "Clean water must always be available, and the bowl is scrubbed every morning.",
    "Keepers record weight once a week to notice illness early.",
    "Visitors should never tap on the glass because noise causes stress.",
    "A vet examines every animal twice a year and after any injury.",
    "Breeding pairs are separated outside the season to avoid fights.",
    "Records of every feeding are kept in the logbook next to the enclosure door.",
]
"""The body of two care guides: it never names the animal, only the title does."""


def write_guides(folder: Path) -> Path:
    """Two guides with the same body under different titles; returns the penguin's."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, title in (("komodo.md", "Komodo dragon husbandry"),
                        ("penguin.md", "Emperor penguin husbandry")):
        (folder / name).write_text(f"# {title}\n\n" + "\n\n".join(CARE) + "\n")
    return folder / "penguin.md"


def placed(kb: KnowledgeBase, results: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(file name, ordinal) of each result's chunk."""
    hits = kb.stores.store.hits(r["chunk_id"] for r in results)
    return [(Path(hits[r["chunk_id"]].path).name, hits[r["chunk_id"]].ordinal) for r in results]


def guides_kb(config: Config, embedder: Any, folder: Path, context: bool) -> KnowledgeBase:
    """A knowledge base of the two guides in small chunks, headers on or off, no merging."""
    config = config.replace("ingest", chunk_context=context, chunk_tokens=40).replace(
        "retrieval", merge_adjacent=False, fold_copies=False)  # the bodies are copies
    kb = KnowledgeBase(config, embedder=embedder)
    kb.ingest([folder])
    return kb


def test_title_finds_a_chunk_from_the_middle_thanks_to_its_header(config, minilm, tmp_path):
    penguin = write_guides(tmp_path / "guides")
    with guides_kb(config, minilm, tmp_path / "guides", context=True) as kb:
        assert kb.stores.store.chunk_count() == 8
        contexts = dict(kb.stores.store.db.cursor().execute(
            "SELECT ordinal, context FROM chunks WHERE source = ? ORDER BY ordinal",
            [str(penguin)]).fetchall())
        # the first chunk starts with the title; the others carry it in their header
        assert contexts == {0: "", 1: "Emperor penguin husbandry",
                            2: "Emperor penguin husbandry", 3: "Emperor penguin husbandry"}
        sparse = kb.query("Emperor penguin", mode="sparse", k=4)["results"]
        assert ("penguin.md", 2) in placed(kb, sparse)
        middle = next(r for r, p in zip(sparse, placed(kb, sparse), strict=True)
                      if p == ("penguin.md", 2))
        assert "penguin" not in middle["text"].lower()  # the header is never shown
        assert "penguin" not in kb.chunk(middle["chunk_id"])["text"].lower()
        dense = kb.query("Emperor penguin", mode="dense", k=4)["results"]
        assert {name for name, _ in placed(kb, dense)} == {"penguin.md"}
        with_header = placed(kb, dense).index(("penguin.md", 2))
        # a BM25 index rebuilt from DuckDB gets the headers back
        store = kb.stores.store
        kb.stores.writer.call(
            lambda: kb.stores.sparse.rebuild(store.generation, store.all_texts()))
        rebuilt = kb.query("Emperor penguin", mode="sparse", k=4)["results"]
        assert placed(kb, rebuilt) == placed(kb, sparse)
    with guides_kb(config.with_data_dir(tmp_path / "bare"), minilm, tmp_path / "guides",
                   context=False) as kb:
        sparse = kb.query("Emperor penguin", mode="sparse", k=4)["results"]
        assert placed(kb, sparse) == [("penguin.md", 0)]  # only the chunk with the title
        dense = placed(kb, kb.query("Emperor penguin", mode="dense", k=8)["results"])
        assert dense.index(("penguin.md", 2)) > with_header
        assert {name for name, _ in dense[:4]} == {"penguin.md", "komodo.md"}


AURORA = [
    "Auroras appear when charged particles from the sun reach the upper atmosphere.",
    "An aurora is brightest near the magnetic poles during long winter nights.",
    "Green aurora light comes from oxygen about a hundred kilometres up.",
    "Red aurora light comes from oxygen much higher, where the air is thin.",
    "Photographers wait for an aurora on cold clear nights far from city lights.",
]


def test_touching_hits_merge_into_one_result_and_k_results_are_k_places(
        config, fake_embedder, tmp_path):
    folder = tmp_path / "sky"
    folder.mkdir()
    (folder / "lights.md").write_text("# Polar lights\n\n" + "\n\n".join(AURORA) + "\n")
    for n, where in enumerate(["Tromso", "Fairbanks", "Yellowknife", "Abisko", "Rovaniemi",
                               "Kiruna"]):
        (folder / f"trip{n}.md").write_text(f"In {where} we saw an aurora over the lake after "
                                            "a long drive through snow, then went back to the "
                                            "cabin.\n")
    # the short notes differ in one word: copies, here listed each as its own place
    config = config.replace("ingest", chunk_tokens=20).replace("retrieval", fold_copies=False)
    with KnowledgeBase(config.replace("retrieval", merge_adjacent=False),
                       embedder=fake_embedder) as kb:
        kb.ingest([folder])
        apart = kb.query("aurora", mode="sparse", k=5)["results"]
        lights = sorted(o for name, o in placed(kb, apart) if name == "lights.md")
        assert len(lights) >= 2 and lights[1] == lights[0] + 1  # neighbours, two results
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        result = kb.query("aurora", mode="sparse", k=5)
        rows = result["results"]
        assert [r["rank"] for r in rows] == [1, 2, 3, 4, 5]
        hits = kb.stores.store.hits(i for r in rows for i in r["chunk_ids"])
        spans = [(hits[r["chunk_id"]].path, [hits[i].ordinal for i in r["chunk_ids"]])
                 for r in rows]
        joined = next(r for r, (_, ordinals) in zip(rows, spans, strict=True)
                      if len(ordinals) > 1)
        parts = [hits[i] for i in joined["chunk_ids"]]
        assert joined["chunk_id"] in joined["chunk_ids"]
        assert joined["text"].startswith(parts[0].text) and joined["text"].endswith(
            parts[-1].text)
        assert all(p.text in joined["text"] for p in parts)
        assert joined["lines"] == [parts[0].line_first, parts[-1].line_last]
        for n, (path, ordinals) in enumerate(spans):  # five places: none touches another
            assert ordinals == list(range(ordinals[0], ordinals[0] + len(ordinals)))
            for other, others in spans[n + 1:]:
                if other == path:
                    assert ordinals[-1] + 1 < others[0] or others[-1] + 1 < ordinals[0]
        compact = search_result(result)  # the MCP server's form still works
        assert [item["id"] for item in compact["results"]] == [str(r["chunk_id"])
                                                              for r in rows]


def test_schema_2_database_gains_chunk_context_without_embedding_again(
        config, fake_embedder, tmp_path):
    folder = tmp_path / "guides"
    penguin = write_guides(folder)
    config = config.replace("ingest", chunk_tokens=40)
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        kb.ingest([folder])
    db = duckdb.connect(str(config.data_dir / "kb.duckdb"))  # as schema version 2 left it:
    for name in ("chunks_id", "chunks_file"):
        db.execute(f"DROP INDEX {name}")
    db.execute("ALTER TABLE chunks DROP COLUMN context")  # no headers, hashes of the text alone
    rows = db.execute("SELECT id, text FROM chunks").fetchall()
    db.executemany("UPDATE chunks SET hash = ? WHERE id = ?",
                   [(content_hash(text), i) for i, text in rows])
    db.execute("CREATE INDEX chunks_id ON chunks (id)")
    db.execute("CREATE INDEX chunks_file ON chunks (file_id)")
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    db.close()
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        assert kb.stores.store.meta()["schema_version"] == str(SCHEMA_VERSION)
        cursor = kb.stores.store.db.cursor()
        assert cursor.execute("SELECT DISTINCT context FROM chunks").fetchall() == [("",)]
        assert kb.query("thermometer", mode="sparse", k=2)["results"]
        report = kb.ingest([folder])  # unchanged files are not read again
        assert (report.unchanged, report.chunks_embedded) == (2, 0)
        penguin.write_text(penguin.read_text() + "\nPenguins need cold air.\n")
        report = kb.ingest([folder])
        with_header, total = cursor.execute(
            "SELECT count(*) FILTER (context <> ''), count(*) FROM chunks WHERE source = ?",
            [str(penguin)]).fetchone()
        # the chunk that starts with the title has no header: kept; the others are new
        assert report.updated == 1 and report.chunks_embedded == with_header == total - 1
        assert kb.query("Emperor penguin", mode="sparse", k=5)["results"][0]["source"] == str(
            penguin)


def test_k_places_even_when_the_best_hits_all_touch(config, fake_embedder, tmp_path):
    folder = tmp_path / "log"
    folder.mkdir()
    # twelve consecutive chunks all naming the glacier, then five other files naming it once
    entries = [f"Day {n}: the glacier moved again near camp {n}, and we measured it twice."
               for n in range(12)]
    (folder / "diary.md").write_text("\n\n".join(entries) + "\n")
    for n in range(5):
        (folder / f"note{n}.md").write_text(f"Note {n}: a glacier far away, seen once from the "
                                            "ridge while walking home in the evening light.\n")
    # the short notes differ in one word: copies, here listed each as its own place
    config = config.replace("ingest", chunk_tokens=20).replace("retrieval", fold_copies=False)
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        kb.ingest([folder])
        rows = kb.query("glacier moved camp measured", mode="sparse", k=4)["results"]
        assert len(rows) == 4  # the diary's run is one place; the other three are found deeper
        hits = kb.stores.store.hits(i for r in rows for i in r["chunk_ids"])
        diary = [r for r in rows if hits[r["chunk_id"]].path.endswith("diary.md")]
        assert len(diary) == 1 and len(diary[0]["chunk_ids"]) >= 8

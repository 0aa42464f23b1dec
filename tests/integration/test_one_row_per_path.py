"""One row per real file, however the folders named or watched overlap, and the schema-4
migration that merges the duplicate rows older versions stored (real model, DuckDB, Tantivy,
hnswlib and watchdog)."""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb
import numpy as np
import pytest
from daemon_helpers import api, wait_for

from psirag_kb.config import Config
from psirag_kb.ingest.walk import one_per_file
from psirag_kb.kb import KnowledgeBase
from psirag_kb.paths import spelled_under
from psirag_kb.service.daemon import Daemon
from psirag_kb.service.watcher import FolderWatcher
from psirag_kb.storage.migrations import SCHEMA_VERSION
from psirag_kb.storage.schema import PATH_INDEX

OLD = "The quokka smiles at the camera on Rottnest island near Perth."
NEW = "Emperor penguins huddle together through the long antarctic winter."
MODES = ("sparse", "dense", "tree", "hybrid")


def rows(kb: KnowledgeBase) -> list[str]:
    """The path of every file row."""
    db = kb.stores.store.db
    return [p for (p,) in db.cursor().execute("SELECT path FROM files ORDER BY path")
            .fetchall()]


def texts(kb: KnowledgeBase, question: str) -> list[str]:
    """The texts every retrieval mode returns for a question."""
    return [r["text"] for mode in MODES
            for r in kb.query(question, mode=mode, k=10)["results"]]


def consistent(kb: KnowledgeBase) -> None:
    """BM25, hnswlib and the tree hold exactly DuckDB's chunks, with DuckDB's vectors."""
    ids = kb.stores.store.chunk_ids()
    assert kb.stores.sparse.count() == kb.stores.dense.count == len(ids)
    assert np.allclose(kb.stores.dense.get(ids), kb.stores.store.vectors(ids), atol=1e-5)
    assert not kb.stores.tree_missing and kb.stores.tree_index.live.n_leaves == len(ids)


def test_one_per_file_keeps_the_first_spelling(tmp_path: Path) -> None:
    (tmp_path / "D" / "sub").mkdir(parents=True)
    (tmp_path / "L").symlink_to(tmp_path / "D")
    a, b = tmp_path / "D/sub/a.md", tmp_path / "D/b.md"
    found = [(a, tmp_path / "D"), (b, tmp_path / "D"), (a, tmp_path / "D/sub"),
             (tmp_path / "L/sub/a.md", tmp_path / "L/sub"), (a, a.parent)]
    folders, others = one_per_file(found)
    assert folders == {a: tmp_path / "D", b: tmp_path / "D"}
    assert others == [tmp_path / "L/sub/a.md"]


def test_spelled_under_a_watched_folder(tmp_path: Path) -> None:
    folder, outside = tmp_path / "D", tmp_path / "X"
    (folder / "sub").mkdir(parents=True)
    outside.mkdir()
    (tmp_path / "L").symlink_to(folder)
    (folder / "out").symlink_to(outside)  # a link inside the folder to a folder outside it
    assert spelled_under(tmp_path / "L/sub/a.md", folder) == folder / "sub/a.md"
    assert spelled_under(tmp_path / "L", folder) == folder
    assert spelled_under(folder / "sub/a.md", folder) == folder / "sub/a.md"
    assert spelled_under(folder / "out/s.md", folder) is None
    assert spelled_under(outside / "s.md", folder) is None


def test_overlapping_paths_give_one_row_and_an_edit_leaves_no_stale_text(
        config: Config, minilm, tmp_path: Path) -> None:
    folder = tmp_path / "D"
    (folder / "sub").mkdir(parents=True)
    (tmp_path / "L").symlink_to(folder)  # the same folder under another name
    note = folder / "sub" / "a.md"
    note.write_text(OLD + "\n")
    with KnowledgeBase(config, embedder=minilm) as kb:
        report = kb.ingest([folder, folder / "sub", note, f"{folder}/./sub/",
                            tmp_path / "L" / "sub"])
        assert (report.added, report.chunks_embedded) == (1, 1)
        assert rows(kb) == [str(note)]
        note.write_text(NEW + "\n")
        report = kb.ingest([folder])
        assert report.updated == 1 and rows(kb) == [str(note)]
        assert not any("quokka" in text for text in texts(kb, "quokka Rottnest island"))
        assert kb.query("quokka Rottnest", mode="sparse", k=10)["results"] == []
        consistent(kb)


def test_a_file_named_beside_its_folder_is_one_row(config: Config, minilm,
                                                   tmp_path: Path) -> None:
    folder = tmp_path / "D"
    folder.mkdir()
    (folder / "a.md").write_text(OLD + "\n")
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert kb.ingest([folder, folder / "a.md"]).added == 1
        assert kb.ingest([folder / "a.md", folder]).unchanged == 1
        assert rows(kb) == [str(folder / "a.md")]


def test_another_spelling_of_a_known_file_replaces_its_row(config: Config, minilm,
                                                           tmp_path: Path) -> None:
    folder = tmp_path / "D"
    folder.mkdir()
    (tmp_path / "L").symlink_to(folder)
    (folder / "a.md").write_text(OLD + "\n")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([tmp_path / "L"])
        chunk_ids = kb.stores.store.chunk_ids().tolist()
        report = kb.ingest([folder, tmp_path / "L"])
        assert report.renamed == 1 and report.chunks_embedded == 0
        assert rows(kb) == [str(folder / "a.md")]
        assert kb.stores.store.chunk_ids().tolist() == chunk_ids  # its vectors kept


def test_the_watcher_scanning_nested_watched_folders_stores_one_row(
        config: Config, minilm, tmp_path: Path) -> None:
    folder = tmp_path / "D"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.md").write_text(OLD + "\n")
    with KnowledgeBase(config, embedder=minilm) as kb:
        watcher = FolderWatcher(kb, [folder, folder / "sub"], 0.1, config.data_dir)
        watcher.start()
        try:
            watcher.scan()  # both watched folders in one pass
            wait_for(lambda: kb.stores.store.chunk_count() and watcher.queue_size == 0)
            (folder / "sub" / "b.md").write_text(NEW + "\n")  # seen by both watches
            wait_for(lambda: kb.stores.store.file(str(folder / "sub" / "b.md"))
                     and watcher.queue_size == 0)
        finally:
            watcher.stop()
        assert rows(kb) == [str(folder / "sub" / "a.md"), str(folder / "sub" / "b.md")]
        assert kb.stores.store.chunk_count() == 2


def test_a_reindex_through_a_link_to_a_watched_folder_keeps_one_row(
        config: Config, minilm, tmp_path: Path) -> None:
    folder = tmp_path / "D"
    (folder / "sub").mkdir(parents=True)
    (tmp_path / "L").symlink_to(folder)
    note = folder / "sub" / "a.md"
    note.write_text(OLD + "\n")
    config = config.replace("watch", folders=[str(folder)], quiet_period_s=0.2)
    daemon = Daemon(config.replace("api", port=0), embedder=minilm)
    daemon.start()
    try:
        wait_for(lambda: daemon.kb.stores.store.file(str(note)))
        for raw in ("L/sub/a.md", "L/sub", "L"):
            code, body = api(daemon, "POST", "/api/reindex", {"path": str(tmp_path / raw)})
            assert code == 200, body
        assert rows(daemon.kb) == [str(note)]
    finally:
        daemon.stop()


def version_3_with_a_duplicate(config: Config, minilm, tmp_path: Path) -> Path:
    """A data directory as schema 3 left it after an overlapping ingest and an edit: two rows
    for one path, the older one holding the old text, each with its chunks in BM25, hnswlib
    and the tree."""
    folder = tmp_path / "D"
    folder.mkdir()
    note = folder / "a.md"
    note.write_text(OLD + "\n")
    (folder / "b.md").write_text("Kiwis are flightless birds that forage at night.\n")
    aside = f"{note}.older-row"
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
    db = duckdb.connect(str(config.data_dir / "kb.duckdb"))
    db.execute(f"DROP INDEX IF EXISTS {PATH_INDEX}")
    db.execute("UPDATE files SET path = ? WHERE path = ?", [aside, str(note)])
    db.close()
    note.write_text(NEW + "\n")
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert kb.ingest([note]).added == 1  # a second row, as overlapping folders made it
    db = duckdb.connect(str(config.data_dir / "kb.duckdb"))
    db.execute(f"DROP INDEX IF EXISTS {PATH_INDEX}")
    db.execute("CREATE INDEX IF NOT EXISTS files_path ON files (path)")
    db.execute("UPDATE files SET path = ?, updated = updated - 100 WHERE path = ?",
               [str(note), aside])
    db.execute("UPDATE chunks SET source = ? WHERE source = ?", [str(note), aside])
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    db.execute("DELETE FROM meta WHERE key = 'identity'")
    assert db.execute("SELECT count(*) FROM files WHERE path = ?", [str(note)]).fetchone() == (
        2,)
    db.close()
    for path in (config.data_dir / "bm25" / "GENERATION",
                 config.data_dir / "dense" / "dense.generation"):  # as version 3 wrote them
        path.write_text(" ".join(path.read_text().split()[:-1]))
    return note


def test_migration_merges_duplicate_rows(config: Config, minilm, tmp_path: Path,
                                        caplog: pytest.LogCaptureFixture) -> None:
    note = version_3_with_a_duplicate(config, minilm, tmp_path)
    with caplog.at_level(logging.INFO, logger="psirag_kb"), KnowledgeBase(
            config, embedder=minilm) as kb:
        assert "1 duplicate file rows (1 chunks) merged" in caplog.text
        assert "rebuild" not in caplog.text  # the removal reached BM25, hnswlib and the tree
        assert kb.stores.store.meta()["schema_version"] == str(SCHEMA_VERSION)
        assert rows(kb) == sorted([str(note), str(note.parent / "b.md")])
        assert kb.stores.store.chunk_count() == 2
        assert not any("quokka" in text for text in texts(kb, "quokka Rottnest island"))
        assert any("penguins" in text for text in texts(kb, "emperor penguins"))
        consistent(kb)
        generation = kb.stores.store.generation
        with kb.stores.store.db.cursor() as cursor:  # one row per path from now on
            indexes = cursor.execute("SELECT index_name, is_unique FROM duckdb_indexes() "
                                     "WHERE table_name = 'files'").fetchall()
        assert (PATH_INDEX, True) in indexes
    with KnowledgeBase(config, embedder=minilm) as kb:  # nothing is rebuilt at the next start
        stores = kb.stores
        assert (stores.store.generation == generation == stores.sparse.generation
                == stores.dense.generation)
        assert kb.stores.tree_state == {"state": "ok"}
        consistent(kb)
        note.write_text(OLD + "\n")
        assert kb.ingest([note.parent]).updated == 1
        assert len(rows(kb)) == 2


def test_a_path_cannot_be_stored_twice(config: Config, minilm, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(OLD + "\n")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([tmp_path / "a.md"])
        with pytest.raises(duckdb.ConstraintException):
            kb.stores.store.db.cursor().execute(
                "INSERT INTO files SELECT id + 1, path, origin, hash, size, mtime, state, "
                "reason, chunks, updated, encoding FROM files")
        assert rows(kb) == [str(tmp_path / "a.md")]

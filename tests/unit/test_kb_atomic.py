"""Replacement is atomic, and the plumbing works with a fake embedder."""

from __future__ import annotations

import pytest

from psirag_kb.ingest.report import IngestReport
from psirag_kb.kb import KnowledgeBase
from psirag_kb.storage import changes
from psirag_kb.storage.sparse import plain_query


@pytest.mark.integration  # a KnowledgeBase
def test_failed_commit_keeps_the_old_version(config, fake_embedder, tmp_path, monkeypatch):
    doc = tmp_path / "doc.txt"
    doc.write_text("Original text about lighthouses and their keepers.\n")
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        kb.ingest([doc])
        doc.write_text("Replacement text about submarines and sonar.\n")

        def boom(db, rows, vectors, dim):
            raise RuntimeError("simulated crash during insert")

        monkeypatch.setattr(changes, "insert_chunks", boom)
        with pytest.raises(RuntimeError):
            kb.stores.writer.call(lambda: kb.ingestion._ingest_batch([doc], IngestReport()))
        monkeypatch.undo()
        texts = [r["text"] for r in kb.query("lighthouses submarines", mode="sparse")["results"]]
        assert texts == ["Original text about lighthouses and their keepers."]
        assert kb.stores.store.chunk_count() == 1
        report = kb.ingest([doc])
        assert report.updated == 1
        texts = [r["text"] for r in kb.query("lighthouses submarines", mode="sparse")["results"]]
        assert texts == ["Replacement text about submarines and sonar."]


@pytest.mark.integration  # a KnowledgeBase
def test_vanished_file_is_removed_not_failed(config, fake_embedder, tmp_path, monkeypatch):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("Alpha document.\n")
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        kb.ingest([folder])
        original = kb.ingestion.walker.files

        def walk_then_delete(path):
            found = list(original(path))
            (folder / "a.txt").unlink()
            return iter(found)

        monkeypatch.setattr(kb.ingestion.walker, "files", walk_then_delete)
        report = kb.ingest([folder])
        assert report.removed == 1 and report.failed == 0
        assert kb.stores.store.chunk_count() == 0 and kb.stores.sparse.count() == 0


@pytest.mark.integration  # a KnowledgeBase
def test_ignored_and_hidden_paths_are_not_indexed(config, fake_embedder, tmp_path):
    folder = tmp_path / "docs"
    (folder / ".git").mkdir(parents=True)
    (folder / ".git" / "HEAD.txt").write_text("ref\n")
    (folder / ".hidden.md").write_text("secret\n")
    (folder / "note.md.swp").write_text("swap\n")
    (folder / "note.md").write_text("visible note\n")
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        report = kb.ingest([folder])
        assert report.added == 1 and report.skipped == 0
        assert [r.path for r in kb.stores.store.files()] == [str(folder / "note.md")]


@pytest.mark.integration  # a KnowledgeBase
def test_data_dir_inside_a_folder_is_not_indexed(fake_embedder, tmp_path):
    from psirag_kb.config import Config

    config = Config().with_data_dir(tmp_path / "kbdata")
    (tmp_path / "note.txt").write_text("a note\n")
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        kb.ingest([tmp_path])
        assert [r.path for r in kb.stores.store.files()] == [str(tmp_path / "note.txt")]


def test_plain_query_strips_syntax():
    assert plain_query('title:"x" AND (y OR z)^2 -w') == "title x y z 2 w"
    assert plain_query("***") == ""


def test_plain_query_leaves_out_stopwords_unless_nothing_else_is_left():
    assert plain_query("Who founded the Oberoi group?") == "founded Oberoi group"
    assert plain_query("to be or not to be") == "to be or not to be"


@pytest.mark.integration  # a KnowledgeBase
def test_watcher_ingest_keeps_a_file_that_vanishes_mid_read(config, fake_embedder, tmp_path,
                                                            monkeypatch):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("Alpha document.\n")
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        kb.ingest([folder])
        original = kb.ingestion.walker.files

        def walk_then_move(path):
            found = list(original(path))
            (folder / "a.txt").rename(tmp_path / "a.txt")  # a move event will follow
            return iter(found)

        monkeypatch.setattr(kb.ingestion.walker, "files", walk_then_move)
        report = kb.ingest([folder], keep_vanished=True)
        assert report.removed == 0 and kb.stores.store.chunk_count() == 1
        assert kb.rename(folder / "a.txt", tmp_path / "a.txt")
        assert kb.stores.store.file(str(tmp_path / "a.txt")).chunks == 1

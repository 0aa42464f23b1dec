"""Online backups and restores: a backup taken while the daemon indexes a burst of
files restores to the knowledge base as it was at the backup's generation, with no embedding
and no index rebuilt; damaged, partial and non-empty targets are refused."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from daemon_helpers import api, wait_for, watching

from psirag_kb.cli import main
from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.daemon import Daemon
from psirag_kb.storage import backup as backup_module
from psirag_kb.storage.backup import MANIFEST, RESTORING, BackupError, read_manifest, restore
from psirag_kb.storage.dense import DenseIndex
from psirag_kb.storage.sparse import SparseIndex
from psirag_kb.tree import stores as stores_module

WORDS = ("heron", "glacier", "copper", "violin", "orchard", "lantern", "saffron", "harbour",
         "meteor", "falcon", "granite", "tulip")
QUERIES = ["herons waiting by the glacier", "a copper violin in the orchard",
           "saffron lanterns in the harbour", "note 250 about meteors and falcons",
           "granite tulip", "note 7"]
MODES = ("sparse", "dense", "hybrid", "tree")
BURST = 300


def note(n: int) -> str:
    """A short note of its own: a number and three of the words, in a sentence."""
    a, b, c = (WORDS[(n * k) % len(WORDS)] for k in (1, 5, 7))
    return f"# Note {n}\n\nNote {n} tells of a {a} beside a {b}, and of the {c} seen after it.\n"


class Counting:
    """The real model, recording every text it is asked to embed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.embed(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)


def answers(kb: Any) -> dict[str, Any]:
    """Status counts and every query's ranked (chunk id, source, score) per mode."""
    status = kb.status()
    shown = {"files": status["files"], "chunks": status["chunks"],
             "generation": status["generation"],
             "abstract_nodes": status["tree"]["abstract_nodes"]}
    for query in QUERIES:
        for mode in MODES:
            rows = kb.query(query, mode=mode, k=8)["results"]
            shown[f"{mode}: {query}"] = [(r["chunk_id"], r["source"], round(r["score"], 5))
                                         for r in rows]
    return shown


def no_rebuilds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Fail on any rebuild of a derived index or of the tree; the list receives what each
    catch-up of the dense index from the database added and deleted."""
    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a derived index or the tree was rebuilt after the restore")

    caught: list[tuple[int, int]] = []
    catch_up = DenseIndex.catch_up

    def counted(self: DenseIndex, *args: Any) -> tuple[int, int]:
        caught.append(catch_up(self, *args))
        return caught[-1]

    monkeypatch.setattr(SparseIndex, "rebuild", refuse)
    monkeypatch.setattr(DenseIndex, "rebuild", refuse)
    monkeypatch.setattr(DenseIndex, "catch_up", counted)
    monkeypatch.setattr(stores_module.Stores, "build_tree", refuse)
    monkeypatch.setattr(stores_module.Stores, "_rebuild_tree", refuse)
    return caught


def test_backup_during_a_burst_restores_the_knowledge_base_at_its_generation(
        tmp_path: Path, minilm: Any, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(20):
        (docs / f"n{n:03d}.md").write_text(note(n))
    config = watching(Config().with_data_dir(tmp_path / "data"), docs, 0.2)
    config = config.replace("backup", dir=str(tmp_path / "named"), every_hours=0.0)
    daemon = Daemon(config, embedder=minilm)
    daemon.start()
    recorded: dict[str, Any] = {}
    try:
        kb = daemon.kb
        wait_for(lambda: kb.stores.store.chunk_count() == 20, 120, "the first 20 notes")
        ann = daemon.people.add("ann", "reader", [str(docs)])  # people.json goes along
        assert api(daemon, "POST", "/api/query", {"text": "heron"}, token=ann)[0] == 200
        assert (config.data_dir / "audit.jsonl").exists()  # and so does her audit line
        start = kb.stores.store.generation

        def burst() -> None:
            for n in range(20, 20 + BURST):
                (docs / f"n{n:03d}.md").write_text(note(n))

        writing = threading.Thread(target=burst)
        writing.start()
        # mid-burst: some notes committed, most not yet
        wait_for(lambda: kb.stores.store.chunk_count() >= 60, 300, "the burst's first commits")

        def record(copied: dict[str, Any]) -> None:  # on the writer: nothing commits meanwhile
            recorded.update(answers(kb))
            recorded["copied generation"] = copied["generation"]

        manifest = kb.backup(tmp_path / "backup", then=record)
        # through the API as `psirag-kb backup` hands it over, while the burst goes on
        status, via_api = api(daemon, "POST", "/api/backup", {"name": "b2"})
        assert status == 200, via_api
        assert via_api["path"] == str(tmp_path / "named" / "b2")
        reader = daemon.people.add("bob", "reader", [str(docs)])
        status, refused = api(daemon, "POST", "/api/backup", {"name": "b3"}, token=reader)
        assert status == 403 and "admin" in refused["error"]
        writing.join()
        wait_for(lambda: kb.stores.store.chunk_count() == 20 + BURST, 600, "the whole burst")
        final = answers(kb)
        shown = daemon.status()["backup"]
        assert shown["path"] == via_api["path"] and shown["generation"] == via_api["generation"]
    finally:
        daemon.stop()

    assert manifest["generation"] == recorded["copied generation"] == recorded["generation"]
    assert start < manifest["generation"] < final["generation"]  # taken during the burst
    assert 20 < recorded["chunks"] < 20 + BURST
    assert manifest["indexes"]["bm25"] == manifest["indexes"]["tree"] == "ok"
    assert manifest["dense_generation"] <= manifest["generation"]
    listed = {f["path"] for f in manifest["files"]}
    assert {"kb.duckdb", "people.json", "api.token", "bm25/meta.json", "dense/dense.hnsw",
            "audit.jsonl"} <= listed
    assert not any(name.startswith(("daemon.", "takeover")) for name in listed)

    target = tmp_path / "restored"
    assert main(["--data-dir", str(target), "restore", str(tmp_path / "backup"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["generation"] == manifest["generation"]
    caught = no_rebuilds(monkeypatch)
    counting = Counting(minilm)
    with KnowledgeBase(Config().with_data_dir(target), counting) as restored:
        assert restored.status()["indexes"] == {"bm25": {"state": "ok"}, "dense": {"state": "ok"}}
        # hnswlib's file as last saved: the vectors committed since come from DuckDB
        assert len(caught) == (manifest["dense_generation"] != manifest["generation"])
        assert restored.tree_status()["state"] == "ok"
        again = answers(restored)
    assert set(counting.texts) <= set(QUERIES)  # only the questions were embedded
    assert again == {k: v for k, v in recorded.items() if k != "copied generation"}
    assert again != {k: v for k, v in final.items()}  # the source went on meanwhile
    people = json.loads((target / "people.json").read_text())
    assert "ann" in json.dumps(people)

    # the API's backup restores as well, at its own generation
    second = tmp_path / "restored2"
    assert main(["--data-dir", str(second), "restore", str(tmp_path / "named" / "b2")]) == 0
    with KnowledgeBase(Config().with_data_dir(second), Counting(minilm)) as restored:
        assert restored.stores.store.generation == via_api["generation"]
        assert restored.stores.store.chunk_count() == via_api["chunks"]


def test_a_backup_leaves_the_dense_index_as_saved_and_the_restore_catches_it_up(
        tmp_path: Path, minilm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(30):
        (docs / f"n{n:03d}.md").write_text(note(n))
    config = Config().with_data_dir(tmp_path / "data")
    recorded: dict[str, Any] = {}
    saves: list[int] = []
    with KnowledgeBase(config, minilm) as kb:
        kb.ingest([docs])
        kb.checkpoint()  # hnswlib saved here; then added, edited and removed notes
        saved = kb.stores.dense.generation
        for n in range(30, 45):
            (docs / f"n{n:03d}.md").write_text(note(n))
        (docs / "n003.md").write_text(note(3) + "\nIt was rewritten after the save.\n")
        (docs / "n004.md").unlink()
        kb.ingest([docs])
        assert kb.stores.dense.generation == saved < kb.stores.store.generation
        save = DenseIndex.save

        def counted(self: DenseIndex, generation: int) -> None:
            saves.append(generation)
            save(self, generation)

        monkeypatch.setattr(DenseIndex, "save", counted)

        def record(copied: dict[str, Any]) -> None:  # on the writer: nothing commits meanwhile
            recorded.update(answers(kb))

        manifest = kb.backup(tmp_path / "backup", then=record)
        assert saves == []  # the writer wrote no hnswlib file for the backup
        monkeypatch.setattr(DenseIndex, "save", save)
        (docs / "n010.md").unlink()  # the source goes on after the backup
        kb.ingest([docs])
        final = answers(kb)
    assert manifest["dense_generation"] == saved < manifest["generation"]
    assert manifest["indexes"]["dense"].startswith(f"saved at generation {saved}")

    restore(tmp_path / "backup", tmp_path / "restored")
    caught = no_rebuilds(monkeypatch)
    counting = Counting(minilm)
    with KnowledgeBase(Config().with_data_dir(tmp_path / "restored"), counting) as restored:
        assert restored.status()["indexes"]["dense"] == {"state": "ok"}
        assert caught == [(16, 2)]  # 15 new notes and the rewritten one; it and n004 gone
        assert restored.stores.dense.generation == manifest["generation"]  # saved once caught up
        again = answers(restored)
    assert set(counting.texts) <= set(QUERIES)  # no chunk embedded again
    assert again == recorded != final


def test_a_backup_saves_the_dense_index_first_when_it_is_far_behind(
        tmp_path: Path, fake_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    config = Config().with_data_dir(tmp_path / "data")
    monkeypatch.setattr(backup_module, "DENSE_BEHIND", 4)  # a twentieth of 8 is less
    with KnowledgeBase(config, fake_embedder) as kb:
        for n in range(3):  # 3 vectors behind the saved file: left to the restore
            (docs / f"n{n}.md").write_text(note(n))
            kb.ingest([docs / f"n{n}.md"])
        first = kb.backup(tmp_path / "b1")
        for n in range(3, 8):  # 8 behind: saved on the writer first
            (docs / f"n{n}.md").write_text(note(n))
            kb.ingest([docs / f"n{n}.md"])
        second = kb.backup(tmp_path / "b2")
    assert first["dense_generation"] < first["generation"]
    assert second["dense_generation"] == second["generation"]
    assert second["indexes"]["dense"] == "ok"


def test_a_large_ingest_saves_the_dense_index_once_it_is_far_behind(
        tmp_path: Path, fake_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    monkeypatch.setattr(backup_module, "DENSE_BEHIND", 4)
    with KnowledgeBase(Config().with_data_dir(tmp_path / "data"), fake_embedder) as kb:
        for n in range(3):
            (docs / f"n{n}.md").write_text(note(n))
        kb.ingest([docs])  # 3 vectors the saved index lacks: left for later
        dense = kb.stores.dense
        assert dense.generation < kb.stores.store.generation and dense.unsaved == 3
        for n in range(3, 8):
            (docs / f"n{n}.md").write_text(note(n))
        kb.ingest([docs])  # 8: saved, and DuckDB checkpointed, before a backup needs it
        dense = kb.stores.dense
        assert dense.generation == kb.stores.store.generation and dense.unsaved == 0
        wal = kb.stores.store.path.with_name("kb.duckdb.wal")
        assert not wal.exists() or wal.stat().st_size == 0


@pytest.fixture
def small(tmp_path: Path, fake_embedder: Any) -> tuple[Config, Path]:
    """A knowledge base of three notes (fake embedder) and a backup of it."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(3):
        (docs / f"n{n}.md").write_text(note(n))
    config = Config().with_data_dir(tmp_path / "data")
    with KnowledgeBase(config, fake_embedder) as kb:
        kb.ingest([docs])
    return config, tmp_path / "backup"


def test_backup_without_a_daemon_runs_in_process_and_restore_refuses_bad_targets(
        small: tuple[Config, Path], tmp_path: Path, fake_embedder: Any, capsys,
        monkeypatch: pytest.MonkeyPatch) -> None:
    config, dest = small
    monkeypatch.setattr("psirag_kb.kb.make_embedder", lambda *_a, **_k: fake_embedder)
    data = ["--data-dir", str(config.data_dir)]
    assert main([*data, "backup", str(dest), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["chunks"] == 3 and report["bytes"] > 0 and "kb.duckdb" in report["files"]
    assert not list(config.data_dir.glob("backup.stage.*"))  # its hard links are gone
    assert main([*data, "backup", str(dest)]) == 1  # never into a folder that holds something
    assert "not an empty folder" in capsys.readouterr().err
    assert main([*data, "backup", str(config.data_dir / "inside")]) == 1
    assert "inside the data directory" in capsys.readouterr().err

    # a non-empty data directory needs --force
    assert main([*data, "restore", str(dest)]) == 1
    assert "not empty" in capsys.readouterr().err
    assert main([*data, "restore", str(dest), "--force"]) == 0
    capsys.readouterr()

    # a damaged file is named, and nothing is written
    broken = tmp_path / "broken"
    import shutil
    shutil.copytree(dest, broken)
    with (broken / "kb.duckdb").open("r+b") as handle:
        handle.seek(5000)
        byte = handle.read(1)
        handle.seek(5000)
        handle.write(bytes([byte[0] ^ 0xFF]))
    empty = tmp_path / "empty"
    assert main(["--data-dir", str(empty), "restore", str(broken)]) == 1
    assert "kb.duckdb does not match its SHA-256" in capsys.readouterr().err
    assert not empty.exists() or not any(empty.iterdir())
    with pytest.raises(BackupError, match="not a psirag-kb backup"):
        read_manifest(tmp_path / "docs")

    # a restore cut short leaves its marker: the stores refuse to open until it is redone
    target = tmp_path / "cut"
    target.mkdir()
    (target / RESTORING).write_text(str(dest))
    with pytest.raises(KBError, match="did not finish"):
        KnowledgeBase(Config().with_data_dir(target), fake_embedder)
    assert main(["--data-dir", str(target), "restore", str(dest), "--force"]) == 0
    with KnowledgeBase(Config().with_data_dir(target), fake_embedder) as kb:
        assert kb.stores.store.chunk_count() == 3


def test_the_daemon_takes_backups_on_a_schedule_and_keeps_the_newest(
        tmp_path: Path, fake_embedder: Any) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(note(1))
    folder = tmp_path / "backups"
    config = watching(Config().with_data_dir(tmp_path / "data"), docs, 0.2)
    config = config.replace("backup", dir=str(folder), every_hours=1.0, keep=2)
    daemon = Daemon(config, embedder=fake_embedder)
    daemon.start()
    try:
        wait_for(lambda: daemon.kb.stores.store.chunk_count() == 1, 60)
        for run in range(1, 4):
            daemon.jobs.run_now("backup")
            wait_for(lambda run=run: daemon.jobs.runs("backup") == run, 60)
            (docs / f"b{run}.md").write_text(note(run + 10))
            wait_for(lambda run=run: daemon.kb.stores.store.chunk_count() == 1 + run, 60)
        job = next(j for j in daemon.jobs.status() if j["name"] == "backup")
        assert "error" not in job, job
        kept = sorted(p.name for p in folder.iterdir())
        assert len(kept) == 2 and all((folder / k / MANIFEST).exists() for k in kept)
        assert len(job["result"]["pruned"]) == 1
        status = daemon.status()
        assert status["backup"]["path"] == str(folder / kept[-1])
        assert status["backup"]["generation"] == read_manifest(folder / kept[-1])["generation"]
    finally:
        daemon.stop()
    assert os.stat(folder / kept[-1] / "api.token").st_mode & 0o077 == 0

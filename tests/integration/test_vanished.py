"""Folders that vanish for a while (renamed away, unmounted) keep their files as unavailable,
searchable, and come back without embedding anything again; deletions still remove at once."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from daemon_helpers import api, wait_for

from psirag_kb.cli import main
from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.daemon import Daemon

ANIMALS = ("okapi", "pangolin", "axolotl", "quokka", "narwhal")


class CountingEmbedder:
    """The real model, counting the passages it embeds (questions go to the model itself)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.embedded = 0
        self._mutex = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        with self._mutex:
            self.embedded += len(texts)
        return self.inner.embed(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def for_queries(self) -> Any:
        return self.inner


def note(animal: str, extra: str = "") -> str:
    return (f"# The {animal}\n\nField notes on the {animal}: marker{animal} lives in a quiet "
            f"valley and eats leaves at dusk. {extra}\n")


def write_notes(folder: Path, animals: tuple[str, ...] = ANIMALS) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for animal in animals:
        (folder / f"{animal}.md").write_text(note(animal))


def watching(base: Path, folder: Path, **ingest: Any) -> Config:
    config = Config().with_data_dir(base / "data")
    config = config.replace("watch", folders=[str(folder)], quiet_period_s=0.2)
    if ingest:
        config = config.replace("ingest", **ingest)
    return config.replace("api", port=0)


def status(daemon: Daemon) -> dict[str, Any]:
    code, body = api(daemon, "GET", "/api/status")
    assert code == 200, body
    return body


def found(daemon: Daemon, animal: str) -> list[dict[str, Any]]:
    """Result rows of a sparse query for the animal's marker word that come from its note."""
    code, body = api(daemon, "POST", "/api/query",
                     {"text": f"marker{animal}", "mode": "sparse", "k": 5})
    assert code == 200, body
    return [r for r in body["results"] if r["source"].endswith(f"/{animal}.md")]


def files(daemon: Daemon) -> dict[str, int]:
    """Files by state ("unavailable" is listed only when there are some)."""
    return {"unavailable": 0} | status(daemon)["files"]


@pytest.fixture
def embedder(minilm) -> CountingEmbedder:
    return CountingEmbedder(minilm)


@pytest.fixture
def running(tmp_path: Path, embedder: CountingEmbedder) -> Iterator[tuple[Daemon, Path]]:
    docs = tmp_path / "docs"
    write_notes(docs)
    daemon = Daemon(watching(tmp_path, docs), embedder=embedder)
    daemon.start()
    try:
        wait_for(lambda: all(found(daemon, a) for a in ANIMALS), timeout=60)
        yield daemon, docs
    finally:
        daemon.stop()


def test_watched_folder_renamed_away_is_kept_and_comes_back_without_embedding(
        running: tuple[Daemon, Path], embedder: CountingEmbedder) -> None:
    daemon, docs = running
    chunks = sorted(daemon.kb.stores.store.chunk_ids().tolist())
    embedded = embedder.embedded
    away = docs.with_name("docs-away")
    os.rename(docs, away)
    wait_for(lambda: files(daemon)["unavailable"] == len(ANIMALS))
    assert files(daemon)["indexed"] == 0
    for animal in ANIMALS:  # still found, and the row says so
        rows = found(daemon, animal)
        assert rows and rows[0]["path"] == str(docs / f"{animal}.md")
        assert "missing" in rows[0]["unavailable"]["reason"], rows[0]
        assert rows[0]["unavailable"]["since"] > 0
    summary = status(daemon)["unavailable"]
    assert [g["files"] for g in summary] == [len(ANIMALS)] and str(docs) in summary[0]["reason"]
    assert status(daemon)["problems"] == []

    (away / "okapi.md").write_text(note("okapi", "It changed while the folder was away."))
    (away / "quokka.md").unlink()
    os.rename(away, docs)
    wait_for(lambda: files(daemon)["indexed"] == len(ANIMALS) - 1
             and files(daemon)["unavailable"] == 0, timeout=30)
    assert not found(daemon, "quokka")  # deleted while away: removed on return
    wait_for(lambda: all(found(daemon, a) and "unavailable" not in found(daemon, a)[0]
                         for a in ANIMALS if a != "quokka"))  # BM25 follows the commit
    wait_for(lambda: any("changed while" in r["text"] for r in found(daemon, "okapi")))
    # only the changed note's chunk was embedded again; the unchanged ones kept their chunks
    assert embedder.embedded - embedded == 1
    kept = set(daemon.kb.stores.store.chunk_ids().tolist())
    assert len(set(chunks) - kept) == 2  # the okapi's old chunk and the quokka's


def test_a_file_deleted_while_its_folder_stays_is_removed_at_once(
        running: tuple[Daemon, Path]) -> None:
    daemon, docs = running
    (docs / "narwhal.md").unlink()
    wait_for(lambda: not found(daemon, "narwhal"))
    assert status(daemon)["files"] == {"indexed": len(ANIMALS) - 1, "skipped": 0, "failed": 0}


def test_folder_missing_at_start_up_is_kept_then_reconciled(
        tmp_path: Path, embedder: CountingEmbedder) -> None:
    docs = tmp_path / "docs"
    write_notes(docs)
    config = watching(tmp_path, docs)
    daemon = Daemon(config, embedder=embedder)
    daemon.start()
    try:
        wait_for(lambda: all(found(daemon, a) for a in ANIMALS), timeout=60)
    finally:
        daemon.stop()
    os.rename(docs, tmp_path / "unplugged")
    embedded = embedder.embedded
    daemon = Daemon(config, embedder=embedder)
    daemon.start()
    try:
        wait_for(lambda: files(daemon)["unavailable"] == len(ANIMALS))
        assert all(found(daemon, a) for a in ANIMALS)
        os.rename(tmp_path / "unplugged", docs)
        wait_for(lambda: files(daemon)["indexed"] == len(ANIMALS), timeout=30)
        assert files(daemon)["unavailable"] == 0
        assert embedder.embedded == embedded
    finally:
        daemon.stop()


def test_watched_folder_left_empty_as_an_unmounted_mount_point_is_kept(
        tmp_path: Path, embedder: CountingEmbedder) -> None:
    """An unmounted drive leaves its mount point, empty: start-up reconciliation keeps the
    files as unavailable; once the files are back they are indexed again, nothing embedded."""
    docs = tmp_path / "docs"
    write_notes(docs)
    config = watching(tmp_path, docs)
    daemon = Daemon(config, embedder=embedder)
    daemon.start()
    try:
        wait_for(lambda: all(found(daemon, a) for a in ANIMALS), timeout=60)
    finally:
        daemon.stop()
    drive = tmp_path / "drive"
    drive.mkdir()
    for child in docs.iterdir():
        os.rename(child, drive / child.name)
    embedded = embedder.embedded
    daemon = Daemon(config, embedder=embedder)
    daemon.start()
    try:
        wait_for(lambda: files(daemon)["unavailable"] == len(ANIMALS))
        assert "empty" in status(daemon)["unavailable"][0]["reason"]
        assert all(found(daemon, a) for a in ANIMALS)
        code, body = api(daemon, "POST", "/api/reindex", {"path": str(docs)})
        assert code == 200 and body["removed"] == 0, body
        for child in drive.iterdir():  # the drive is mounted again
            os.rename(child, docs / child.name)
        wait_for(lambda: files(daemon)["indexed"] == len(ANIMALS), timeout=30)
        assert files(daemon)["unavailable"] == 0 and embedder.embedded == embedded
    finally:
        daemon.stop()


def test_large_subfolder_moved_away_is_kept_a_small_one_is_removed(
        tmp_path: Path, embedder: CountingEmbedder) -> None:
    docs = tmp_path / "docs"
    write_notes(docs / "big", ANIMALS[:3])
    write_notes(docs / "small", ANIMALS[3:])
    daemon = Daemon(watching(tmp_path, docs, vanished_folder_min_files=3), embedder=embedder)
    daemon.start()
    try:
        wait_for(lambda: all(found(daemon, a) for a in ANIMALS), timeout=60)
        os.rename(docs / "big", tmp_path / "big")  # out of the watched folder: gone as a whole
        os.rename(docs / "small", tmp_path / "small")
        wait_for(lambda: files(daemon)["unavailable"] == 3 and files(daemon)["indexed"] == 0)
        assert all(found(daemon, a) for a in ANIMALS[:3])
        assert not any(found(daemon, a) for a in ANIMALS[3:])
        embedded = embedder.embedded
        os.rename(tmp_path / "big", docs / "big")
        wait_for(lambda: files(daemon)["indexed"] == 3 and files(daemon)["unavailable"] == 0)
        assert embedder.embedded == embedded
    finally:
        daemon.stop()


def test_forget_and_dropping_a_watched_folder_remove_unavailable_files(
        tmp_path: Path, embedder: CountingEmbedder, capsys: pytest.CaptureFixture[str]) -> None:
    docs, other = tmp_path / "docs", tmp_path / "other"
    write_notes(docs, ANIMALS[:2])
    write_notes(other, ANIMALS[2:])
    config = watching(tmp_path, docs).replace("watch", folders=[str(docs), str(other)])
    daemon = Daemon(config, embedder=embedder)
    daemon.start()
    try:
        wait_for(lambda: all(found(daemon, a) for a in ANIMALS), timeout=60)
        os.rename(docs, tmp_path / "docs-away")
        os.rename(other, tmp_path / "other-away")
        wait_for(lambda: files(daemon)["unavailable"] == len(ANIMALS))
        # the CLI reaches the daemon
        assert main(["--data-dir", str(config.data_dir), "forget", str(other)]) == 0
        assert "removed 3 file(s)" in capsys.readouterr().out
        assert files(daemon)["unavailable"] == 2
        assert not any(found(daemon, a) for a in ANIMALS[2:])
        code, body = api(daemon, "POST", "/api/forget", {"path": str(other)})
        assert code == 400 and "nothing is indexed" in body["error"], body
    finally:
        daemon.stop()
    daemon = Daemon(config.replace("watch", folders=[str(other)]), embedder=embedder)
    daemon.start()  # docs is no longer watched: its unavailable files go
    try:
        wait_for(lambda: files(daemon)["unavailable"] == 0)
        assert not any(found(daemon, a) for a in ANIMALS)
    finally:
        daemon.stop()


def test_ingest_of_a_missing_folder_keeps_its_files(tmp_path: Path, minilm) -> None:
    docs = tmp_path / "docs"
    write_notes(docs)
    config = Config().with_data_dir(tmp_path / "data")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([docs])
        os.rename(docs, tmp_path / "away")
        report = kb.ingest([docs])
        assert (report.removed, report.unavailable) == (0, len(ANIMALS))
        assert report.problems[0][1] == "unavailable" and "forget" in report.problems[0][2]
        assert kb.stores.store.state_counts()["unavailable"] == len(ANIMALS)
        hits = kb.query("markerpangolin", mode="sparse")["results"]
        assert hits[0]["unavailable"]["reason"].startswith(f"folder {docs} is missing")
        os.rename(tmp_path / "away", docs)
        report = kb.ingest([docs])
        assert (report.restored, report.chunks_embedded) == (len(ANIMALS), 0)
        assert "unavailable" not in kb.query("markerpangolin", mode="sparse")["results"][0]
        with pytest.raises(KBError, match="nothing is indexed"):
            kb.forget([tmp_path / "elsewhere"])
        assert kb.forget([docs]) == len(ANIMALS)
        assert kb.stores.store.chunk_count() == 0

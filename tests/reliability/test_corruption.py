"""Damaged stores: derived indexes are rebuilt from DuckDB, a damaged DuckDB file is named."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder

import psirag_kb.kb as kb_module
from psirag_kb.cli import main
from psirag_kb.config import Config
from psirag_kb.errors import StoreError
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.client import DAEMON_FILE, LOCK_FILE
from psirag_kb.service.daemon import Daemon, DataDirLock

QUERIES = ["harbour boat number 7", "boat number 11", "note about w5x2", "harbour 9"]  # no ties
MODES = ["sparse", "dense", "hybrid"]


def ranked(query: Callable[[str, str], list[dict[str, Any]]]) -> dict[tuple[str, str], list]:
    """(query, mode) -> [(chunk id, source, text, score)] for every test query and mode."""
    return {
        (text, mode): [(r["chunk_id"], r["source"], r["text"], round(r["score"], 4))
                       for r in query(text, mode)]
        for text in QUERIES for mode in MODES
    }


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, int, dict[tuple[str, str], list]]:
    """One knowledge base over twelve notes, built once: its folder, chunk count and answers."""
    root = tmp_path_factory.mktemp("pristine")
    docs = root / "docs"
    docs.mkdir()
    for i in range(12):
        extra = " ".join(f"w{i}x{j}" for j in range(i))  # distinct lengths: no tied scores
        (docs / f"n{i}.txt").write_text(
            f"Note {i} about the harbour and boat number {i}. {extra}\n"
        )
    config = Config().with_data_dir(root / "data")
    with KnowledgeBase(config, embedder=FakeEmbedder()) as kb:
        kb.ingest([docs])
        chunks = kb.stores.store.chunk_count()
        answers = ranked(lambda text, mode: kb.query(text, mode=mode, k=5)["results"])
    return root, chunks, answers


@pytest.fixture
def built(pristine, config) -> tuple[Config, int]:
    """A copy of the pristine knowledge base in this test's data directory, watching its notes."""
    root, chunks, _ = pristine
    shutil.copytree(root / "data", config.data_dir)
    return config.replace("watch", folders=[str(root / "docs")]), chunks


@pytest.fixture
def baseline(pristine) -> dict[tuple[str, str], list]:
    return pristine[2]


def test_garbled_bm25_and_dense_files_are_rebuilt(built, fake_embedder):
    config, chunks = built
    for path in (config.data_dir / "bm25").iterdir():
        if path.is_file() and path.name != "GENERATION":
            path.write_bytes(b"\x00garbage" * 10)
    (config.data_dir / "dense" / "dense.hnsw").write_bytes(b"not an index")
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        assert kb.stores.sparse.count() == chunks == kb.stores.dense.count
        assert kb.query("harbour boat number 7", mode="sparse")["results"]


def test_damaged_database_is_named_with_the_recovery_command(built, fake_embedder):
    config, _ = built
    database = config.data_dir / "kb.duckdb"
    database.write_bytes(b"\x00" * 4096 + b"definitely not duckdb" * 100)
    wal = database.with_name("kb.duckdb.wal")
    if wal.exists():
        wal.unlink()
    with pytest.raises(StoreError) as caught:
        KnowledgeBase(config, embedder=fake_embedder)
    message = str(caught.value)
    assert str(database) in message and "ingest" in message


# -- derived indexes: detected and rebuilt from DuckDB, same answers --------------------------


def _segment(data_dir: Path, suffix: str) -> Path:
    (path,) = (data_dir / "bm25").glob(f"*.{suffix}")
    return path


def _truncate(path: Path, keep: float = 0.5) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


def _garble(path: Path) -> None:
    path.write_bytes(b"\xde\xad\xbe\xef" * (path.stat().st_size // 4 + 1))


BM25_DAMAGED = "is damaged"
DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "bm25 folder deleted": (lambda d: shutil.rmtree(d / "bm25"),
                            "BM25 index at generation -1, database at 1: rebuilding"),
    "bm25 .idx truncated": (lambda d: _truncate(_segment(d, "idx")), BM25_DAMAGED),
    "bm25 .term garbled": (lambda d: _garble(_segment(d, "term")), BM25_DAMAGED),
    "bm25 .store emptied": (lambda d: _segment(d, "store").write_bytes(b""), BM25_DAMAGED),
    "bm25 segment file deleted": (lambda d: _segment(d, "pos").unlink(), BM25_DAMAGED),
    "bm25 meta.json garbled": (lambda d: (d / "bm25" / "meta.json").write_text("{ not json"),
                               BM25_DAMAGED),
    "bm25 meta.json truncated": (lambda d: _truncate(d / "bm25" / "meta.json", 0.2),
                                 BM25_DAMAGED),
    "bm25 GENERATION stale": (lambda d: (d / "bm25" / "GENERATION").write_text("0"),
                              "BM25 index at generation 0, database at 1: rebuilding"),
    "bm25 GENERATION ahead": (lambda d: (d / "bm25" / "GENERATION").write_text("7"),
                              "BM25 index at generation 7, database at 1: rebuilding"),
    "bm25 GENERATION garbled": (lambda d: (d / "bm25" / "GENERATION").write_text("x\x00"),
                                "BM25 index at generation -1, database at 1: rebuilding"),
    "hnsw file deleted": (lambda d: (d / "dense" / "dense.hnsw").unlink(), "unreadable"),
    "hnsw file truncated": (lambda d: _truncate(d / "dense" / "dense.hnsw"), "unreadable"),
    "hnsw file emptied": (lambda d: (d / "dense" / "dense.hnsw").write_bytes(b""), "unreadable"),
    "dense generation stale": (lambda d: (d / "dense" / "dense.generation").write_text("0 12"),
                               "dense index at generation 0, database at 1: catching up"),
}


def api_query(daemon: Daemon, text: str, mode: str) -> list[dict[str, Any]]:
    body = json.dumps({"text": text, "mode": mode, "k": 5}).encode()
    request = urllib.request.Request(daemon.api.url + "/api/query", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {daemon.api.token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read())["results"]


def daemon_config(config: Config) -> Config:
    return config.replace("watch", quiet_period_s=0.2).replace("api", port=0)


@pytest.mark.parametrize("via", ["kb", "daemon"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_derived_index_is_rebuilt_with_the_same_answers(
    built, baseline, fake_embedder, caplog, damage, via
):
    config, chunks = built
    damage_files, logged = DAMAGES[damage]
    damage_files(config.data_dir)
    if damage.startswith("hnsw"):
        logged = f"dense index {config.data_dir / 'dense' / 'dense.hnsw'} {logged}"
    with caplog.at_level(logging.INFO, logger="psirag_kb"):
        if via == "kb":
            with KnowledgeBase(config, embedder=fake_embedder) as kb:
                assert kb.stores.sparse.count() == chunks == kb.stores.dense.count
                assert kb.stores.sparse.generation == kb.stores.store.generation == 1
                after = ranked(lambda text, mode: kb.query(text, mode=mode, k=5)["results"])
        else:
            daemon = Daemon(daemon_config(config), embedder=fake_embedder)
            daemon.start()
            try:
                assert daemon.kb.stores.sparse.count() == chunks == daemon.kb.stores.dense.count
                after = ranked(lambda text, mode: api_query(daemon, text, mode))
            finally:
                daemon.stop()
    assert logged in caplog.text  # detected, not silently served
    assert after == baseline
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="psirag_kb"):  # the rebuilt index was saved
        with KnowledgeBase(config, embedder=fake_embedder) as kb:
            assert kb.stores.sparse.count() == chunks == kb.stores.dense.count
    assert "rebuild" not in caplog.text and "unreadable" not in caplog.text


# -- the database itself: a clear error naming the file and the commands that recover ---------


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00" * 4096 + b"definitely not duckdb" * 100)


def _header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[:8192] = b"\xa5" * 8192
    path.write_bytes(bytes(data))


DATABASE_DAMAGES: dict[str, Callable[[Path], None]] = {
    "garbage": _garbage,
    "truncated to 0 bytes": lambda p: p.write_bytes(b""),
    "header overwritten": _header,
}


def _damage_database(config: Config, damage: Callable[[Path], None]) -> Path:
    database = config.data_dir / "kb.duckdb"
    database.with_name("kb.duckdb.wal").unlink(missing_ok=True)
    damage(database)
    return database


def assert_recovery_message(message: str, database: Path) -> None:
    """The message names the file and gives commands a user can paste."""
    assert message.startswith(f"the database {database} cannot be opened (")
    assert f"`mv {database} {database}.corrupt`" in message
    assert f"`psirag-kb --data-dir {database.parent} ingest <folders>`" in message
    assert "Traceback" not in message


@pytest.mark.parametrize("damage", list(DATABASE_DAMAGES))
def test_damaged_database_via_kb_cli_and_daemon(built, fake_embedder, capsys, damage):
    config, _ = built
    database = _damage_database(config, DATABASE_DAMAGES[damage])
    size = database.stat().st_size
    with pytest.raises(StoreError) as caught:
        KnowledgeBase(config, embedder=fake_embedder)
    assert_recovery_message(str(caught.value), database)

    capsys.readouterr()
    for command in (["status"], ["query", "harbour", "--mode", "sparse"]):
        assert main(["--data-dir", str(config.data_dir), *command]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("error: the database ")
        assert_recovery_message(captured.err.removeprefix("error: ").strip(), database)

    daemon = Daemon(daemon_config(config), embedder=fake_embedder)
    with pytest.raises(StoreError) as caught:
        daemon.start()
    assert_recovery_message(str(caught.value), database)
    assert not (config.data_dir / LOCK_FILE).exists()  # the data directory is free again
    assert not (config.data_dir / DAEMON_FILE).exists()
    lock = DataDirLock(config.data_dir)
    lock.acquire()
    lock.release()
    assert database.stat().st_size == size  # nothing was overwritten by an empty database


def test_database_truncated_to_half_is_never_a_silent_empty_kb(built, baseline, fake_embedder):
    """Either the named error, or (when only unused blocks were cut) every chunk is there."""
    config, chunks = built
    database = _damage_database(config, lambda p: _truncate(p, 0.5))
    try:
        kb = KnowledgeBase(config, embedder=fake_embedder)
    except StoreError as exc:
        assert_recovery_message(str(exc), database)
        return
    with kb:
        assert kb.stores.store.chunk_count() == chunks
        assert ranked(lambda text, mode: kb.query(text, mode=mode, k=5)["results"]) == baseline


def test_the_recovery_command_in_the_message_works(built, baseline, fake_embedder, monkeypatch,
                                                   capsys):
    config, chunks = built
    database = _damage_database(config, _garbage)
    with pytest.raises(StoreError) as caught:
        KnowledgeBase(config, embedder=fake_embedder)
    move, ingest = re.findall(r"`([^`]*)`", str(caught.value))
    subprocess.run(move, shell=True, check=True)
    assert (database.parent / "kb.duckdb.corrupt").is_file()
    monkeypatch.setattr(kb_module, "make_embedder", lambda *_: fake_embedder)
    args = ingest.split()[1:-1] + [str(config.watch.folders[0])]
    assert main(args) == 0, capsys.readouterr().err
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        assert kb.stores.store.chunk_count() == chunks
        assert ranked(lambda text, mode: kb.query(text, mode=mode, k=5)["results"]) == baseline


def test_database_in_a_folder_whose_path_says_lock_is_not_called_busy(tmp_path, fake_embedder):
    """'lock' in a path (or in "block") is no sign of another process holding the database."""
    config = Config().with_data_dir(tmp_path / "blocks")
    config.data_dir.mkdir()
    database = config.data_dir / "kb.duckdb"
    _garbage(database)
    with pytest.raises(StoreError) as caught:
        KnowledgeBase(config, embedder=fake_embedder)
    assert "in use by another process" not in str(caught.value)
    assert_recovery_message(str(caught.value), database)

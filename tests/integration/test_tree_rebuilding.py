"""A missing or rebuilding tree: the background rebuild is retried, and tree-mode and summarize
queries fall back to BM25 and the dense index and say so (library, CLI, API, MCP)."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_helpers import api
from mcp import Client
from waiting import wait_until

from psirag_kb import cli
from psirag_kb.config import Config
from psirag_kb.errors import StoreError
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.client import LocalClient
from psirag_kb.service.daemon import Daemon
from psirag_kb.service.mcp import build_server
from psirag_kb.tree import stores
from psirag_kb.tree.index import TreeIndex

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_small"
QUESTION = "If Gallu is a demon Lilu is what?"


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory, minilm) -> Path:
    """A data directory whose stored tree lost some leaf rows (as after a crash)."""
    data = tmp_path_factory.mktemp("tree-rebuilding") / "data"
    with KnowledgeBase(Config().with_data_dir(data), embedder=minilm) as kb:
        kb.ingest_jsonl(FIXTURES / "corpus.jsonl")

        def lose_leaves() -> None:
            with kb.stores.store.transaction() as db:
                db.execute("DELETE FROM leaves WHERE chunk_id % 3 = 0")
        kb.stores.writer.call(lose_leaves)
    return data


@pytest.fixture
def config(broken: Path, tmp_path: Path) -> Config:
    """A fresh copy of the broken data directory."""
    shutil.copytree(broken, tmp_path / "data")
    return Config().with_data_dir(tmp_path / "data").replace("api", port=0)


@pytest.fixture
def held_build(monkeypatch) -> Iterator[threading.Event]:
    """Background tree builds wait until the event is set (so the tree stays "rebuilding")."""
    release = threading.Event()
    real_build = TreeIndex.build.__func__

    def slow_build(cls, *args, **kwargs):
        assert release.wait(120)
        return real_build(cls, *args, **kwargs)

    monkeypatch.setattr(TreeIndex, "build", classmethod(slow_build))
    yield release
    release.set()


def tree_ok(kb: KnowledgeBase) -> bool:
    """Whether the tree is back ("ok"), waited for with `wait_until`."""
    return kb.status()["tree"]["state"] == "ok"


def test_a_rebuild_whose_read_fails_is_retried_until_the_tree_is_back(config, minilm,
                                                                      monkeypatch, caplog):
    monkeypatch.setattr(stores, "TREE_REBUILD_BACKOFF_S", (0.05, 0.2), raising=False)
    caplog.set_level(logging.WARNING, logger="psirag_kb.tree.stores")
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert kb.status()["tree"]["state"] == "missing"
        real = kb.stores.store.all_vectors
        calls: list[int] = []

        def flaky(*args, **kwargs):
            calls.append(1)
            if len(calls) == 1:  # a chunk deleted while the snapshot was read
                raise StoreError("chunks changed while their vectors were read; try again")
            return real(*args, **kwargs)

        monkeypatch.setattr(kb.stores.store, "all_vectors", flaky)
        kb.stores.start_tree_rebuild()
        wait_until(lambda: tree_ok(kb), 60, message="the tree back after a rebuild")
        assert len(calls) == 2
        assert "rebuilding the tree failed (attempt 1" in caplog.text
        assert kb.stores.tree_index.problems() == []
        assert "note" not in kb.query(QUESTION, mode="tree", k=5)


def test_closing_stops_a_rebuild_that_keeps_failing(config, minilm, monkeypatch):
    monkeypatch.setattr(stores, "TREE_REBUILD_BACKOFF_S", (0.05, 0.1), raising=False)
    calls: list[int] = []
    with KnowledgeBase(config, embedder=minilm) as kb:
        def failing(*args, **kwargs):
            calls.append(1)
            raise StoreError("chunks changed while their vectors were read; try again")

        monkeypatch.setattr(kb.stores.store, "all_vectors", failing)
        kb.stores.start_tree_rebuild()
        wait_until(lambda: len(calls) >= 2, 30, 0.02, "a second attempt at the rebuild")
        assert kb.status()["tree"]["state"] == "rebuilding"
        assert "retrying" in kb.status()["tree"]["reason"]
    threads = [t for t in threading.enumerate() if t.name == "psirag-tree-rebuild"]
    for thread in threads:
        thread.join(10)
    assert not any(t.is_alive() for t in threads)


def test_while_the_tree_is_missing_tree_and_summarize_fall_back_and_say_so(config, minilm):
    with KnowledgeBase(config, embedder=minilm) as kb:
        tree = kb.query(QUESTION, mode="tree", k=5)
        assert tree["results"] and {"hotpot-9", "hotpot-5"} & {r["source"]
                                                              for r in tree["results"]}
        assert tree["note"].startswith("the tree is missing")
        assert "BM25 and the dense index" in tree["note"]
        summary = kb.query(QUESTION, summarize=True, k=5)
        assert summary["results"] and summary["note"].startswith("the tree is missing")
        assert "note" not in kb.query(QUESTION, mode="sparse", k=5)


def test_the_cli_prints_the_note(config, minilm, capsys, monkeypatch):
    monkeypatch.delenv("PSIRAG_KB_URL", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base = ["--data-dir", str(config.data_dir), "query", QUESTION, "-k", "3"]
    assert cli.main([*base, "--mode", "tree"]) == 0
    out = capsys.readouterr().out
    assert "Note: the tree is missing" in out and "3 results for" in out
    assert cli.main([*base, "--summarize"]) == 0
    out = capsys.readouterr().out
    assert "Note: the tree is missing" in out and "results for" in out
    assert "0 results" not in out


def test_the_api_and_mcp_say_the_tree_is_rebuilding(config, minilm, held_build, monkeypatch):
    monkeypatch.delenv("PSIRAG_KB_TOKEN", raising=False)
    daemon = Daemon(config, embedder=minilm)
    daemon.start()  # starts the background rebuild, held until the end of the test
    try:
        assert daemon.kb.status()["tree"]["state"] == "rebuilding"
        code, tree = api(daemon, "POST", "/api/query", {"text": QUESTION, "mode": "tree",
                                                        "k": 5})
        assert code == 200 and tree["results"]
        assert tree["note"].startswith("the tree is rebuilding")
        code, summary = api(daemon, "POST", "/api/query", {"text": QUESTION,
                                                           "summarize": True, "k": 5})
        assert code == 200 and summary["results"]
        assert summary["note"].startswith("the tree is rebuilding")

        async def search() -> dict:
            async with Client(build_server(LocalClient(daemon.kb))) as client:
                result = await client.call_tool("search", {"query": QUESTION, "mode": "tree",
                                                           "k": 5})
                assert not result.is_error
                return result.structured_content

        import anyio

        found = anyio.run(search)
        assert found["results"] and found["note"].startswith("the tree is rebuilding")
        held_build.set()
        wait_until(lambda: tree_ok(daemon.kb), 60, message="the tree built once released")
        assert "note" not in api(daemon, "POST", "/api/query",
                                 {"text": QUESTION, "mode": "tree", "k": 5})[1]
    finally:
        daemon.stop()

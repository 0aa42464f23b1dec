"""Abstracts as part of indexing: `ingest` writes them, a daemon writes them once it is quiet."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from daemon_helpers import api, wait_for

from psirag_kb.cli import main
from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.daemon import Daemon

SAMPLES = Path(__file__).resolve().parents[2] / "examples" / "docs"
KEYWORDS = "Several passages about people and places, history, geography"


def copy_docs(target: Path, limit: int = 8) -> Path:
    """A folder of the smallest real sample documents (text, Markdown and reST)."""
    target.mkdir(parents=True)
    files = sorted((p for p in SAMPLES.rglob("*") if p.suffix in (".md", ".txt", ".rst")),
                   key=lambda p: (p.stat().st_size, p.name))
    assert len(files) >= limit
    for source in files[:limit]:
        (target / source.name).write_bytes(source.read_bytes())
    return target


def top_of_tree(kb: KnowledgeBase) -> list[dict]:
    """The root and its children, as the tree browser shows them."""
    root = kb.node()
    return [root, *root["children"]]


def test_ingest_writes_the_abstracts_of_the_top_of_the_tree(config: Config, tmp_path: Path,
                                                             capsys) -> None:
    docs = copy_docs(tmp_path / "docs")
    data = ["--data-dir", str(config.data_dir)]
    assert main([*data, "ingest", "--json", str(docs)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["abstracts"]["regenerated"] > 0 and "abstracts" in report["seconds"]
    with KnowledgeBase(config) as kb:
        top = top_of_tree(kb)
        assert len(top) >= 3
        for node in top:
            assert node["abstract"] and not node["dirty"], node
        assert kb.status()["abstracts"]["dirty"] == 0


def test_no_abstracts_leaves_the_tree_to_maintain(config: Config, tmp_path: Path,
                                                  capsys) -> None:
    docs = copy_docs(tmp_path / "docs", limit=3)
    data = ["--data-dir", str(config.data_dir)]
    assert main([*data, "ingest", "--no-abstracts", str(docs)]) == 0
    assert "abstracts" not in capsys.readouterr().out
    with KnowledgeBase(config) as kb:
        root = kb.node()
        assert not root["abstract"] and root["dirty"]
        dirty = kb.status()["abstracts"]["dirty"]
        assert dirty > 0
    assert main([*data, "status"]) == 0
    assert f"abstracts: {dirty} dirty (offline keyword)" in capsys.readouterr().out
    assert main([*data, "maintain"]) == 0
    capsys.readouterr()
    assert main([*data, "status"]) == 0
    assert "abstracts: 0 dirty" in capsys.readouterr().out


def quiet_daemon_config(config: Config, docs: Path) -> Config:
    config = config.replace("watch", folders=[str(docs)], quiet_period_s=0.2,
                            abstracts_quiet_s=0.5)
    return config.replace("api", port=0)


def test_a_daemon_writes_abstracts_once_its_queue_drains(config: Config, tmp_path: Path,
                                                         fake_embedder) -> None:
    docs = copy_docs(tmp_path / "docs", limit=4)
    daemon = Daemon(quiet_daemon_config(config, docs), embedder=fake_embedder)
    daemon.start()
    try:
        def clean_top() -> bool:
            root = api(daemon, "GET", "/api/tree")[1]
            nodes = [root, *root.get("children", [])]
            return len(nodes) > 1 and all(n["abstract"] and not n["dirty"] for n in nodes)

        wait_for(clean_top, timeout=60)
        runs = daemon.refresher.runs
        note = docs / "volcanoes.md"
        note.write_text("# Volcanoes of Iceland\n\nEyjafjallajokull erupted in 2010 and "
                        "grounded flights across Europe for weeks.\n")
        wait_for(lambda: api(daemon, "POST", "/api/query", {
            "text": "Eyjafjallajokull", "mode": "sparse", "k": 3})[1]["results"], timeout=30)
        wait_for(clean_top, timeout=60)
        assert daemon.refresher.runs > runs
        [hit] = api(daemon, "POST", "/api/query", {
            "text": "Eyjafjallajokull", "mode": "sparse", "k": 1})[1]["results"]
        path = api(daemon, "GET", f"/api/path/{hit['chunk_id']}")[1]["path"]
        assert path and all(node["abstract"] and not node["dirty"] for node in path)
        assert api(daemon, "GET", "/api/status")[1]["daemon"]["abstracts"]["runs"] >= 2
    finally:
        daemon.stop()


def test_with_an_llm_offline_keywords_come_first_then_the_llms(config: Config, tmp_path: Path,
                                                               fake_embedder,
                                                               fake_ollama) -> None:
    release = threading.Event()

    def slow_reply(body: dict) -> str:
        release.wait(30)
        return KEYWORDS

    fake_ollama.script(fn=slow_reply)
    docs = copy_docs(tmp_path / "docs", limit=3)
    config = quiet_daemon_config(config, docs)
    config = config.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=60.0,
                            abstract_model="llama3.1:8b", grounding=False)
    daemon = Daemon(config, embedder=fake_embedder)
    daemon.start()
    try:
        def root() -> dict:
            return api(daemon, "GET", "/api/tree")[1]

        # the LLM is held back: the offline keywords are there meanwhile, still dirty
        wait_for(lambda: root().get("abstract"), timeout=60)
        assert root()["dirty"] and root()["abstract"] != KEYWORDS
        wait_for(lambda: fake_ollama.chats, timeout=30)  # the LLM pass follows the offline one
        release.set()
        wait_for(lambda: root()["abstract"] == KEYWORDS and not root()["dirty"], timeout=60)
        assert daemon.kb.stores.tree_index.view.dirty == 0
    finally:
        release.set()
        daemon.stop()


def test_a_waiting_offline_run_makes_an_llm_run_give_way(config: Config, minilm, tmp_path: Path,
                                                         fake_ollama) -> None:
    answered = threading.Event()

    def reply(body: dict) -> str:
        answered.set()
        time.sleep(0.3)
        return KEYWORDS

    fake_ollama.script(fn=reply)
    docs = copy_docs(tmp_path / "docs", limit=3)
    config = config.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=30.0,
                            abstract_model="llama3.1:8b", grounding=False)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([docs])
        total = kb.stores.tree_index.view.dirty
        assert total > 3
        results: dict[str, dict] = {}
        llm = threading.Thread(target=lambda: results.update(llm=kb.regenerate_abstracts()))
        llm.start()
        assert answered.wait(30)
        results["offline"] = kb.regenerate_abstracts(offline=True)  # waits for the LLM run
        llm.join(30)
        assert results["llm"].get("interrupted") and results["llm"]["regenerated"] < total
        assert results["offline"]["regenerated"] > 0  # nodes the LLM had not reached yet
        live = kb.stores.tree_index.live
        assert all(node in live.abstracts for node in live.children)


@pytest.mark.parametrize("offline", [True, False])
def test_offline_runs_never_ask_the_llm(config: Config, minilm, tmp_path: Path, fake_ollama,
                                        offline: bool) -> None:
    fake_ollama.script(fn=lambda body: KEYWORDS)
    docs = copy_docs(tmp_path / "docs", limit=2)
    config = config.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=30.0,
                            abstract_model="llama3.1:8b", grounding=False)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([docs])
        kb.regenerate_abstracts(offline=offline)
        live = kb.stores.tree_index.live
        assert all(node in live.abstracts for node in live.children)
        assert bool(fake_ollama.chats) is not offline
        # offline keywords stand in until the LLM writes its own: the nodes stay dirty
        assert bool(live.dirty) is offline

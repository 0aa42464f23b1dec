"""Abstracts in the knowledge base: offline by default, Ollama when enabled, kept fresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psirag_kb.cli import main
from psirag_kb.kb import KnowledgeBase

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_small"


def llm_config(config, url: str, **values):
    return config.replace("llm", enabled=True, host=url, timeout_s=2.0, **values)


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    lines = (FIXTURES / "corpus.jsonl").read_text().splitlines()[:60]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_offline_abstracts_cover_every_node_and_persist(config, minilm, small_corpus):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        live = kb.tree_index.live
        assert live.dirty == set(live.children)
        report = kb.regenerate_abstracts()
        assert report["regenerated"] == len(live.children) and report["failed"] == 0
        assert not live.dirty
        for node, text in live.abstracts.items():
            phrases = text.split(", ")
            assert 1 <= len(phrases) <= 20 and len({p.lower() for p in phrases}) == len(phrases)
            assert node in live.abstract_vectors
        root = kb.node()
        assert root["abstract"] and not root["dirty"] and root["layer"] == live.depth
        saved = dict(live.abstracts)
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert kb.tree_index.live.abstracts == saved and not kb.tree_index.live.dirty
        assert kb.status()["abstracts"]["dirty"] == 0


def test_a_change_marks_ancestors_dirty_and_maintain_refreshes(config, minilm, small_corpus,
                                                               tmp_path):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        kb.regenerate_abstracts()
        note = tmp_path / "note.txt"
        note.write_text("A note about volcanoes of Iceland and their eruptions in 2010.\n")
        kb.ingest([note])
        live = kb.tree_index.live
        [chunk] = [h for h in kb.store.hits(kb.tree_index.chunk_ids().tolist()).values()
                   if h.path == str(note)]
        ancestors = live.ancestors(-chunk.id)
        assert ancestors and set(ancestors) <= live.dirty
        result = kb.maintain()
        assert result["abstracts"]["regenerated"] >= len(ancestors)
        assert not live.dirty


def test_tree_cli_json_shape(config, small_corpus, capsys):
    data = str(config.data_dir)
    assert main(["--data-dir", data, "ingest", "--jsonl", str(small_corpus)]) == 0
    assert main(["--data-dir", data, "maintain", "--json"]) == 0
    capsys.readouterr()
    assert main(["--data-dir", data, "tree", "--json"]) == 0
    node = json.loads(capsys.readouterr().out)
    assert set(node) >= {"id", "layer", "abstract", "dirty", "children"}
    assert node["abstract"] and node["dirty"] is False
    child = node["children"][0]
    assert set(child) >= {"id", "abstract", "leaves"} and child["leaves"] >= 1
    assert child["kind"] == "node"  # the root of a 60-leaf tree has abstract children
    assert main(["--data-dir", data, "tree", str(child["id"]), "--json"]) == 0
    below = json.loads(capsys.readouterr().out)
    assert below["id"] == child["id"] and below["parent"] == node["id"]
    assert sum(c["leaves"] for c in below["children"]) == child["leaves"]


def test_ollama_abstracts_are_cleaned_and_stored(config, minilm, small_corpus, fake_ollama):
    fake_ollama.script(fn=lambda body: "Summary: Several passages about people and places.")
    config = llm_config(config, fake_ollama.url, abstract_model="llama3.1:8b")
    config = config.replace("tree", abstract_kind="summative")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        report = kb.regenerate_abstracts()
        live = kb.tree_index.live
        assert report["failed"] == 0 and not live.dirty
        assert set(live.abstracts.values()) == {"Several passages about people and places."}
        chat = fake_ollama.chats[0]
        assert chat.options["temperature"] == 0 and chat.options["num_ctx"] >= 4096


@pytest.mark.parametrize("mode", ["junk", "missing", "dead"])
def test_failed_generations_are_never_stored(config, minilm, small_corpus, fake_ollama, mode):
    url = fake_ollama.url
    if mode == "dead":
        fake_ollama.stop()
    else:
        fake_ollama.script(mode=mode)
    config = llm_config(config, url)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        live = kb.tree_index.live
        nodes = set(live.children)
        kb.regenerate_abstracts()
        assert live.dirty == nodes  # still due for an LLM abstract, retried later
        assert all("!!!" not in text for text in live.abstracts.values())
        status = kb.status()["abstracts"]
        assert status["last_error"]
        if mode == "dead":
            assert "ollama serve" in status["last_error"]
            assert set(live.abstracts) == nodes  # offline keywords meanwhile
        if mode == "missing":
            assert "ollama pull" in status["last_error"]
        assert kb.query("Who is the demon Gallu?", mode="hybrid")["results"]


def test_regeneration_resumes_after_an_interruption(config, minilm, small_corpus):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        total = len(kb.tree_index.live.children)
        import psirag_kb.abstracts.job as abstraction

        abstraction.BATCH_NODES, old = 3, abstraction.BATCH_NODES
        try:
            kb.regenerate_abstracts(max_nodes=3)
        finally:
            abstraction.BATCH_NODES = old
        assert len(kb.tree_index.live.dirty) == total - 3
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert len(kb.tree_index.live.dirty) == total - 3
        kb.regenerate_abstracts()
        assert not kb.tree_index.live.dirty

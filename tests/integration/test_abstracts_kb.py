"""Abstracts in the knowledge base: offline by default, Ollama when enabled, kept fresh."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from psirag_kb.abstracts.labels import PROFILE_SIZE
from psirag_kb.cli import main
from psirag_kb.kb import KnowledgeBase

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_small"


def llm_config(config, url: str, **values):
    """Ollama at `url`, its placeholder replies ("llm view of ...") let through ungrounded."""
    values.setdefault("grounding", False)
    return config.replace("llm", enabled=True, host=url, timeout_s=2.0, **values)


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    lines = (FIXTURES / "corpus.jsonl").read_text().splitlines()[:60]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("guide", ["centroid", "abstract"])
def test_offline_abstracts_cover_every_node_and_persist(config, minilm, small_corpus, guide):
    config = config.replace("tree", node_vectors=guide)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        live = kb.stores.tree_index.live
        assert live.dirty == set(live.children)
        report = kb.regenerate_abstracts()
        assert report["regenerated"] == len(live.children) and report["failed"] == 0
        assert not live.dirty
        for node, text in live.abstracts.items():
            phrases = text.split(", ")
            assert 1 <= len(phrases) <= PROFILE_SIZE
            assert len({p.lower() for p in phrases}) == len(phrases)
            # abstracts are embedded only when they guide the tree search
            assert (node in live.abstract_vectors) == (guide == "abstract")
        root = kb.node()
        assert root["abstract"] and not root["dirty"] and root["layer"] == live.depth
        saved = dict(live.abstracts)
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert kb.stores.tree_index.live.abstracts == saved and not kb.stores.tree_index.live.dirty
        assert kb.status()["abstracts"]["dirty"] == 0


def test_a_change_marks_ancestors_dirty_and_maintain_refreshes(config, minilm, small_corpus,
                                                               tmp_path):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        kb.regenerate_abstracts()
        note = tmp_path / "note.txt"
        note.write_text("A note about volcanoes of Iceland and their eruptions in 2010.\n")
        kb.ingest([note])
        live = kb.stores.tree_index.live
        [chunk] = [h for h in kb.stores.store.hits(
            kb.stores.tree_index.chunk_ids().tolist()).values()
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
        live = kb.stores.tree_index.live
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
        live = kb.stores.tree_index.live
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
        total = len(kb.stores.tree_index.live.children)
        import psirag_kb.abstracts.job as abstraction

        abstraction.BATCH_NODES, old = 3, abstraction.BATCH_NODES
        try:
            kb.regenerate_abstracts(max_nodes=3)
        finally:
            abstraction.BATCH_NODES = old
        assert len(kb.stores.tree_index.live.dirty) == total - 3
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert len(kb.stores.tree_index.live.dirty) == total - 3
        kb.regenerate_abstracts()
        assert not kb.stores.tree_index.live.dirty


# -- commits as it goes, progress, interruptions --------------------------------------------------

def many_nodes(config):
    """Four children at most per node: the 60 passages make about 25 abstract nodes."""
    return config.replace("tree", max_children=4)


def keyword_reply(body: dict) -> str:
    """An LLM keyword abstract quoting the first word of the node's text."""
    words = body["messages"][-1]["content"].split()
    return f"llm view of {words[0] if words else 'nothing'}, llm themes"


@pytest.mark.parametrize("how", ["server fails", "ctrl-c", "stop"])
def test_an_interrupted_llm_run_keeps_the_finished_nodes(config, minilm, small_corpus,
                                                         fake_ollama, monkeypatch, how):
    finished = 3
    config = llm_config(many_nodes(config), fake_ollama.url)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        live = kb.stores.tree_index.live
        nodes = set(live.children)
        if how == "server fails":
            fake_ollama.script(fn=keyword_reply, fail_after=finished, then="error")
            report = kb.regenerate_abstracts()
            assert report["failed"] == 1  # the rest: offline placeholders at most, still dirty
        elif how == "stop":  # a daemon stopping: the run ends after the node in hand
            fake_ollama.script(fn=keyword_reply)
            job = kb.abstract_job
            job.on_progress = lambda p: job.stop() if p.get("done") == finished else None
            report = kb.regenerate_abstracts()
            assert report["interrupted"] and report["regenerated"] == finished
            assert len(fake_ollama.chats) == finished
            assert kb.regenerate_abstracts()["regenerated"] == 0  # stopped for good
        else:
            fake_ollama.script(fn=keyword_reply)
            job = kb.abstract_job
            chat = job.llm.chat
            calls = []

            def interrupted(*args, **kwargs):
                calls.append(1)
                if len(calls) > finished:
                    raise KeyboardInterrupt  # Ctrl-C while waiting for Ollama
                return chat(*args, **kwargs)

            monkeypatch.setattr(job.llm, "chat", interrupted)
            with pytest.raises(KeyboardInterrupt):
                kb.regenerate_abstracts()
            assert job.last_result["regenerated"] == finished and len(calls) == finished + 1
        status = kb.status()["abstracts"]
        assert status["dirty"] == len(nodes) - finished and status["running"] is False
        done = {n: t for n, t in live.abstracts.items() if n not in live.dirty}
        assert len(done) == finished and all(t.startswith("llm view of") for t in done.values())
    with KnowledgeBase(config, embedder=minilm) as kb:  # committed, not just in memory
        live = kb.stores.tree_index.live
        assert {n: live.abstracts[n] for n in done} == done
        assert live.dirty == nodes - set(done)


@pytest.mark.parametrize("method", ["covered", "contrast", "keywords"])
def test_an_interrupted_offline_run_keeps_what_it_finished(config, minilm, small_corpus,
                                                           monkeypatch, method):
    import psirag_kb.abstracts.job as abstraction

    config = many_nodes(config).replace("tree", offline_labels=method)
    monkeypatch.setattr(abstraction, "KEYWORD_NODES", 4)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        nodes = set(kb.stores.tree_index.live.children)
        owner = abstraction if method != "keywords" else kb.abstract_job.keywords
        name = "offline_abstracts" if method != "keywords" else "abstract_many"
        extract = getattr(owner, name)
        calls = []

        def interrupted(*args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                raise KeyboardInterrupt
            return extract(*args, **kwargs)

        monkeypatch.setattr(owner, name, interrupted)
        with pytest.raises(KeyboardInterrupt):
            kb.regenerate_abstracts()
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert len(kb.stores.tree_index.live.dirty) == len(nodes) - 8  # two slices of four kept


def test_progress_shows_in_status_while_running(config, minilm, small_corpus, fake_ollama):
    config = llm_config(many_nodes(config), fake_ollama.url)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        total = len(kb.stores.tree_index.live.children)
        fake_ollama.script(fn=keyword_reply, mode="slow", delay=0.15)
        seen: list[dict] = []
        thread = threading.Thread(target=kb.regenerate_abstracts, daemon=True)
        thread.start()
        while thread.is_alive():
            status = kb.status()["abstracts"]
            if status["running"]:
                seen.append(status)
            thread.join(0.05)
        assert kb.status()["abstracts"]["running"] is False
        assert kb.abstract_job.last_result["regenerated"] == total
    assert len(seen) >= 5 and all(s["total"] == total for s in seen)
    assert [s["done"] for s in seen] == sorted(s["done"] for s in seen)
    middle = [s for s in seen if 0 < s["done"] < total]
    assert middle and all(s["rate_per_s"] > 0 and s["eta_s"] > 0 for s in middle)
    assert any(s["dirty"] == total - s["done"] for s in middle)  # committed node by node
    options = fake_ollama.chats[0].options
    assert options["num_ctx"] == 8192 and options["repeat_penalty"] == 1.3
    assert options["temperature"] == 0 and options["num_predict"] > 0


def test_maintain_shows_progress_on_a_terminal(config, small_corpus, fake_ollama, capsys,
                                               monkeypatch):
    data = ["--data-dir", str(config.data_dir)]
    assert main([*data, "ingest", "--no-abstracts", "--jsonl", str(small_corpus)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main([*data, "maintain", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["abstracts"]["failed"] == 0
    assert "abstracts" in err and "nodes/s" in err and "ETA" in err

"""Topic labels on real documents: the root names its topics, and passages route by labels."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

import duckdb
import pytest

from psirag_kb.abstracts.labels import LABEL_MAX, LABEL_MIN, phrase_key
from psirag_kb.abstracts.routing import routing
from psirag_kb.cli import main
from psirag_kb.kb import KnowledgeBase

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "docs"
TOPICS = {  # four clearly different topics, two real documents each
    "licences": (["licenses/Apache-2.0.txt", "licenses/MPL-2.0.txt"], ("licen",)),
    "web": (["web/flask-blueprints.rst", "web/werkzeug-routing.rst"],
            ("blueprint", "routing", "url", "flask")),
    "memory": (["python/pydoc-gc.txt", "python/library-weakref.rst"],
               ("weak", "garbage", "finaliz")),
    "cli": (["libraries/click-quickstart.rst", "libraries/click-why.rst"],
            ("click", "command")),
}
ROUTING_FLOOR = 0.8
"""Passages under the root routed to their child by the children's labels alone: 0.85 measured,
0.71 with the earlier phrase picker's first five phrases (docs/benchmarks/archive.md, "Topic
labels")."""


@pytest.fixture
def topics_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for files, _ in TOPICS.values():
        for name in files:
            shutil.copy(SAMPLE / name, folder / Path(name).name)
    return folder


def texts_of(kb: KnowledgeBase):
    def texts(ids: Iterable[int]) -> dict[int, str]:
        return {cid: text for cid, (text, _) in kb.stores.store.texts(ids).items()}
    return texts


def test_the_root_names_its_topics_and_labels_route_passages(config, minilm, topics_folder,
                                                              capsys):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([topics_folder])
        kb.regenerate_abstracts()
        root = kb.node()
        kids = [c for c in root["children"] if c["kind"] == "node"]
        assert len(kids) >= 3
        labels = [c["label"].split(", ") for c in kids]
        for label in labels:
            assert LABEL_MIN <= len(label) <= LABEL_MAX
        seen = [phrase_key(p) for label in labels for p in label]
        assert len(seen) == len(set(seen))  # no phrase in two siblings' labels
        line = root["label"].lower()
        assert 3 <= len(root["label"].split(", ")) <= LABEL_MAX
        for name, (_, words) in TOPICS.items():  # one line says what the folder holds
            assert any(w in line for w in words), (name, root["label"])
        # every child is named in the root's line by a phrase heading its own long list, and no
        # phrase of that line repeats another's words
        keys = [phrase_key(p) for p in root["label"].split(", ")]
        for kid in kids:
            assert set(keys) & {phrase_key(p) for p in kid["abstract"].split(", ")[:5]}, (
                root["label"], kid["abstract"])
        assert not any(a != b and set(a.split()) <= set(b.split()) for a in keys for b in keys)
        # the long list is kept as the abstract (search, the parent's input), the label is short
        assert all(len(c["abstract"].split(", ")) > len(c["label"].split(", ")) for c in kids)
        view = kb.stores.tree_index.view
        found = routing(view, lambda n: view.nodes[n].label, texts_of(kb))
        assert found["root"] >= ROUTING_FLOOR, found
        assert found["root"] > found["root_majority"] + 0.3
    # `psirag-kb tree` prints the root's label, then each child's
    assert main(["--data-dir", str(config.data_dir), "tree"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].strip() == root["label"]
    assert all(c["label"][:40] in "\n".join(printed) for c in kids)


def test_a_change_relabels_siblings_incrementally_and_labels_persist(config, minilm,
                                                                     topics_folder, tmp_path):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([topics_folder])
        kb.regenerate_abstracts()
        live = kb.stores.tree_index.live
        note = tmp_path / "note.md"
        note.write_text("# Volcanoes\n\nVolcanoes of Iceland erupt lava; volcanic ash from "
                        "Iceland's volcanoes closed airports in 2010.\n" * 3)
        kb.ingest([note])
        dirty = set(live.dirty)
        assert dirty and live.root in dirty
        report = kb.regenerate_abstracts()
        assert report["regenerated"] == len(dirty)  # dirty nodes only, never the whole tree
        for node, kids in live.children.items():  # siblings never share a label phrase
            keys = [phrase_key(p) for k in kids if k > 0 for p in live.labels[k].split(", ")]
            assert len(keys) == len(set(keys)), node
        saved = dict(live.labels)
        assert set(saved) == set(live.children)
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert kb.stores.tree_index.live.labels == saved


def test_a_database_without_the_label_column_gains_it(config, minilm, topics_folder):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([topics_folder])
        kb.regenerate_abstracts()
        abstracts = dict(kb.stores.tree_index.live.abstracts)
    path = config.data_dir / "kb.duckdb"
    db = duckdb.connect(str(path))  # as a database written before labels existed
    db.execute("DROP INDEX IF EXISTS nodes_id")
    db.execute("ALTER TABLE nodes DROP COLUMN label")
    db.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")  # a schema 4 database
    db.close()
    for _ in range(2):  # the migration is additive and idempotent
        with KnowledgeBase(config, embedder=minilm) as kb:
            live = kb.stores.tree_index.live
            assert live.abstracts == abstracts and live.labels == {}
            assert kb.node()["label"] == kb.node()["abstract"]  # until the next abstracts
    db = duckdb.connect(str(path), read_only=True)
    columns = [r[0] for r in db.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'nodes'"
    ).fetchall()]
    indexes = [r[0] for r in db.execute("SELECT index_name FROM duckdb_indexes()").fetchall()]
    db.close()
    assert columns.count("label") == 1 and "nodes_id" in indexes


def test_llm_abstracts_keep_priority_and_labels_stay_offline(config, minilm, topics_folder,
                                                             fake_ollama):
    def reply(body: dict) -> str:  # a keyword abstract naming the node's middle word
        words = [w.strip(".,:;#*()[]`'\"") for w in body["messages"][-1]["content"].split()]
        words = [w for w in words if w.isalpha() and w not in ("llm", "view", "of", "themes")]
        return f"llm view of {words[len(words) // 2] if words else 'nothing'}, llm themes"

    fake_ollama.script(fn=reply)
    config = config.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=2.0,
                            grounding=False)  # placeholder replies
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([topics_folder])
        report = kb.regenerate_abstracts()
        live = kb.stores.tree_index.live
        assert report["failed"] == 0 and not live.dirty
        assert all(text.startswith("llm view of") for text in live.abstracts.values())
        # labels beside the abstracts (a node whose phrases all belong to siblings has none:
        # its abstract is shown)
        assert live.labels and set(live.labels) <= set(live.children)
        for kids in live.children.values():
            labels = [live.labels[k] for k in kids if k in live.labels]
            if len([k for k in kids if k > 0]) > 1:  # shared by all siblings: in no label
                assert all("llm themes" not in label for label in labels), [
                    (live.abstracts.get(k), live.labels.get(k)) for k in kids]
            phrases = [p for label in labels for p in label.split(", ")]
            assert len(phrases) == len(set(phrases))
        root = kb.node()
        assert root["abstract"].startswith("llm view of") and root["label"] != root["abstract"]

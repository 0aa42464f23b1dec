"""Topic labels on real documents: the root names its topics, and passages route by labels."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

import duckdb
import numpy as np
import pytest

from psirag_kb.abstracts.covered import WORDS_MAX, WORDS_MIN
from psirag_kb.abstracts.labels import phrase_key
from psirag_kb.abstracts.routing import by_meaning, routing, routing_by, terms
from psirag_kb.cli import main
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.refresher import AbstractRefresher
from psirag_kb.tree import rows as tree_rows

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
"""Passages under the root routed to their child by the children's labels alone (0.85 measured
with the labels before coverage, 0.71 with the earlier phrase picker's first five phrases)."""
MEANING_FLOOR = 0.9
"""Passages under the root whose vector is nearest their child's embedded "meaning" label (0.97
measured, as with the covered labels: four clearly different topics)."""


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
        view = kb.stores.tree_index.view
        texts = texts_of(kb)
        leads = set()
        for kid in kids:  # 2-5 words, each in a good share of the branch's passages
            words = terms(kid["label"])
            assert WORDS_MIN <= len(words) <= WORDS_MAX, kid["label"]
            found = texts(view.leaves_under(kid["id"])).values()
            held = [set(terms(text)) for text in found]
            for word in words:
                assert sum(word in h for h in held) >= 0.1 * len(held), (word, kid["label"])
            leads.add(phrase_key(kid["label"].split(", ")[0].lower()))
        assert len(leads) == len(kids)  # siblings never share their leading label
        line = root["label"].lower()
        assert WORDS_MIN <= len(terms(root["label"])) <= WORDS_MAX
        named = [name for name, (_, words) in TOPICS.items() if any(w in line for w in words)]
        assert len(named) >= 2, root["label"]  # one line says what the folder holds most
        # the long list is kept as the abstract (search, the parent's input), the label is short
        assert all(len(c["abstract"].split()) > len(c["label"].split()) for c in kids)
        found = routing(view, lambda n: view.nodes[n].label, texts)
        assert found["root"] >= ROUTING_FLOOR, found
        assert found["root"] > found["root_majority"] + 0.3
    # `psirag-kb tree` prints the root's label, then each child's
    assert main(["--data-dir", str(config.data_dir), "tree"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].strip() == root["label"]
    assert all(c["label"][:40] in "\n".join(printed) for c in kids)


def test_a_stray_phrase_of_one_passage_labels_no_branch(config, minilm, topics_folder):
    routing_file = topics_folder / "werkzeug-routing.rst"
    text = routing_file.read_text()
    cut = text.index("\n\n", len(text) // 2)
    routing_file.write_text(text[:cut] + "\n\nThe doujin gamer ethic of computer magazines "
                            "shaped the bundled sample documents." + text[cut:])
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([topics_folder])
        kb.regenerate_abstracts()
        live = kb.stores.tree_index.live
        view = kb.stores.tree_index.view
        stray = {"doujin", "gamer", "ethic", "magazine", "bundled"}
        for node, label in live.labels.items():
            if view.nodes[node].leaves >= 10:  # one passage is a sliver of it
                assert not stray & set(terms(label)), (node, label)


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


def test_labels_by_meaning_route_passages_to_their_branch_by_cosine(config, minilm,
                                                                     topics_folder):
    """`offline_labels = "meaning"`: the covered rules hold, and each passage's stored vector
    is nearest its own branch's embedded label more often than with the covered labels."""
    found = {}
    for method in ("covered", "meaning"):
        with KnowledgeBase(config.replace("tree", offline_labels=method), embedder=minilm) as kb:
            kb.ingest([topics_folder])
            kb.regenerate_abstracts()
            view = kb.stores.tree_index.view
            kids = [k for k in view.nodes[view.root].children if k > 0]
            texts = texts_of(kb)
            for kid in kids:
                words = terms(view.nodes[kid].label)
                assert WORDS_MIN <= len(words) <= WORDS_MAX, view.nodes[kid].label
                held = [set(terms(t)) for t in texts(view.leaves_under(kid)).values()]
                assert all(sum(w in h for h in held) >= 0.1 * len(held) for w in words)
            labels = {}

            def targets(nodes, view=view, labels=labels):
                fresh = [n for n in nodes if n not in labels]
                labels.update(zip(fresh, minilm.embed([view.nodes[n].label for n in fresh]),
                                  strict=True))
                return np.stack([labels[n] for n in nodes])

            found[method] = routing_by(view, by_meaning(
                targets, lambda ids, kb=kb: kb.stores.store.vectors(np.asarray(ids))))["root"]
    assert found["meaning"] >= MEANING_FLOOR, found
    assert found["meaning"] >= found["covered"], found


def test_an_empty_knowledge_base_has_no_tree_and_says_so(config, minilm) -> None:
    """Before anything is indexed the tree, the map and the CLI's `tree` say why there is no
    topic tree (a `TreeEmpty`, which the page shows as a notice, not an error)."""
    from psirag_kb.errors import TreeEmpty

    with KnowledgeBase(config, embedder=minilm) as kb:
        with pytest.raises(TreeEmpty, match="no topic tree yet"):
            kb.node()
        with pytest.raises(TreeEmpty):
            kb.topic_map()


def test_a_tree_labelled_by_an_earlier_labeller_is_labelled_again_once(config, minilm,
                                                                       topics_folder):
    """An upgrade with new label rules, or another `offline_labels`, relabels the stored tree
    (abstracts kept) in the background and in `maintain`; today's labeller is not asked twice."""
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([topics_folder])
        kb.regenerate_abstracts()
        job = kb.abstract_job
        assert kb.stores.store.meta()["labeller"] == job.labeller  # a new KB adopts it
        assert not job.labels_stale() and "labels" not in kb.maintain()
        live = kb.stores.tree_index.live
        labels, abstracts = dict(live.labels), dict(live.abstracts)

        def as_an_earlier_release_left_it() -> None:
            with kb.stores.tree_edit():
                for node in live.labels:
                    live.set_label(node, "doujin gamer ethic")
                with kb.stores.store.transaction():
                    tree_rows.write_tree(kb.stores.store, live)
            kb.stores.store.set_meta_value("labeller", "covered/0")

        kb.stores.writer.call(as_an_earlier_release_left_it)
    with KnowledgeBase(config, embedder=minilm) as kb:  # the upgraded release starts
        job = kb.abstract_job
        assert job.labels_stale()
        refresher = AbstractRefresher(kb, busy=lambda: False, quiet_s=0.0)
        assert refresher.tick()
        live = kb.stores.tree_index.live
        assert live.labels == labels and live.abstracts == abstracts
        assert not job.labels_stale() and not refresher.tick()
    with KnowledgeBase(config.replace("tree", offline_labels="keywords"),
                       embedder=minilm) as kb:  # keywords: no labels, the abstracts shown
        assert kb.abstract_job.labels_stale()
        report = kb.maintain()["labels"]
        assert report["relabelled"] > 0 and report["labeller"].startswith("keywords/")
        assert not any(kb.stores.tree_index.live.labels.values())
        assert kb.node()["label"] == kb.node()["abstract"]
    with KnowledgeBase(config, embedder=minilm) as kb:  # and back
        assert kb.maintain()["labels"]["labeller"] == kb.abstract_job.labeller
        assert kb.stores.tree_index.live.labels == labels

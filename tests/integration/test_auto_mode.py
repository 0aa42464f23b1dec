"""Mode auto over the real MiniLM and the shipped hop discriminator: flat rounds for a one-hop
question, hybrid rounds for more, each later round's queries embedded in one batched call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from psirag_kb.config import Config
from psirag_kb.evaluation import load_questions
from psirag_kb.kb import KnowledgeBase
from psirag_kb.search.multiround import (
    ONE_HOP_ROUNDS,
    SINGLE_HOP_MODE,
    multi_round,
    predict_hops,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory, minilm) -> Iterator[KnowledgeBase]:
    config = Config().with_data_dir(tmp_path_factory.mktemp("auto") / "data")
    with KnowledgeBase(config, embedder=minilm) as opened:
        opened.ingest_jsonl(FIXTURES / "hotpotqa_small" / "corpus.jsonl")
        yield opened


def questions_by_hops(kb: KnowledgeBase) -> dict[int, str]:
    """One question the discriminator judges one-hop and one it judges multi-hop."""
    lines = (FIXTURES / "hops_holdout_sample.jsonl").read_text().splitlines()
    candidates = [json.loads(line)["question"] for line in lines[:80]]
    candidates += [q["question"] for q in load_questions(FIXTURES / "hotpotqa_small" /
                                                         "questions.jsonl")]
    found: dict[int, str] = {}
    for question in candidates:
        found.setdefault(min(predict_hops(kb.engine, question), 2), question)
        if len(found) == 2:
            return found
    raise AssertionError(f"no one-hop and multi-hop pair among the samples: {found}")


def test_one_hop_questions_take_flat_rounds(kb: KnowledgeBase) -> None:
    question = questions_by_hops(kb)[1]
    auto = kb.rank(question, "auto", 5)
    flat = multi_round(kb.engine, question, 5, rounds=ONE_HOP_ROUNDS, mode=SINGLE_HOP_MODE)
    assert ONE_HOP_ROUNDS == 2 and max(s["round"] for s in flat.steps) == 2  # names followed
    assert auto.ids.tolist() == flat.ranking.ids.tolist()
    assert kb.query(question, mode="auto", k=5)["mode"] == "auto"


def test_multi_hop_questions_take_their_rounds(kb: KnowledgeBase) -> None:
    question = questions_by_hops(kb)[2]
    hops = predict_hops(kb.engine, question)
    auto = kb.rank(question, "auto", 5)
    rounds = multi_round(kb.engine, question, 5, rounds=hops)
    assert hops >= 2 and len(rounds.steps) > 1  # later rounds ran
    assert auto.ids.tolist() == rounds.ranking.ids.tolist()


def test_each_round_embeds_once(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    question = questions_by_hops(kb)[2]
    calls: list[int] = []
    embed_many = kb.query_embedder.embed_many
    monkeypatch.setattr(kb.query_embedder, "embed_many",
                        lambda texts: calls.append(len(texts)) or embed_many(texts))
    result = multi_round(kb.engine, question, 5, rounds=2)
    later = [s for s in result.steps if s["round"] == 2]
    assert later, result.steps
    assert calls == [1, len(later)]  # the question once, then its expansions in one call
    assert len(result.results) == 5 and all(r["text"] for r in result.results)

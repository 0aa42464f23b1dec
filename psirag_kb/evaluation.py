"""Retrieval evaluation on benchmark corpora: recall@2, recall@5 and speed per mode."""

from __future__ import annotations

import json
import logging
import re
import string
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.ingest.embedding import CachedEmbedder, Embedder, make_embedder

log = logging.getLogger(__name__)

FLAT_WHOLE = "flat_whole"
"""Baseline mode of `eval`: exact cosine over whole passages, each embedded in one piece."""


def load_questions(path: Path) -> list[dict[str, Any]]:
    """Questions with their gold passage ids."""
    questions = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            questions.append({"question": str(item["question"]),
                              "gold": [str(g) for g in item["supporting_ids"]],
                              "answers": [str(a) for a in item.get("answers") or []]})
        except (ValueError, KeyError, TypeError) as exc:
            raise KBError(f"{path}:{number}: not a question record ({exc})") from exc
    return questions


def normalise_answer(text: str) -> str:
    """SQuAD-style: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, answers: Sequence[str]) -> float:
    """1 when the normalised prediction equals a normalised gold answer."""
    guess = normalise_answer(prediction)
    return float(any(guess == normalise_answer(a) for a in answers))


def f1_score(prediction: str, answers: Sequence[str]) -> float:
    """Best token-overlap F1 over the gold answers."""
    guess = normalise_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalise_answer(answer).split()
        common = sum((Counter(guess) & Counter(gold)).values())
        if common:
            precision, recall = common / len(guess), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def recall_at(retrieved: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Share of gold passages among the first k distinct retrieved sources."""
    if not gold:
        return 0.0
    distinct = list(dict.fromkeys(retrieved))[:k]
    return len(set(distinct) & set(gold)) / len(set(gold))


def evaluate(
    config: Config,
    corpora: Sequence[Path],
    questions_file: Path,
    modes: Sequence[str],
    k: int = 5,
    batches: int = 1,
    data_dir: Path | None = None,
    abstracts: bool = False,
    embedder: Embedder | None = None,
    *,
    open_kb: Callable[..., Any],
) -> dict[str, Any]:
    """Build a fresh KB from the corpora with `open_kb(config, embedder=...)` (the
    KnowledgeBase class: this module sits below the facade), then score every question in
    every mode."""
    questions = load_questions(questions_file)
    if embedder is None:
        embedder = CachedEmbedder(make_embedder(config.embedding, config.storage.cache_dir),
                                  config.storage.cache_dir)
    with tempfile.TemporaryDirectory(prefix="psirag-eval-") as tmp:
        config = config.with_data_dir(data_dir or Path(tmp) / "kb")
        with open_kb(config, embedder=embedder) as kb:
            timings = kb.ingest_corpora(corpora, batches=batches)
            if abstracts:
                started = time.perf_counter()
                kb.regenerate_abstracts()
                timings["abstract_s"] = round(time.perf_counter() - started, 2)
            depth = max(k, 5)
            report: dict[str, Any] = {
                "questions": len(questions),
                "passages": kb.chunk_count(),
                "timings": timings,
                "tree": kb.tree_status(),
                "modes": {},
            }
            for mode in modes:
                if mode == "agent" and config.llm.enabled:
                    report["modes"][mode] = _score_agent(kb, questions)
                    continue
                if mode == FLAT_WHOLE:
                    report["modes"][mode] = _score_whole(kb, embedder, corpora, questions)
                    continue
                kb.rank(questions[0]["question"], mode, depth)  # warm-up
                r2 = r5 = 0.0
                seconds = []
                for item in questions:
                    started = time.perf_counter()
                    ranking = kb.rank(item["question"], mode, depth)
                    seconds.append(time.perf_counter() - started)
                    found = kb.sources(ranking.ids)
                    r2 += recall_at(found, item["gold"], 2)
                    r5 += recall_at(found, item["gold"], 5)
                n = max(len(questions), 1)
                report["modes"][mode] = {
                    "recall@2": round(r2 / n, 4),
                    "recall@5": round(r5 / n, 4),
                    "ms_per_query": round(1000 * sum(seconds) / n, 2),
                    "ms_p50": round(1000 * float(np.median(seconds)), 2) if seconds else 0.0,
                }
    return report


def _score_whole(kb: Any, embedder: Embedder, corpora: Sequence[Path],
                 questions: list[dict[str, Any]]) -> dict[str, Any]:
    """The baseline of exact cosine search over whole passages, each embedded in one piece."""
    from psirag_kb.ingest.corpora import read_records

    rows = [row for corpus in corpora for row in read_records(corpus, Path(corpus).read_bytes())]
    sources = np.array([row.source for row in rows])
    vectors = np.asarray(embedder.embed([row.text for row in rows]), dtype=np.float32)
    r2 = r5 = 0.0
    started = time.perf_counter()
    for item in questions:
        scores = vectors @ kb.embed_query(item["question"])
        top = np.argsort(-scores, kind="stable")[:5]
        found = sources[top].tolist()
        r2 += recall_at(found, item["gold"], 2)
        r5 += recall_at(found, item["gold"], 5)
    n = max(len(questions), 1)
    return {"recall@2": round(r2 / n, 4), "recall@5": round(r5 / n, 4),
            "ms_per_query": round(1000 * (time.perf_counter() - started) / n, 2)}


def _score_agent(kb: Any, questions: list[dict[str, Any]]) -> dict[str, Any]:
    """The LLM agent on every question: EM and F1 of its answers, recall of its citations."""
    em = f1 = r2 = r5 = 0.0
    statuses: Counter[str] = Counter()
    started = time.perf_counter()
    for item in questions:
        result = kb.answer(item["question"])
        statuses[result["status"]] += 1
        answer = result.get("answer") or ""
        if item["answers"] and result["status"] == "answered":
            em += exact_match(answer, item["answers"])
            f1 += f1_score(answer, item["answers"])
        found = [c["source"] for c in result.get("citations", [])]
        r2 += recall_at(found, item["gold"], 2)
        r5 += recall_at(found, item["gold"], 5)
    n = max(len(questions), 1)
    return {
        "em": round(em / n, 4), "f1": round(f1 / n, 4),
        "recall@2": round(r2 / n, 4), "recall@5": round(r5 / n, 4),
        "ms_per_query": round(1000 * (time.perf_counter() - started) / n, 2),
        "statuses": dict(statuses),
    }

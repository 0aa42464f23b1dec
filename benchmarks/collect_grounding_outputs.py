"""Record every abstract and answer a real model writes, with its source text, for labelling.

Runs benchmarks/grounding_small_model.py (same server, same arguments) with the grounding checks
wrapped so that each checked output is written to `--out` as one JSON line: abstracts as
`{kind: "abstract", sources, output, verdict}`, answers as `{kind: "answer", question, answer,
passages, verdict}`. The lines are unlabelled: a person reads them and adds `good` (see
tests/fixtures/grounding/README.md). `--questions` adds questions (one a line) to the sample's;
`--answers-only` leaves the abstracts offline (a quicker run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grounding_small_model as bench  # noqa: E402

from psirag_kb.abstracts import writers  # noqa: E402
from psirag_kb.answer import (
    agent,  # noqa: E402
    summary,  # noqa: E402
)
from psirag_kb.kb import KnowledgeBase  # noqa: E402


def _recorder(out: Any) -> None:
    """Wrap the checks where they are called so that each call is written to `out`."""
    check_abstract, check_answer = writers.check_abstract, agent.check_answer

    def abstract(text: str, sources: Any, example: Any = ()) -> Any:
        verdict = check_abstract(text, sources, example)
        out.write(json.dumps({"kind": "abstract", "sources": list(sources), "output": text,
                              "verdict": verdict.reason or "ok"}) + "\n")
        out.flush()
        return verdict

    def answer(text: str, question: str, passages: Any, example: Any = ()) -> Any:
        verdict = check_answer(text, question, passages, example)
        out.write(json.dumps({"kind": "answer", "question": question, "answer": text,
                              "passages": list(passages), "verdict": verdict.reason or "ok"})
                  + "\n")
        out.flush()
        return verdict

    writers.check_abstract = abstract
    summary.check_abstract = abstract
    agent.check_answer = answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--questions", type=Path)
    parser.add_argument("--answers-only", action="store_true",
                        help="keep the offline abstracts: only the answers ask the model")
    args, rest = parser.parse_known_args()
    if args.answers_only:
        regenerate = KnowledgeBase.regenerate_abstracts
        KnowledgeBase.regenerate_abstracts = (  # type: ignore[method-assign]
            lambda kb, *a, **k: regenerate(kb, *a, **(k | {"offline": True})))
    if args.questions:
        bench.QUESTIONS.extend(q.strip() for q in args.questions.read_text().splitlines()
                               if q.strip())
    with args.out.open("a", encoding="utf-8") as out:
        _recorder(out)
        sys.argv = [sys.argv[0], *rest]
        bench.main()


if __name__ == "__main__":
    main()

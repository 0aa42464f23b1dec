"""Follow-up questions with and without the conversation, side by side in one run.

    python benchmarks/conversations.py ROOT... [--data ...conversations.jsonl] [--data-dir D]

Indexes the ROOT folders (unchanged files are skipped when --data-dir is reused), then plays
every conversation of the dev set (benchmarks/data/conversations.jsonl): each turn is asked in
a stored conversation (`KnowledgeBase.ask`, the follow-up resolved against the earlier turns)
and, beside it, searched alone (`KnowledgeBase.query`). For the later turns it reports top-1
file and file recall@5, split into follow-ups (ambiguous alone) and standalone questions (the
controls, which must not get worse). Files in the dev set are named relative to whichever ROOT
holds them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from psirag_kb.config import Config  # noqa: E402
from psirag_kb.kb import KnowledgeBase  # noqa: E402

DEV_SET = Path(__file__).parent / "data" / "conversations.jsonl"
K = 5


def relative(path: str, roots: list[Path]) -> str:
    """A result's file relative to the root that holds it (the path itself otherwise)."""
    for root in roots:
        prefix = str(root) + os.sep
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def scored(result: dict[str, Any], wanted: list[str], roots: list[Path]) -> tuple[int, int]:
    """(top-1 file right, a right file in the top K) for one result."""
    files = [relative(r.get("path") or r.get("source") or "", roots)
             for r in result.get("results", [])[:K]]
    return int(bool(files) and files[0] in wanted), int(any(f in wanted for f in files))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path, help="folders the dev set's files are in")
    parser.add_argument("--data", type=Path, default=DEV_SET, help="the dev set (JSONL)")
    parser.add_argument("--data-dir", type=Path, help="data directory (default: a new one)")
    parser.add_argument("--mode", default=None, help="retrieval mode (default: the config's)")
    parser.add_argument("--show", action="store_true", help="print every later turn")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    roots = [r.resolve() for r in args.roots]
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="conversations-bench-"))
    conversations = [json.loads(line) for line in args.data.read_text().splitlines()
                     if line.strip()]
    config = Config().with_data_dir(data_dir)
    totals: dict[str, Counter[str]] = {"followup": Counter(), "standalone": Counter(),
                                       "first": Counter()}
    methods: Counter[str] = Counter()
    started = time.perf_counter()
    with KnowledgeBase(config) as kb:
        report = kb.ingest(roots)
        ingest_s = time.perf_counter() - started
        for talk in conversations:
            conversation = kb.new_conversation(talk["id"])["id"]
            for number, turn in enumerate(talk["turns"]):
                kind = turn.get("kind", "first") if number else "first"
                asked = kb.ask(turn["q"], conversation=conversation, mode=args.mode, k=K)
                alone = kb.query(turn["q"], mode=args.mode, k=K)
                with_top1, with_recall = scored(asked, turn["files"], roots)
                alone_top1, alone_recall = scored(alone, turn["files"], roots)
                totals[kind].update(n=1, alone_top1=alone_top1, alone_recall=alone_recall,
                                    with_top1=with_top1, with_recall=with_recall)
                if number:
                    methods[f"{kind}:{asked['rewrite']}"] += 1
                if args.show and number:
                    top = (relative(asked["results"][0]["path"] or "", roots)
                           if asked["results"] else "-")
                    print(f"{kind:10} {alone_top1}->{with_top1} {turn['q']!r} -> "
                          f"{asked['searched']!r} [{asked['rewrite']}] top: {top}")
        chunks = kb.status()["chunks"]
    figures = {kind: {key: count[key] for key in ("n", "alone_top1", "with_top1",
                                                  "alone_recall", "with_recall")}
               for kind, count in totals.items()}
    if args.json:
        print(json.dumps({"figures": figures, "rewrites": dict(methods), "chunks": chunks,
                          "files": report.as_dict().get("indexed")}, indent=1))
        return
    print(f"dev set: {len(conversations)} conversations, {chunks} chunks "
          f"(ingest {ingest_s:.0f} s), k={K}, mode {args.mode or config.retrieval.default_mode}")
    print(f"machine: {platform.machine()} {os.cpu_count()} cores; load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| turns | n | top-1 file alone | top-1 file with history | recall@5 alone | "
          "recall@5 with history |")
    print("|---|---|---|---|---|---|")
    for kind in ("followup", "standalone", "first"):
        count = totals[kind]
        n = max(count["n"], 1)
        print(f"| {kind} | {count['n']} | {100 * count['alone_top1'] / n:.0f}% | "
              f"{100 * count['with_top1'] / n:.0f}% | {100 * count['alone_recall'] / n:.0f}% | "
              f"{100 * count['with_recall'] / n:.0f}% |")
    print("rewrites:", ", ".join(f"{k} {v}" for k, v in sorted(methods.items())))


if __name__ == "__main__":
    main()

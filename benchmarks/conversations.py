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
import statistics
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


def timed_parts(kb: KnowledgeBase, turns: int) -> dict[str, float]:
    """Median milliseconds of reading a conversation's last turns (with the headers of their
    passages), resolving a follow-up, and recording a turn, over `turns` turns."""
    from psirag_kb.access import OWNER
    from psirag_kb.storage.conversations import StoredTurn

    conversation = kb.new_conversation("parts")["id"]
    kb.ask("What is Helgrind?", conversation=conversation, k=K)
    ids = tuple(int(r["chunk_id"]) for r in kb.query("Helgrind", k=K)["results"])
    times: dict[str, list[float]] = {"read the last turns": [], "resolve": [],
                                     "record a turn": []}
    for _ in range(turns):
        clock = time.perf_counter()
        history = kb._turns_of(conversation, OWNER)
        times["read the last turns"].append(time.perf_counter() - clock)
        clock = time.perf_counter()
        kb.rewrite(history, "What are its options?")
        times["resolve"].append(time.perf_counter() - clock)
        turn = StoredTurn("What are its options?", "Helgrind options", "offline", "auto",
                          None, "found", ids)
        clock = time.perf_counter()
        kb.stores.writer.call(lambda turn=turn: kb.talks.add_turn(conversation, OWNER.name, turn))
        times["record a turn"].append(time.perf_counter() - clock)
    kb.delete_conversation(conversation)
    return {name: 1000 * statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path, help="folders the dev set's files are in")
    parser.add_argument("--data", type=Path, default=DEV_SET, help="the dev set (JSONL)")
    parser.add_argument("--data-dir", type=Path, help="data directory (default: a new one)")
    parser.add_argument("--mode", default=None, help="retrieval mode (default: the config's)")
    parser.add_argument("--show", action="store_true", help="print every later turn")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--parts", type=int, default=20, metavar="N",
                        help="then time a conversation's own parts over N more turns")
    args = parser.parse_args()
    roots = [r.resolve() for r in args.roots]
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="conversations-bench-"))
    conversations = [json.loads(line) for line in args.data.read_text().splitlines()
                     if line.strip()]
    config = Config().with_data_dir(data_dir)
    totals: dict[str, Counter[str]] = {"followup": Counter(), "standalone": Counter(),
                                       "first": Counter()}
    methods: Counter[str] = Counter()
    seconds: dict[str, list[float]] = {"ask": [], "query": []}
    """Seconds of each `ask` (resolve, search, record the turn) and each `query` alone."""
    started = time.perf_counter()
    with KnowledgeBase(config) as kb:
        report = kb.ingest(roots)
        ingest_s = time.perf_counter() - started
        for talk in conversations:
            conversation = kb.new_conversation(talk["id"])["id"]
            for number, turn in enumerate(talk["turns"]):
                kind = turn.get("kind", "first") if number else "first"
                # the two in turns first, so neither always meets warm caches
                calls = [("ask", lambda q=turn["q"], c=conversation: kb.ask(q, conversation=c,
                                                           mode=args.mode, k=K)),
                         ("query", lambda q=turn["q"]: kb.query(q, mode=args.mode, k=K))]
                found = {}
                for name, call in calls[::1 if number % 2 == 0 else -1]:
                    clock = time.perf_counter()
                    found[name] = call()
                    seconds[name].append(time.perf_counter() - clock)
                asked, alone = found["ask"], found["query"]
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
        parts = timed_parts(kb, args.parts) if args.parts else {}
    figures = {kind: {key: count[key] for key in ("n", "alone_top1", "with_top1",
                                                  "alone_recall", "with_recall")}
               for kind, count in totals.items()}
    if args.json:
        print(json.dumps({"figures": figures, "rewrites": dict(methods), "chunks": chunks,
                          "seconds": seconds, "parts_ms": parts,
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
    ask, alone = (1000 * statistics.median(seconds[n]) for n in ("ask", "query"))
    if parts:
        print(f"median ms over {args.parts} turns of one conversation: " + ", ".join(
            f"{name} {ms:.2f}" for name, ms in parts.items()))
    print(f"median ms per turn ({len(seconds['ask'])} turns; the rewritten follow-ups search "
          f"other words): ask {ask:.0f} (resolve, search, store the turn), query alone "
          f"{alone:.0f}")


if __name__ == "__main__":
    main()

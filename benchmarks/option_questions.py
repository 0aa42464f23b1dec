"""Questions that name a program's option: does the release note that introduced it come back?
Before (another checkout) and after (this one), side by side in one run, on one data directory.

    python benchmarks/option_questions.py --before-code ../main --data DATA \\
        --notes /usr/share/doc/git/RelNotes --modes hybrid,auto

DATA is a data directory that has indexed the notes (`psirag-kb --data-dir DATA ingest ...`);
both checkouts open it in turn, in a worker process each (the change measured does not alter
what is stored). Questions come from the notes by one rule, none picked by hand: each place a
note says `"git CMD" ... learned ... "--OPTION"` (whitespace folded) gives "Which release of git
taught git CMD --OPTION?", whose answer is that note (the first note, by name, for an option
named twice); `--limit` of them spread evenly over the list. A question counts as found at k
when its note is among the first k results (merged as a user gets them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TAUGHT = re.compile(r'"git ([a-z][a-z-]*)"[^"]{0,60}?\blearned\b[^"]{0,40}?"(--[a-z][a-z-]+)')


def questions(notes: Path, limit: int) -> list[dict[str, str]]:
    """One question per (command, option) the notes say was learned, spread over the list."""
    found: dict[tuple[str, str], str] = {}
    for path in sorted(notes.glob("*.txt")):
        text = " ".join(path.read_text(errors="replace").split())
        for match in TAUGHT.finditer(text):
            found.setdefault((match.group(1), match.group(2)), str(path))
    items = [{"question": f"Which release of git taught git {cmd} {option}?", "gold": gold}
             for (cmd, option), gold in found.items()]
    step = max(1, len(items) // limit) if limit else 1
    return items[::step][:limit] if limit else items


def worker(data: Path, asked: Path, modes: list[str], k: int) -> None:
    """Print each question's result paths per mode (run with a checkout on the import path)."""
    from psirag_kb.config import Config
    from psirag_kb.ingest.embedding import make_embedder
    from psirag_kb.kb import KnowledgeBase

    base = Config()
    with KnowledgeBase(base.with_data_dir(data),
                       embedder=make_embedder(base.embedding, base.storage.cache_dir)) as kb:
        for line in asked.read_text().splitlines():
            item = json.loads(line)
            row: dict[str, Any] = {}
            for mode in modes:
                started = time.perf_counter()
                results = kb.query(item["question"], mode=mode, k=k)["results"]
                row[mode] = {"sources": [r["source"] for r in results],
                             "seconds": time.perf_counter() - started}
            print(json.dumps(row), flush=True)


def run(code: Path, data: Path, asked: Path, modes: list[str], k: int) -> list[dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=str(code))
    out = subprocess.run([sys.executable, __file__, "--worker", "--data", str(data), "--asked",
                          str(asked), "--modes", ",".join(modes), "--k", str(k)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-code", type=Path, required=False)
    parser.add_argument("--after-code", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--notes", type=Path)
    parser.add_argument("--modes", default="hybrid,auto")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--asked", type=Path)
    args = parser.parse_args()
    modes = args.modes.split(",")
    if args.worker:
        worker(args.data, args.asked, modes, args.k)
        return
    items = questions(args.notes, args.limit)
    asked = args.data.parent / f"{args.data.name}-option-questions.jsonl"
    asked.write_text("".join(json.dumps(item) + "\n" for item in items))
    checkouts = [("after", args.after_code)]
    if args.before_code:
        checkouts.insert(0, ("before", args.before_code))
    table: dict[str, dict[str, Any]] = {}
    for name, code in checkouts:
        rows = run(code.resolve(), args.data, asked, modes, args.k)
        for mode in modes:
            ranks = [next((i + 1 for i, s in enumerate(row[mode]["sources"]) if s == item["gold"]),
                          None) for item, row in zip(items, rows, strict=True)]
            table[f"{name} {mode}"] = {
                "first": sum(r == 1 for r in ranks) / len(items),
                f"in top {args.k}": sum(r is not None for r in ranks) / len(items),
                "p50 ms": 1000 * statistics.median(row[mode]["seconds"] for row in rows)}
    print(f"\n{len(items)} questions, k {args.k}\n")
    print("| checkout, mode | note first | note in top k | p50 ms |\n|---|---|---|---|")
    for key, row in table.items():
        values = list(row.values())
        print(f"| {key} | {values[0]:.3f} | {values[1]:.3f} | {values[2]:.0f} |")


if __name__ == "__main__":
    main()

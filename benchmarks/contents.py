"""Known sections of real manuals: does a question naming a section find the section's text
above its line in a table of contents, and how many of the top 5 repeat one passage from another
copy of the manual (the same manual as HTML and as PDF)? Before (another checkout, e.g. main)
and after (this one), side by side in one run.

    python benchmarks/contents.py --before-code ../main --work WORK \\
        --docs /usr/share/doc/git /usr/share/doc/valgrind /usr/share/doc/bzip2 \\
        --manuals /usr/share/doc/valgrind/html /usr/share/doc/bzip2/manual.html

The `--docs` folders are indexed once by the before checkout (`WORK/before`, reused by a later
run); `WORK/after` is a copy of it opened by this checkout (its migrations run on the copy, so
both search the same chunks, vectors and tree). Questions come from the HTML manuals by one
rule, none picked by hand: every numbered heading of two or more levels ("7.6. Helgrind
Command-line Options") that an HTML page shows at least twice (in the page's contents list and
as the heading) is a section; its text runs to the next such heading. The question is "What
does the section on TITLE in CHAPTER say?" (CHAPTER: the page's one-level heading), `--limit`
of them spread evenly over the list. Each question is asked of both checkouts in one worker
process each (in-process KnowledgeBase, `--mode`, k results merged as a user gets them):

- section rank: the first result sharing at least 30 % of its word 8-grams with the section's
  text (either copy of the manual); contents rank: the first result holding the section's
  heading as a contents line (with a dot leader and page number, or among other numbered
  headings); "section first" counts questions whose section is found above its contents line
  (or found with no contents line);
- files in the top 5, and repeats: results in the top 5 sharing at least 30 % of their word
  8-grams with a better result from another file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HEADING = re.compile(r"(?m)^(\d+(?:\.\d+)+)\.?\s+(\S.{2,100})$")
CHAPTER = re.compile(r"(?m)^(\d+)\.\s+(\S.{2,100})$")
NUMBERED = re.compile(r"^\s*(?:\d+\.)+\d*\.?\s+\S")
LEADER = re.compile(r"\.{3,}\s*\d+\s*$")
WORD = re.compile(r"[^\W_]+")
SHARED = 0.3


def grams(text: str, n: int = 8) -> set[tuple[str, ...]]:
    """The text's runs of n words (lower case, punctuation ignored)."""
    words = WORD.findall(text.lower())
    return {tuple(words[i:i + n]) for i in range(max(0, len(words) - n + 1))}


def shared(one: set, other: set) -> bool:
    """Whether two texts share at least SHARED of the smaller one's runs."""
    return bool(one and other) and len(one & other) >= SHARED * min(len(one), len(other))


def sections(manuals: list[Path]) -> list[dict[str, Any]]:
    """The sections of the HTML manuals, by the module's rule."""
    from psirag_kb.ingest.documents import read_document

    found: list[dict[str, Any]] = []
    pages = sorted(p for m in manuals for p in ([m] if m.is_file() else m.rglob("*.html")))
    for page in pages:
        text = read_document(page).text
        heads = [(m.start(), m.end(), m.group(1), " ".join(m.group(2).split()))
                 for m in HEADING.finditer(text)]
        seen = Counter((number, title) for _, _, number, title in heads)
        last = {(number, title): (start, end) for start, end, number, title in heads
                if seen[(number, title)] > 1}
        order = sorted(last.items(), key=lambda kv: kv[1][0])
        chapters = {m.group(1): " ".join(m.group(2).split()) for m in CHAPTER.finditer(text)}
        for index, ((number, title), (_, end)) in enumerate(order):
            stop = order[index + 1][1][0] if index + 1 < len(order) else len(text)
            body = text[end:stop]
            chapter = chapters.get(number.split(".")[0], page.stem)
            if len(WORD.findall(body)) >= 20:
                found.append({"page": str(page), "number": number, "title": title,
                              "chapter": chapter, "text": body,
                              "question": f"What does the section on {title} in {chapter} say?"})
    return found


def spread(items: list[Any], limit: int) -> list[Any]:
    """At most `limit` items taken evenly over the list."""
    if len(items) <= limit:
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def is_contents_line(text: str, number: str, title: str) -> bool:
    """Whether a result holds the section's heading as a line of a contents list."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    wanted = title.lower()[:40]
    for i, line in enumerate(lines):
        if not (line.startswith(number) and wanted in line.lower()):
            continue
        if LEADER.search(line):
            return True
        near = [lines[j] for j in (i - 1, i + 1) if 0 <= j < len(lines)]
        if sum(bool(NUMBERED.match(other)) for other in near) >= 1 and len(line) < 120:
            return True
    return False


def worker(data: Path, questions: Path, mode: str, k: int) -> None:
    """Ask every question of the knowledge base in `data`; one JSON line per question."""
    from psirag_kb.config import Config
    from psirag_kb.kb import KnowledgeBase

    asked = [json.loads(line) for line in questions.read_text().splitlines()]
    with KnowledgeBase(Config().with_data_dir(data)) as kb:
        for item in asked:
            started = time.perf_counter()
            result = kb.query(item["question"], mode=mode, k=k)
            took = time.perf_counter() - started
            rows = [{"path": r["path"], "text": r["text"], "also_in": r.get("also_in", [])}
                    for r in result["results"]]
            print(json.dumps({"question": item["question"], "seconds": took, "rows": rows}),
                  flush=True)


def measure(item: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One question's figures from its result rows."""
    section = grams(item["text"])
    section_rank = next((rank for rank, row in enumerate(rows, 1)
                         if shared(grams(row["text"]), section)), None)
    contents_rank = next((rank for rank, row in enumerate(rows, 1)
                          if is_contents_line(row["text"], item["number"], item["title"])), None)
    top = rows[:5]
    runs = [grams(row["text"]) for row in top]
    repeats = sum(any(top[j]["path"] != top[i]["path"] and shared(runs[i], runs[j])
                      for j in range(i)) for i in range(len(top)))
    return {"section": section_rank, "contents": contents_rank,
            "first": section_rank is not None and (contents_rank is None
                                                   or section_rank < contents_rank),
            "files": len({row["path"] for row in top}), "repeats": repeats,
            "named": sum(len(row["also_in"]) for row in top)}


def summary(figures: list[dict[str, Any]], seconds: list[float]) -> dict[str, Any]:
    """The figures of one checkout over every question."""
    n = len(figures)
    found = [f["section"] for f in figures if f["section"] is not None]
    listed = [f for f in figures if f["contents"] is not None and f["contents"] <= 5]
    return {
        "questions": n,
        "section first (above its contents line)": sum(f["first"] for f in figures) / n,
        "section at rank 1": sum(f["section"] == 1 for f in figures) / n,
        "section in top 5": sum(f["section"] is not None and f["section"] <= 5
                                for f in figures) / n,
        "mean section rank (found)": statistics.mean(found) if found else None,
        "contents line in top 5": len(listed) / n,
        "contents line above section": sum(f["contents"] is not None and not f["first"]
                                           and f["section"] is not None for f in figures) / n,
        "mean files in top 5": statistics.mean(f["files"] for f in figures),
        "repeats in top 5 (total)": sum(f["repeats"] for f in figures),
        "copies named in also_in (total)": sum(f["named"] for f in figures),
        "p50 seconds": statistics.median(seconds),
    }


def run(code: Path, data: Path, questions: Path, mode: str, k: int) -> list[dict[str, Any]]:
    """The worker's answers, run with `code` first on the import path."""
    env = dict(os.environ, PYTHONPATH=str(code))
    out = subprocess.run([sys.executable, __file__, "--worker", "--data", str(data),
                          "--questions", str(questions), "--mode", mode, "--k", str(k)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def prepare(before_code: Path, work: Path, docs: list[Path]) -> tuple[Path, Path]:
    """The before data directory (indexed once by the before checkout) and its copy."""
    before, after = work / "before", work / "after"
    if not (before / "kb.duckdb").exists():
        env = dict(os.environ, PYTHONPATH=str(before_code))
        subprocess.run([sys.executable, "-m", "psirag_kb", "--data-dir", str(before), "ingest",
                        "--no-abstracts", *map(str, docs)], env=env, check=True)
    if not (after / "kb.duckdb").exists():
        shutil.copytree(before, after)
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-code", type=Path)
    parser.add_argument("--after-code", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--work", type=Path)
    parser.add_argument("--docs", type=Path, nargs="*", default=[])
    parser.add_argument("--manuals", type=Path, nargs="*", default=[])
    parser.add_argument("--limit", type=int, default=60)
    parser.add_argument("--mode", default="auto")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--data", type=Path)
    parser.add_argument("--questions", type=Path)
    args = parser.parse_args()
    if args.worker:
        worker(args.data, args.questions, args.mode, args.k)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    before, after = prepare(args.before_code.resolve(), args.work, args.docs)
    items = spread(sections(args.manuals), args.limit)
    questions = args.work / "questions.jsonl"
    questions.write_text("".join(json.dumps(item) + "\n" for item in items))
    table = {}
    for name, code, data in (("before", args.before_code, before),
                             ("after", args.after_code, after)):
        answers = run(code.resolve(), data, questions, args.mode, args.k)
        figures = [measure(item, a["rows"]) for item, a in zip(items, answers, strict=True)]
        for item, figure in zip(items, figures, strict=True):
            print(json.dumps({"checkout": name, "question": item["question"]} | figure))
        table[name] = summary(figures, [a["seconds"] for a in answers])
    print(f"\n{len(items)} questions, mode {args.mode}, k {args.k}\n")
    print("| figure | before | after |\n|---|---|---|")
    for key in table["before"]:
        cells = [table[n][key] for n in ("before", "after")]
        shown = [f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells]
        print(f"| {key} | {shown[0]} | {shown[1]} |")


if __name__ == "__main__":
    main()

"""Chunk headers and merged results on real files built from the dev sets.

    .venv/bin/python benchmarks/chunk_context.py $D/musique_train100 $D/hotpotqa_train100 \
        $D/2wiki_corpus $D/popqa_dev500 --work /tmp/chunk-context --layout article

Each set folder holds corpus.jsonl ({id, title, text}) and questions.jsonl ({question,
supporting_ids}). Their passages become Markdown files in `--work`:

- `article`: one file per title, "# Title" then each passage of that title on a line of its own
  (a passage's second chunk no longer says the title);
- `sections`: files of `--per-file` passages (shuffled, seed 0), each under "## Title", named
  after the set and a number (the file has no title of its own).

The folder is indexed twice with the real model, `[ingest] chunk_context` on and off (each in
its data directory under `--work`: a second run reuses them), and every set's questions are
asked against all the files (the other sets are distractors) in each mode, with
`[retrieval] merge_adjacent` off and on. A gold passage is found when one of the k results'
line ranges in its file covers the passage's line. Prints JSON: recall@k per set, mode, header
and merge setting, the mean characters of result text per question, and a few headers.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase

MODES = ("hybrid", "dense", "sparse", "auto")
_LEADING_MARK = re.compile(r"^(?=[#>*+=|-]|\d+[.)]\s)")
_UNSAFE_NAME = re.compile(r"[^\w.-]+")

Place = tuple[str, int]
"""(file path, line) of a passage."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def paragraph(text: str) -> str:
    """A passage as one Markdown paragraph line (no line breaks, no leading block markup)."""
    return _LEADING_MARK.sub("\\\\", " ".join(text.split()))


def write_articles(name: str, passages: list[dict[str, Any]], out: Path) -> dict[str, Place]:
    """One file per title: "# Title", then a line per passage; the place of each passage."""
    by_title: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for passage in passages:
        by_title[passage["title"]].append(passage)
    places: dict[str, Place] = {}
    for number, (title, group) in enumerate(by_title.items()):
        path = out / name / f"{number:05d}-{_UNSAFE_NAME.sub('_', title)[:60]}.md"
        lines = [f"# {' '.join(title.split())}"]
        for passage in group:
            lines += ["", paragraph(passage["text"])]
            places[passage["id"]] = (str(path), len(lines))
        _write(path, lines)
    return places


def write_sections(name: str, passages: list[dict[str, Any]], out: Path,
                   per_file: int) -> dict[str, Place]:
    """Files of `per_file` shuffled passages, each "## Title" then its line."""
    order = list(passages)
    random.Random(0).shuffle(order)
    places: dict[str, Place] = {}
    for start in range(0, len(order), per_file):
        path = out / name / f"{name}-{start // per_file:04d}.md"
        lines: list[str] = []
        for passage in order[start:start + per_file]:
            lines += [f"## {' '.join(passage['title'].split())}", "", paragraph(passage["text"]),
                      ""]
            places[passage["id"]] = (str(path), len(lines) - 1)
        _write(path, lines)
    return places


def _write(path: Path, lines: list[str]) -> None:
    """Write a file's lines unless it already holds them (a rerun keeps it unchanged)."""
    text = "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def found(results: list[dict[str, Any]], gold: list[Place]) -> float:
    """The share of gold passages whose line lies in one of the results' line ranges."""
    spans = [(r["source"], r["lines"]) for r in results if r.get("lines")]
    hits = sum(any(source == path and first <= line <= last
                   for source, (first, last) in spans) for path, line in gold)
    return hits / len(gold)


def score(kb: KnowledgeBase, questions: list[dict[str, Any]], places: dict[str, Place],
          mode: str, k: int) -> dict[str, float]:
    """Recall@k, mean result characters and ms per question for one mode."""
    recall = chars = 0.0
    started = time.perf_counter()
    for item in questions:
        results = kb.query(item["question"], mode=mode, k=k)["results"]
        recall += found(results, [places[i] for i in item["supporting_ids"]])
        chars += sum(len(r["text"]) for r in results)
    count = max(len(questions), 1)
    return {"recall": round(recall / count, 4), "chars": round(chars / count),
            "ms": round(1000 * (time.perf_counter() - started) / count, 1)}


def headers(kb: KnowledgeBase, count: int) -> list[dict[str, Any]]:
    """A few chunks with a header and more than one heading or a title, as stored."""
    rows = kb.stores.store.db.cursor().execute(
        "SELECT source, ordinal, context, left(text, 80) FROM chunks WHERE context <> '' "
        "ORDER BY hash LIMIT ?", [count]).fetchall()
    return [{"file": Path(s).name, "ordinal": o, "header": c, "text": t} for s, o, c, t in rows]


def runs(args: argparse.Namespace) -> Iterator[tuple[bool, KnowledgeBase]]:
    """A knowledge base over the files for each header setting, indexed (or reused)."""
    folder = args.work / f"files-{args.layout}"
    for context in (True, False):
        config = Config().with_data_dir(args.work / f"data-{args.layout}-{context}")
        config = config.replace("ingest", chunk_context=context)
        with KnowledgeBase(config) as kb:
            started = time.perf_counter()
            report = kb.ingest([folder])
            print(json.dumps({"context": context, "ingest_s": round(time.perf_counter()
                                                                   - started, 1),
                              "chunks": kb.stores.store.chunk_count(),
                              "embedded": report.chunks_embedded}), flush=True)
            yield context, kb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", type=Path, help="folders with corpus.jsonl and "
                        "questions.jsonl")
    parser.add_argument("--work", type=Path, required=True, help="files and data directories")
    parser.add_argument("--layout", choices=("article", "sections"), default="article")
    parser.add_argument("--per-file", type=int, default=8, help="passages a sections file holds")
    parser.add_argument("--modes", nargs="+", default=list(MODES))
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--limit", type=int, help="questions per set (default: all)")
    args = parser.parse_args()
    places: dict[str, Place] = {}
    questions: dict[str, list[dict[str, Any]]] = {}
    out = args.work / f"files-{args.layout}"
    for folder in args.sets:
        passages = read_jsonl(folder / "corpus.jsonl")
        places |= (write_articles(folder.name, passages, out) if args.layout == "article"
                   else write_sections(folder.name, passages, out, args.per_file))
        questions[folder.name] = read_jsonl(folder / "questions.jsonl")[:args.limit]
    table: list[dict[str, Any]] = []
    examples: list[dict[str, Any]] = []
    for context, kb in runs(args):
        if context:
            examples = headers(kb, 6)
        for merge in (False, True):
            kb.config = kb.config.replace("retrieval", merge_adjacent=merge)
            for name, items in questions.items():
                for mode in args.modes:
                    row = {"set": name, "mode": mode, "header": context, "merge": merge,
                           "questions": len(items)} | score(kb, items, places, mode, args.k)
                    print(json.dumps(row), flush=True)
                    table.append(row)
    print(json.dumps({"layout": args.layout, "k": args.k, "results": table,
                      "headers": examples}, indent=1))


if __name__ == "__main__":
    main()

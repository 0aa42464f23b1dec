"""A question set from a release whose gold passages are named by title (2WikiMultihopQA).

    python benchmarks/titled_questions.py --questions 2wikimultihopqa.json \\
        --corpus DATA/2wiki_corpus/corpus.jsonl --first 120 --out SET/questions.jsonl

`--questions` is a JSON array of records with "question", "answer" and "supporting_facts"
([[title, sentence], ...]), as HippoRAG 2 releases 2WikiMultihopQA
(`reproduce/dataset/2wikimultihopqa.json` in OSU-NLP-Group/HippoRAG); `--corpus` the passages
(`{"id", "title", "text"}` a line) the set's questions are asked over. Each of the first
`--first` records becomes one line of the questions format `psirag_kb.evaluation` reads
(`{"id", "question", "answers", "supporting_ids"}`), its supporting titles mapped to the
corpus's ids. A record naming a title the corpus lacks, or a title the corpus holds twice, is
an error: a gold passage must be one passage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def corpus_ids(corpus: Path) -> dict[str, str]:
    """Title -> passage id, for titles the corpus holds once."""
    rows = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line]
    counts = Counter(row["title"] for row in rows)
    return {row["title"]: str(row["id"]) for row in rows if counts[row["title"]] == 1}


def convert(records: list[dict[str, Any]], ids: dict[str, str]) -> list[dict[str, Any]]:
    """Question lines with their supporting titles as corpus ids."""
    out = []
    for number, record in enumerate(records, 1):
        titles = list(dict.fromkeys(fact[0] for fact in record["supporting_facts"]))
        missing = [t for t in titles if t not in ids]
        if missing:
            raise SystemExit(f"record {number} ({record.get('_id')}): no single passage "
                             f"titled {missing!r} in the corpus")
        out.append({"id": record.get("_id", str(number)), "question": record["question"],
                    "answers": [record["answer"]], "type": record.get("type", ""),
                    "supporting_ids": [ids[t] for t in titles]})
    return out


def main() -> None:
    """Read the release, write the questions file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--first", type=int, default=0, help="records kept (0: all)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    records = json.loads(args.questions.read_text(encoding="utf-8"))
    if args.first:
        records = records[:args.first]
    lines = convert(records, corpus_ids(args.corpus))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines),
                        encoding="utf-8")
    print(f"{len(lines)} questions written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""What writing the offline abstracts adds to `psirag-kb ingest`, beside the embedding time.

    .venv/bin/python benchmarks/ingest_abstracts.py --n 10000 100000 \
        --data /work/shared/data/*/corpus.jsonl --work /tmp/psirag-abstracts
    .venv/bin/python benchmarks/ingest_abstracts.py --n 10000 --model PATH ...   # another model

Per N, in `WORK/nN/`: the scale benchmark's generated folder (markdown files of 50 chunks, each a
heading over recombined corpus sentences, see benchmarks/scale.py), ingested by the CLI with the
default config (the bundled MiniLM unless `--model`). The report's stage seconds give the
embedding time and the abstracts' time side by side, from the same run; then 10 new files
(500 chunks) are ingested again to show the cost of an incremental change. Prints a markdown
table and one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scale import Generator, Layout, load_sentences, token_counter, write_docs

from psirag_kb.config import load_config


def ingest(config: Path, docs: Path) -> tuple[dict[str, Any], float]:
    """`psirag-kb ingest --json DOCS`: the report and the wall time."""
    command = [sys.executable, "-m", "psirag_kb", "--config", str(config), "ingest", "--json",
               str(docs)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout), wall


def figures(report: dict[str, Any], wall: float) -> dict[str, Any]:
    """Stage seconds, the abstracts written and the ratio of abstracts to embedding time."""
    seconds = report.get("seconds", {})
    abstracts = report.get("abstracts", {})
    embed = seconds.get("embed", 0.0)
    return {"wall_s": round(wall, 1), "chunks_embedded": report.get("chunks_embedded"),
            "seconds": seconds, "nodes": abstracts.get("regenerated"),
            "ratio": round(seconds.get("abstracts", 0.0) / embed, 3) if embed else None}


def measure(n: int, args: argparse.Namespace, generator: Generator) -> dict[str, Any]:
    """Generate, ingest once, then ingest 10 added files."""
    folder = args.work / f"n{n}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    lines = ["[storage]", 'data_dir = "data"']
    if args.model:
        lines += ["", "[embedding]", f"model = {json.dumps(str(args.model))}"]
    config = folder / "config.toml"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    docs = folder / "docs"
    layout = Layout(n, 50, 20)
    write_docs(generator, layout, docs)
    print(f"N={n}: ingest", file=sys.stderr, flush=True)
    first = figures(*ingest(config, docs))
    extra = Layout(n + 500, 50, 20)
    write_docs(generator, extra, docs, only=range(layout.files, extra.files))
    print(f"N={n}: ingest of 10 new files", file=sys.stderr, flush=True)
    added = figures(*ingest(config, docs))
    return {"n": n, "first": first, "added": added}


def table(results: list[dict[str, Any]]) -> str:
    """A markdown row per N and run."""
    rows = ["| N | run | chunks embedded | embed s | tree s | abstracts s | nodes | "
            "abstracts / embed | wall s |", "|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        for run in ("first", "added"):
            data = result[run]
            seconds = data["seconds"]
            rows.append(
                f"| {result['n']:,} | {run} | {data['chunks_embedded']:,} | "
                f"{seconds.get('embed', 0):.1f} | {seconds.get('tree', 0):.1f} | "
                f"{seconds.get('abstracts', 0):.1f} | {data['nodes']} | {data['ratio']} | "
                f"{data['wall_s']} |")
    return "\n".join(rows)


def main() -> None:
    """Parse arguments, run each N, print the table and the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000])
    parser.add_argument("--data", type=Path, nargs="+", required=True,
                        help="corpus.jsonl files whose sentences fill the generated notes")
    parser.add_argument("--work", type=Path, default=Path("/tmp/psirag-abstracts"))
    parser.add_argument("--model", type=Path, help="[embedding] model (default: bundled MiniLM)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    base = load_config(None)
    if args.model:
        base = base.replace("embedding", model=str(args.model))
    count, _, note = token_counter(base)
    if note:
        print(note, file=sys.stderr)
    generator = Generator(load_sentences(args.data), count, base.ingest.chunk_tokens, args.seed)
    results = [measure(n, args, generator) for n in args.n]
    print(table(results))
    print(json.dumps(results))


if __name__ == "__main__":
    main()

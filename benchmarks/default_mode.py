"""Recall@5 and model passes of the default mode, two checkouts side by side in one run.

    python benchmarks/default_mode.py --before OLD_CHECKOUT --work WORK \\
        --kb multi=DATA/musique_train100,DATA/hotpotqa_train100 \\
        --kb single=DATA/popqa_dev500 \\
        --ask multi:DATA/musique_train100 --ask multi:DATA/hotpotqa_train100 \\
        --ask single:DATA/popqa_dev500 --modes hybrid,auto --json out.json

Each `--kb NAME=SET,...` is indexed once into `WORK/NAME` (each set folder's corpus.jsonl, with
an embedding cache under WORK/cache; a second run reuses both). Then, for each checkout (the
folder holding the older `psirag_kb` given by `--before`, and this one), a fresh process with
that checkout on its PYTHONPATH opens a copy of each store and asks each `--ask NAME:SET`'s
questions in every mode: recall@5 (the share of a question's gold passages among the first 5
distinct sources), the texts sent through the model per question (counted at the query
embedder) and the mean ms per question. `--split N` also reports recall over the first N
questions and over the rest separately (a set tuned on its first part, confirmed on the rest).
Prints one JSON line per (checkout, set, mode) and writes them all to `--json`. With
`--index-each`, each checkout indexes the corpora itself, in its own process (the embedding cache
shared, so the model runs once): for an older release that cannot open a newer release's store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
MARK = "RESULT "


def index(work: Path, name: str, sets: list[str], cache: Path | None = None) -> None:
    """Ingest the sets' corpora into WORK/NAME once (the running checkout's code), vectors
    cached in `cache` (WORK/cache by default)."""
    from psirag_kb.config import Config
    from psirag_kb.ingest.embedding import CachedEmbedder, make_embedder
    from psirag_kb.kb import KnowledgeBase

    base = Config()
    embedder = CachedEmbedder(make_embedder(base.embedding, base.storage.cache_dir),
                              cache or work / "cache")
    with KnowledgeBase(base.with_data_dir(work / name), embedder=embedder) as kb:
        if kb.stores.store.chunk_count() == 0:
            kb.ingest_corpora([Path(s) / "corpus.jsonl" for s in sets])


def worker(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Score every mode on every question set in this process's checkout."""
    from psirag_kb.config import Config
    from psirag_kb.evaluation import load_questions, recall_at
    from psirag_kb.ingest.embedding import make_embedder
    from psirag_kb.kb import KnowledgeBase

    rows = []
    base = Config()
    for store, sets in spec.get("index", {}).items():
        index(Path(store).parent, Path(store).name, sets, Path(spec["cache"]))
    embedder = make_embedder(base.embedding, base.storage.cache_dir)
    for store, folders in spec["asks"].items():
        with KnowledgeBase(base.with_data_dir(Path(store)), embedder=embedder) as kb:
            query_embedder = kb.engine.query_embedder
            embed_many = query_embedder.embed_many
            texts = [0]

            def counting(batch: list[str], embed_many: Any = embed_many,
                         texts: list[int] = texts) -> Any:
                texts[0] += len(batch)
                return embed_many(batch)

            query_embedder.embed_many = counting
            kb.rank("warm up", "hybrid", 5)
            for folder in folders:
                questions = load_questions(Path(folder) / "questions.jsonl")
                for mode in spec["modes"]:
                    cache = getattr(query_embedder, "cache", None)
                    if cache is not None:
                        cache.clear()  # no set's questions helped by another mode's
                    texts[0] = 0
                    per, started = [], time.perf_counter()
                    for item in questions:
                        found = kb.sources(kb.rank(item["question"], mode, 5).ids)
                        per.append(recall_at(found, item["gold"], 5))
                    seconds = time.perf_counter() - started
                    row = {"set": Path(folder).name, "mode": mode, "n": len(per),
                           "recall@5": round(sum(per) / len(per), 4),
                           "model_texts_per_question": round(texts[0] / len(per), 2),
                           "ms_per_question": round(1000 * seconds / len(per), 1)}
                    split = spec.get("split") or 0
                    if 0 < split < len(per):
                        row["recall@5_first"] = round(sum(per[:split]) / split, 4)
                        row["recall@5_rest"] = round(sum(per[split:]) / (len(per) - split), 4)
                    rows.append(row)
    return rows


def main() -> None:
    """Index once, then score each checkout in a fresh process."""
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        print(MARK + json.dumps(worker(json.loads(sys.argv[2]))), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--kb", action="append", required=True, help="NAME=SETDIR,SETDIR,...")
    parser.add_argument("--ask", action="append", default=[], help="NAME:SETDIR")
    parser.add_argument("--before", type=Path, help="folder holding the older psirag_kb")
    parser.add_argument("--modes", default="hybrid,auto")
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--index-each", action="store_true",
                        help="each checkout indexes its own copy of the stores")
    args = parser.parse_args()
    work = args.work.resolve()
    stores, sets_of = {}, {}
    for spec in args.kb:
        name, _, sets = spec.partition("=")
        sets_of[name] = sets.split(",")
        if not args.index_each:
            index(work, name, sets_of[name])
        stores[name] = work / name
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                              "load_before": os.getloadavg(), "results": []}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    states = [("before", args.before), ("after", HERE)] if args.before else [("after", HERE)]
    with tempfile.TemporaryDirectory(prefix="default-mode-") as tmp:
        for label, code in states:
            asks: dict[str, list[str]] = {}
            fresh: dict[str, list[str]] = {}
            for ask in args.ask:
                name, _, folder = ask.partition(":")
                copy = Path(tmp) / label / name  # an older release may migrate its copy
                if args.index_each:
                    fresh[str(copy)] = sets_of[name]
                elif not copy.exists():
                    shutil.copytree(stores[name], copy)
                asks.setdefault(str(copy), []).append(folder)
            spec = {"asks": asks, "modes": args.modes.split(","), "split": args.split,
                    "index": fresh, "cache": str(work / "cache")}
            done = subprocess.run([sys.executable, __file__, "worker", json.dumps(spec)],
                                  env={**env, "PYTHONPATH": str(code)}, capture_output=True,
                                  text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
            if done.returncode or not lines:
                raise SystemExit(f"{label} failed:\n{done.stderr[-3000:]}")
            for row in json.loads(lines[-1][len(MARK):]):
                row = {"code": label, **row}
                report["results"].append(row)
                print(json.dumps(row), flush=True)
    report["load_after"] = os.getloadavg()
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""Embedding options side by side in one run: torch MiniLM, ONNX fp32, ONNX int8 and a
static model distilled from MiniLM. For each: load time, passages/s on real passages (batch size
from the config) and recall of `psirag-kb eval` on the given corpora and questions.

    D=/work/shared/data
    python benchmarks/embedders.py --work /tmp/embedders \\
        --corpus $D/musique_train100/corpus.jsonl --corpus $D/hotpotqa_train100/corpus.jsonl \\
        --corpus $D/2wiki_corpus/corpus.jsonl --questions $D/musique_train100/questions.jsonl

Each option builds its own knowledge base in WORK/<option>. Passage vectors of the transformer
options go through the embedding cache in [storage] cache_dir (keyed per backend), so a second
run skips their embedding; the throughput is always measured on the bare model. Without
--static a static model is distilled into WORK/minilm-static first (timed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from psirag_kb.config import Config, load_config
from psirag_kb.evaluation import evaluate
from psirag_kb.ingest.corpora import read_records
from psirag_kb.ingest.embedding import CachedEmbedder, Embedder, make_embedder
from psirag_kb.kb import KnowledgeBase

OPTIONS = ("torch", "onnx", "onnx-int8", "static")


def passages(corpora: list[Path], count: int) -> list[str]:
    """`count` passages spread evenly over the corpora's records, as ingest builds them."""
    texts = [row.text for corpus in corpora for row in read_records(corpus, corpus.read_bytes())]
    picks = np.linspace(0, len(texts) - 1, num=min(count, len(texts))).astype(int)
    return [texts[i] for i in picks]


def option_config(option: str, base: Config, static: Path | None) -> Config:
    """The config of one option."""
    if option == "static":
        assert static is not None
        return base.replace("embedding", model=str(static), backend="torch")
    return base.replace("embedding", backend=option)


def loaded(config: Config) -> tuple[Embedder, float]:
    """The option's bare embedder, loaded (an ONNX export happens here the first time)."""
    embedder = make_embedder(config.embedding, config.storage.cache_dir)
    started = time.perf_counter()
    embedder.embed(["warm-up"])
    return embedder, time.perf_counter() - started


def throughput(embedders: dict[str, Embedder], texts: list[str], rounds: int) -> dict[str, float]:
    """Passages per second of each embedder over `texts`, the best of `rounds` taken in turns
    (so a busy moment on the machine does not fall on one option only)."""
    best = dict.fromkeys(embedders, 0.0)
    for _ in range(rounds):
        for option, embedder in embedders.items():
            embedder.embed(texts[:32])
            started = time.perf_counter()
            embedder.embed(texts)
            best[option] = max(best[option], len(texts) / (time.perf_counter() - started))
    return best


def recall(option: str, config: Config, embedder: Embedder,
           args: argparse.Namespace) -> dict[str, Any]:
    """`psirag-kb eval` of one option in its own data directory."""
    cache_dir = config.storage.cache_dir
    row: dict[str, Any] = {}
    data_dir = args.work / option
    shutil.rmtree(data_dir, ignore_errors=True)
    # The static model embeds in seconds and may be re-distilled into the same path: no cache.
    cached = embedder if option == "static" else CachedEmbedder(embedder, cache_dir)
    report = evaluate(config, args.corpus, args.questions, args.modes.split(","), k=5,
                      data_dir=data_dir, embedder=cached, open_kb=KnowledgeBase)
    row["eval_passages"] = report["passages"]
    row["eval_embed_s"] = report["timings"]["embed_s"]
    row["modes"] = report["modes"]
    return row


def table(rows: list[dict[str, Any]], modes: list[str]) -> str:
    """The rows as a markdown table."""
    timed = "hybrid" if "hybrid" in modes else modes[-1]
    head = ["option", "dim", "load s", "passages/s"]
    head += [f"{m} R@5" for m in modes] + [f"{m} R@2" for m in modes] + [f"{timed} ms/q"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["option"], str(row["dim"]), f"{row['load_s']:.1f}",
                 f"{row['passages_per_s']:,.0f}"]
        cells += [f"{row['modes'][m]['recall@5']:.4f}" for m in modes]
        cells += [f"{row['modes'][m]['recall@2']:.4f}" for m in modes]
        cells.append(f"{row['modes'][timed]['ms_per_query']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True,
                        help="folder for the knowledge bases (one per option)")
    parser.add_argument("--corpus", type=Path, action="append", required=True,
                        help="JSONL corpus (repeatable)")
    parser.add_argument("--questions", type=Path, required=True,
                        help='JSONL of {"question", "supporting_ids"}')
    parser.add_argument("--config", type=Path, help="config file (default: built-in defaults)")
    parser.add_argument("--static", type=Path,
                        help="a static model folder (default: distil one into WORK)")
    parser.add_argument("--options", default=",".join(OPTIONS), help="comma-separated")
    parser.add_argument("--modes", default="dense,hybrid", help="eval modes, comma-separated")
    parser.add_argument("--passages", type=int, default=2000,
                        help="passages for the throughput measurement")
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds (best kept)")
    args = parser.parse_args()
    args.work = args.work.absolute()
    args.work.mkdir(parents=True, exist_ok=True)
    base = load_config(args.config) if args.config else Config()
    options = args.options.split(",")
    summary: dict[str, Any] = {"load_before": os.getloadavg()[0], "cpus": os.cpu_count(),
                               "batch_size": base.embedding.batch_size}
    static = args.static
    if "static" in options and static is None:
        from psirag_kb.ingest.distill import distill_static

        static = args.work / "minilm-static"
        shutil.rmtree(static, ignore_errors=True)
        made = distill_static(static)
        summary["distill_s"] = made["distill_s"]
    texts = passages(args.corpus, args.passages)
    summary["throughput_passages"] = len(texts)
    configs = {option: option_config(option, base, static) for option in options}
    embedders, rows = {}, {}
    for option, config in configs.items():
        embedders[option], load_s = loaded(config)
        rows[option] = {"option": option, "model": config.embedding.model,
                        "dim": embedders[option].dim, "load_s": round(load_s, 2)}
    for option, rate in throughput(embedders, texts, args.rounds).items():
        rows[option]["passages_per_s"] = round(rate, 1)
    for option, config in configs.items():
        rows[option] |= recall(option, config, embedders[option], args)
        print(json.dumps(rows[option]), flush=True)
    summary["load_after"] = os.getloadavg()[0]
    print(json.dumps(summary))
    print(table(list(rows.values()), args.modes.split(",")))


if __name__ == "__main__":
    main()

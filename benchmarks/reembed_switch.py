"""Reembed at scale: the switch of a large knowledge base and what questions wait during it.

    python benchmarks/reembed_switch.py --data-dir /tmp/h3/n100000/data \
        --model /tmp/i34/models/minilm-static --to /tmp/h3/static128 --clients 4

Opens an existing data directory (a copy: the reembed changes it) embedded with `--model`,
starts C client threads asking `KnowledgeBase.query` (hybrid, k=5) back to back with chunk
texts as questions, and reembeds every chunk with `--to` (a static model from `distill`: fast
enough at this scale). Records each question's start and end, the reembed's phases
(`Reembed.timings`: the new index's build, the switch's writer task, its transaction, the time
questions were held out) and the tree's rebuild after the switch; with `--stop-after N` it
closes the knowledge base once N chunks have their new vector, opens it again and measures
what the resumed reembed redoes. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from psirag_kb.config import Config  # noqa: E402
from psirag_kb.kb import KnowledgeBase  # noqa: E402


class Clients:
    """C threads asking questions until stopped; (start, end, ok) per question."""

    def __init__(self, kb: KnowledgeBase, questions: list[str], count: int) -> None:
        self.kb, self.questions = kb, questions
        self.stop = threading.Event()
        self.records: list[tuple[float, float, bool]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._ask, args=(n,), daemon=True)
                        for n in range(count)]
        for thread in self.threads:
            thread.start()

    def _ask(self, n: int) -> None:
        i = n
        while not self.stop.is_set():
            started = time.perf_counter()
            try:
                ok = bool(self.kb.query(self.questions[i % len(self.questions)], mode="hybrid",
                                        k=5)["results"])
            except Exception:  # noqa: BLE001 - counted as an error
                ok = False
            with self.lock:
                self.records.append((started, time.perf_counter(), ok))
            i += len(self.threads)

    def end(self) -> list[tuple[float, float, bool]]:
        self.stop.set()
        for thread in self.threads:
            thread.join(120)
        return self.records


def latencies(records: list[tuple[float, float, bool]]) -> dict:
    """Count, errors and latency percentiles (ms)."""
    ms = sorted((end - start) * 1000 for start, end, _ in records)
    if not ms:
        return {"requests": 0}
    cut = statistics.quantiles(ms, n=100) if len(ms) > 1 else ms * 99
    return {"requests": len(ms), "errors": sum(not ok for *_, ok in records),
            "p50_ms": round(cut[49], 1), "p95_ms": round(cut[94], 1),
            "max_ms": round(ms[-1], 1)}


def wait_state(kb: KnowledgeBase, states: tuple[str, ...], marks: dict[str, float]) -> str:
    """Poll the reembed until its state is one of `states`, noting when each state began."""
    while True:
        job = kb.reembedding
        state = job.state if job is not None else "running"
        marks.setdefault(state, time.perf_counter())
        if state in states:
            return state
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--model", required=True, help="the model the data directory has")
    parser.add_argument("--to", required=True, help="the model to reembed with")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--stop-after", type=int, default=0,
                        help="close and reopen once this many chunks have their new vector")
    args = parser.parse_args()
    config = Config().with_data_dir(args.data_dir)
    config = config.replace("embedding", model=args.model)
    out: dict = {"clients": args.clients}
    opened = time.perf_counter()
    kb = KnowledgeBase(config)
    out["open_s"] = round(time.perf_counter() - opened, 1)
    out["chunks"] = kb.stores.store.chunk_count()
    rows = kb.stores.store.db.execute("SELECT text FROM chunks USING SAMPLE 200 ROWS").fetchall()
    questions = [" ".join(r[0].split()[:12]) for r in rows]
    marks: dict[str, float] = {}
    begun = time.perf_counter()
    kb.reembed(args.to)
    if args.stop_after:
        while kb.reembedding.done() < args.stop_after:
            time.sleep(0.2)
        closing = time.perf_counter()
        kb.close()
        out["close_s"] = round(time.perf_counter() - closing, 1)
        opened = time.perf_counter()
        kb = KnowledgeBase(config)
        out["reopen_s"] = round(time.perf_counter() - opened, 1)
        begun = time.perf_counter()
        kb.resume_reembed()
    clients = Clients(kb, questions, args.clients)
    embedded_before = kb.reembedding.done()
    state = wait_state(kb, ("done", "failed"), marks)
    switched = time.perf_counter()
    if state == "failed":
        clients.end()
        raise SystemExit(f"reembed failed: {kb.reembedding.error}")
    while kb.stores.tree_state["state"] != "ok":
        time.sleep(0.05)
    tree_ok = time.perf_counter()
    time.sleep(2)
    records = clients.end()
    job = kb.reembedding
    out["reembed"] = {"to": args.to, "seconds": round(switched - begun, 1),
                      "done_when_this_process_began": embedded_before,
                      **job.timings, "kept_abstracts": job.kept}
    switching = marks.get("switching", switched)
    during = [r for r in records if r[1] > switching and r[0] < switched]
    out["queries"] = {
        "before_switch": latencies([r for r in records if r[1] <= switching]),
        "overlapping_switch": latencies(during),
        "tree_missing_after_switch": latencies([r for r in records
                                                if switched <= r[0] and r[1] <= tree_ok]),
        "after_tree": latencies([r for r in records if r[0] >= tree_ok])}
    out["tree_rebuild_s"] = round(tree_ok - switched, 1)
    out["tree_kept_given"] = kb.stores.kept_given
    kb.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

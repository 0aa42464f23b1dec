"""Reembed: throughput of a model change and query latency during it vs idle, in one run.

    python benchmarks/reembed.py --corpus /work/shared/data/hotpotqa_train100/corpus.jsonl \
        --questions /work/shared/data/hotpotqa_train100/questions.jsonl \
        --static /tmp/static-model --clients 20 --idle 20

Builds a knowledge base of the corpus (MiniLM, the bundled model) in a temporary data directory,
starts the real daemon in this process (its HTTP API on a free loopback port), then runs C client
threads sending the questions to POST /api/query (hybrid, k=5) back to back:
1. idle: for `--idle` seconds, nothing else running;
2. reembed to the static model (`psirag-kb distill` makes it; `--static` is its folder), asked
   through POST /api/reembed, the clients going on until the switch;
3. idle again on the static model for `--idle` seconds;
4. reembed back to MiniLM, the clients going on until the switch.
For each phase: requests, errors (any non-200 or an empty result list), latency percentiles; for
each reembed: chunks, seconds from the request to the switch, chunks/s. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from psirag_kb.config import Config  # noqa: E402
from psirag_kb.service.daemon import Daemon  # noqa: E402


def post(url: str, token: str, path: str, body: dict) -> tuple[int, dict]:
    """One JSON POST; (status, body)."""
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except OSError as exc:
        return 0, {"error": str(exc)}


class Load:
    """C client threads querying until stopped, recording each request's outcome."""

    def __init__(self, url: str, token: str, questions: list[str], clients: int) -> None:
        self.url, self.token, self.questions = url, token, questions
        self.stop = threading.Event()
        self.records: list[tuple[float, bool]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._client, args=(n,), daemon=True)
                        for n in range(clients)]

    def _client(self, n: int) -> None:
        i = n
        while not self.stop.is_set():
            text = self.questions[i % len(self.questions)]
            i += len(self.threads)
            started = time.perf_counter()
            code, body = post(self.url, self.token, "/api/query",
                              {"text": text, "mode": "hybrid", "k": 5})
            ok = code == 200 and bool(body.get("results"))
            with self.lock:
                self.records.append((time.perf_counter() - started, ok))

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def take(self) -> list[tuple[float, bool]]:
        """The records since the last take."""
        with self.lock:
            taken, self.records = self.records, []
        return taken

    def end(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def summary(records: list[tuple[float, bool]], seconds: float) -> dict:
    """Requests, errors, throughput and latency percentiles (ms) of one phase."""
    latencies = sorted(r[0] * 1000 for r in records)
    if not latencies:
        return {"requests": 0}
    cut = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    return {"requests": len(records), "errors": sum(not r[1] for r in records),
            "seconds": round(seconds, 1), "queries_per_s": round(len(records) / seconds, 1),
            "p50_ms": round(cut[49], 1), "p95_ms": round(cut[94], 1),
            "p99_ms": round(cut[98], 1), "max_ms": round(latencies[-1], 1)}


def reembed(daemon: Daemon, load: Load, model: str) -> dict:
    """Ask the daemon for a reembed and wait for the switch while the load runs."""
    load.take()
    started = time.perf_counter()
    code, body = post(daemon.api.url, daemon.api.token, "/api/reembed", {"model": model})
    if code != 200:
        raise SystemExit(f"reembed refused: {code} {body}")
    total = body["total"]
    while daemon.kb.embedder.name != body["model"]:
        job = daemon.kb.reembedding
        if job is not None and job.state == "failed":
            raise SystemExit(f"reembed failed: {job.error}")
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    return {"model": Path(model).name, "chunks": total, "seconds": round(seconds, 1),
            "chunks_per_s": round(total / seconds, 1),
            "queries": summary(load.take(), seconds)}


def idle(load: Load, seconds: float) -> dict:
    load.take()
    time.sleep(seconds)
    return summary(load.take(), seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--questions", type=Path)
    parser.add_argument("--static", type=Path, required=True, help="a `distill` model folder")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--idle", type=float, default=20.0)
    args = parser.parse_args()
    if args.questions:
        questions = [json.loads(line)["question"] for line in args.questions.open()]
    else:
        questions = [json.loads(line)["title"] for line in args.corpus.open()]
    with tempfile.TemporaryDirectory() as tmp:
        config = Config().with_data_dir(Path(tmp) / "data").replace("api", port=0)
        os.environ.pop("PSIRAG_KB_TOKEN", None)
        daemon = Daemon(config)
        daemon.start()
        try:
            built = time.perf_counter()
            daemon.kb.ingest_jsonl(args.corpus)
            minilm = daemon.kb.embedder.name
            out: dict = {"chunks": daemon.kb.stores.store.chunk_count(), "clients": args.clients,
                         "ingest_s": round(time.perf_counter() - built, 1),
                         "load_before": os.getloadavg()}
            load = Load(daemon.api.url, daemon.api.token, questions, args.clients)
            load.start()
            out["idle_minilm"] = idle(load, args.idle)
            out["reembed_to_static"] = reembed(daemon, load, str(args.static.absolute()))
            out["idle_static"] = idle(load, args.idle)
            out["reembed_to_minilm"] = reembed(daemon, load, minilm)
            load.end()
            out["load_after"] = os.getloadavg()
        finally:
            daemon.stop()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

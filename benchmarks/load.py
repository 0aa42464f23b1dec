"""Load: concurrent API query clients while the daemon ingests a burst of new files.

    python benchmarks/load.py --corpus /work/shared/data/2wiki_corpus/corpus.jsonl \
        --leaves 10000 --clients 20 --duration 60 --burst 500
    python benchmarks/load.py ... --clients 20 --duration 30 --burst 0    # no burst
    python benchmarks/load.py ... --clients 20 --duration 30 --readers 20  # team server

With `--readers R` the N leaves are written as files, one passage each, into 20 shard
folders of the watched folder (corpus records belong to no folder, so no grant covers them), R
people are made as `psirag-kb users add` makes them (reader i may read 15 of the 20 shard
folders, a different 15 for each),
and the same C clients run twice in one run, without a burst, first all with the owner's single
token, then client n with reader n mod R's token (their grants applied inside every retriever),
repeated `--rounds` times; it prints both figures side by side and their ratio.

Builds a base knowledge base of N corpus leaves (embeddings from the evaluation cache when
present), starts the real daemon as its own process (`psirag-kb daemon`, the bundled MiniLM),
then runs C client threads that send questions (`--questions`, else the corpus titles) to
POST /api/query as hybrid queries (`{"text", "mode": "hybrid", "k": 5}`) back to back for D
seconds; a few seconds in, B new files are written into the watched folder (none with
`--burst 0`, when every burst figure is null). Reports every client request's outcome, latency
percentiles (overall, and from the first burst write until the burst was queryable), the
daemon's resident memory sampled from /proc, and when the burst became queryable.

Queryable means what a user sees: a HYBRID query returned the new file. After the last write one
poller thread checks, in passes 0.25 s apart, that /api/status counts every burst file as
indexed and that a hybrid query (k=10) has returned each of the last 10 files written; the
daemon takes files in the order they were written, so those are the last to become queryable
(one query per file would make the poller slower than the daemon: at ~0.3 s a query under
load, 500 files take 150 s). The query is the file's unique `loadmarkerNNNN` and the first 25
words of its passage (the marker alone, or with the title, is not enough in hybrid mode: the
tree and dense rankings of other passages outvote the single BM25 hit, so 14 of 500 files were
never returned in the top 10). A file is found when its path is a result's `source`;
`queryable_after_last_write_s` runs from the last write until the pass that saw both (so it
can lag by up to one pass). `indexed_after_last_write_s` is when /api/status first counted
every burst file as indexed: DuckDB commits before BM25, hnswlib and the tree view are updated,
so it can be a moment earlier. The poller's requests are not counted in `requests` or the
latencies; the closing spot check asks the same hybrid queries for 20 random burst files and
must find all 20. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from latency import percentile, records, returns, wait_burst  # noqa: E402

from psirag_kb.config import Config  # noqa: E402
from psirag_kb.ingest.embedding import CachedEmbedder, make_embedder  # noqa: E402
from psirag_kb.kb import KnowledgeBase  # noqa: E402

SHARDS = 20
HIDDEN_SHARDS = 5
"""Each reader may not read this many of the corpus shards."""


def post(url: str, body: dict[str, Any], timeout: float = 120.0,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=120) as response:
        return json.loads(response.read())


def rss_mb(pid: int) -> tuple[float, float]:
    """Resident and peak resident memory (MB) of a process, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def authorize(data: Path) -> dict[str, str]:
    """Send the daemon's generated token (api.token; older daemons have none) with every
    urllib request."""
    token_file = data / "api.token"
    if not token_file.exists():
        return {}
    headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    opener = urllib.request.build_opener()
    opener.addheaders = list(headers.items())
    urllib.request.install_opener(opener)
    return headers


class KeptAlive:
    """POST over one persistent HTTP/1.1 connection (reopened when the server closes it)."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = parts.hostname, parts.port, parts.path
        self.headers = {"Content-Type": "application/json", **headers}
        self.connection: http.client.HTTPConnection | None = None

    def post(self, body: dict[str, Any]) -> tuple[int, Any]:
        for attempt in (1, 2):
            if self.connection is None:
                self.connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
            try:
                self.connection.request("POST", self.path, json.dumps(body).encode(),
                                        self.headers)
                response = self.connection.getresponse()
                data = response.read()
            except (http.client.HTTPException, ConnectionError):
                self.connection.close()
                self.connection = None
                if attempt == 2:
                    raise
                continue
            if response.getheader("Connection", "").lower() == "close":
                self.connection.close()
                self.connection = None
            return response.status, json.loads(data) if response.status == 200 else data
        raise AssertionError("unreachable")


def start_daemon(data: Path, docs: Path,
                 config: Path | None = None) -> tuple[subprocess.Popen, str]:
    """`psirag-kb daemon` on the data directory; returns the process and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "psirag_kb", *(["--config", str(config)] if config else []),
         "--data-dir", str(data), "daemon", "--watch", str(docs), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    line = proc.stdout.readline()
    if "serving" not in line:
        raise RuntimeError(f"the daemon did not start: {line!r}")
    return proc, line.split("serving ")[1].split(";")[0]


class Clients:
    """C threads querying back to back; every outcome recorded with its time."""

    def __init__(self, url: str, questions: list[str], clients: int,
                 keep_alive: dict[str, str] | None = None,
                 tokens: list[str] | None = None) -> None:
        self.url = url + "/api/query"
        self.keep_alive = keep_alive
        self.tokens = tokens
        self.questions = questions
        self.results: list[tuple[float, float, int, str]] = []  # start, seconds, status, error
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(clients)]

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        own = ({"Authorization": f"Bearer {self.tokens[seed % len(self.tokens)]}"}
               if self.tokens else None)
        send = (KeptAlive(self.url, own or self.keep_alive).post
                if self.keep_alive is not None
                else lambda body: post(self.url, body, headers=own))
        while not self._stop.is_set():
            text = rng.choice(self.questions)
            started = time.perf_counter()
            error = ""
            try:
                status, body = send({"text": text, "mode": "hybrid", "k": 5})
                if status != 200:
                    error = str(body)[:200]
                elif not isinstance(body, dict) or not body.get("results"):
                    error = "no results"
            except Exception as exc:  # noqa: BLE001 - every failure is counted, not raised
                status, error = 0, f"{type(exc).__name__}: {exc}"
            with self._mutex:
                self.results.append((started, time.perf_counter() - started, status, error))

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def summary(latencies: list[float]) -> dict[str, float]:
    if not latencies:
        return {}
    return {
        "n": len(latencies),
        "p50_s": round(statistics.median(latencies), 3),
        "p95_s": round(percentile(latencies, 0.95), 3),
        "p99_s": round(percentile(latencies, 0.99), 3),
        "max_s": round(max(latencies), 3),
    }


def make_readers(data: Path, shards: list[Path], readers: int) -> list[str]:
    """R readers on the data directory (no daemon yet), reader i missing 5 shard folders from
    i on; returns their tokens."""
    from psirag_kb.people import People

    people = People(data)
    tokens = []
    for n in range(readers):
        hidden = {(n + j) % len(shards) for j in range(HIDDEN_SHARDS)}
        grants = [str(path) for i, path in enumerate(shards) if i not in hidden]
        tokens.append(people.add(f"reader{n:02d}", "reader", grants))
    return tokens


def compare_readers(args: argparse.Namespace, url: str, headers: dict[str, str],
                    questions: list[str], tokens: list[str]) -> dict[str, Any]:
    """The same clients with the single owner token, then with R readers' tokens, in turns."""
    runs: dict[str, list[tuple[float, float, int, str]]] = {"single_token": [], "readers": []}
    seconds = {"single_token": 0.0, "readers": 0.0}
    for _ in range(args.rounds):
        for name, given in (("single_token", None), ("readers", tokens)):
            clients = Clients(url, questions, args.clients,
                              headers if args.keep_alive else None, given)
            began = time.perf_counter()
            clients.start()
            time.sleep(args.duration)
            clients.stop()
            seconds[name] += time.perf_counter() - began
            runs[name].extend(clients.results)
    figures = {}
    for name, results in runs.items():
        errors = [r for r in results if r[3]]
        figures[name] = {
            "requests": len(results),
            "requests_per_s": round(len(results) / seconds[name], 2),
            "errors": len(errors), "error_samples": sorted({e[3] for e in errors})[:3],
            "latency": summary([r[1] for r in results]),
        }
    single, readers = figures["single_token"], figures["readers"]
    return figures | {
        "readers_vs_single_requests_per_s": round(
            readers["requests_per_s"] / max(single["requests_per_s"], 1e-9), 3),
        "readers_vs_single_p50": round(readers["latency"].get("p50_s", 0)
                                       / max(single["latency"].get("p50_s", 1e-9), 1e-9), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--questions", type=Path, help="JSONL with a 'question' field")
    parser.add_argument("--leaves", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--burst-at", type=float, default=5.0, help="seconds after the start")
    parser.add_argument("--workdir", type=Path, help="keep the data here (default: a temp dir)")
    parser.add_argument("--readers", type=int, default=0,
                        help="compare the single token with this many readers' tokens "
                             "(no burst)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --readers: how many times each phase runs, in turns")
    parser.add_argument("--keep-alive", action="store_true",
                        help="each client keeps one HTTP/1.1 connection (default: one per "
                             "request, as urllib does)")
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="psirag-load-"))
    docs, data = work / "docs", work / "data"
    docs.mkdir(parents=True, exist_ok=True)
    config = Config().with_data_dir(data)
    rows = records(args.corpus, args.leaves)
    shards = [docs / f"shard-{n:02d}" for n in range(SHARDS)] if args.readers else []
    for n, row in enumerate(rows if args.readers else []):
        path = shards[n % SHARDS] / f"p{n:05d}.md"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"# {row['title']}\n\n{row['text']}\n", encoding="utf-8")
    corpus = work / "base.jsonl"
    if not args.readers:
        corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with KnowledgeBase(config, CachedEmbedder(make_embedder(config.embedding),
                                              config.storage.cache_dir)) as kb:
        if args.readers:
            kb.ingest([docs])
        else:
            kb.ingest_jsonl(corpus)
        leaves = kb.stores.store.chunk_count()
    if args.questions:
        lines = args.questions.read_text(encoding="utf-8").splitlines()
        questions = [json.loads(line)["question"] for line in lines if line]
    else:
        questions = [r["title"] for r in rows]

    settings = None
    if args.readers:
        tokens = make_readers(data, shards, args.readers)
        settings = work / "config.toml"  # the benchmark measures grants, not the rate limit
        settings.write_text("[api]\nperson_requests_per_minute = 1000000\n", encoding="utf-8")
    proc, url = start_daemon(data, docs, settings)
    headers = authorize(data)
    if args.readers:
        try:
            post(url + "/api/query", {"text": "warm up", "mode": "hybrid", "k": 1})
            report = compare_readers(args, url, headers, questions, tokens)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        print(json.dumps({"machine": f"{os.cpu_count()} cores", "leaves": leaves,
                          "clients": args.clients, "reader_tokens": args.readers,
                          "duration_s_per_phase": args.duration, "rounds": args.rounds,
                          "load_average": os.getloadavg()} | report, indent=2))
        return
    memory: list[tuple[float, float]] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            memory.append((time.perf_counter(), rss_mb(proc.pid)[0]))
            time.sleep(0.5)

    def indexed() -> int:
        return get(url + "/api/status")["files"]["indexed"]

    burst_started = last_write = indexed_at = queryable_at = None
    probes: dict[Path, str] = {}
    try:
        post(url + "/api/query", {"text": "warm up", "mode": "hybrid", "k": 1})  # loads the model
        rss_before = rss_mb(proc.pid)[0]
        sampler = threading.Thread(target=sample)
        sampler.start()
        clients = Clients(url, questions, args.clients,
                          headers if args.keep_alive else None)
        began = time.perf_counter()
        clients.start()
        time.sleep(args.burst_at)
        rng = random.Random(1)
        if args.burst:
            before = indexed()
            burst_started = time.perf_counter()
            for n in range(args.burst):
                item = rows[rng.randrange(len(rows))]
                path, first_line = docs / f"burst{n:04d}.md", f"{item['title']}: loadmarker{n:04d}."
                path.write_text(f"{first_line}\n{item['text']}\n", encoding="utf-8")
                # the marker picks the file for BM25, its opening words for the tree and dense
                # rankings (a title alone ties with the corpus's many passages of that title)
                probes[path] = f"loadmarker{n:04d} " + " ".join(item["text"].split()[:25])
            last_write = time.perf_counter()
            found_at: list[float | None] = []
            poller = threading.Thread(target=lambda: found_at.append(wait_burst(
                url, probes, lambda: indexed() >= before + args.burst, last_write + 600)[0]),
                daemon=True)
            poller.start()
        while time.perf_counter() - began < args.duration:
            if args.burst and indexed_at is None and indexed() >= before + args.burst:
                indexed_at = time.perf_counter()
            time.sleep(0.25)
        clients.stop()
        ended = time.perf_counter()
        if args.burst:
            while indexed_at is None and time.perf_counter() - last_write < 1800:
                if indexed() >= before + args.burst:
                    indexed_at = time.perf_counter()
                time.sleep(0.25)
            poller.join()
            queryable_at = found_at[0]
        spot = rng.sample(sorted(probes), min(20, len(probes)))
        found = [returns(url, probes[path], path) for path in spot]
        status = get(url + "/api/status")
        sampling.set()
        sampler.join()
        rss_after, peak = rss_mb(proc.pid)
    finally:
        sampling.set()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)

    def after_last_write(at: float | None) -> float | None:
        return round(at - last_write, 1) if at is not None and last_write is not None else None

    results = clients.results
    errors = [r for r in results if r[3]]
    during = [r[1] for r in results
              if burst_started is not None and burst_started <= r[0] <= (queryable_at or ended)]
    print(json.dumps({
        "machine": f"{os.cpu_count()} cores",
        "leaves_before": leaves,
        "clients": args.clients,
        "duration_s": round(ended - began, 1),
        "requests": len(results),
        "requests_per_s": round(len(results) / (ended - began), 2),
        "errors": len(errors),
        "error_samples": sorted({e[3] for e in errors})[:5],
        "latency": summary([r[1] for r in results]),
        "latency_while_burst_indexing": summary(during) if args.burst else None,
        "burst": {
            "files": args.burst,
            "queryable_after_last_write_s": after_last_write(queryable_at),
            "indexed_after_last_write_s": after_last_write(indexed_at),
            "spot_check_found": f"{sum(found)}/{len(found)}" if found else None,
        },
        "daemon_rss_mb": {
            "before": round(rss_before), "max_sampled": round(max(m for _, m in memory)),
            "after": round(rss_after), "peak_vmhwm": round(peak),
            "every_10_s": [round(m) for t, m in memory if round(t - began, 1) % 10 < 0.5],
        },
        "leaves_after": status["chunks"],
        "watcher_errors": len(status["daemon"]["errors"]),
    }, indent=2))


if __name__ == "__main__":
    main()

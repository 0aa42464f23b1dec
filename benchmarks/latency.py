"""Daemon latency: last write of a file to its text in query results, and a burst of new files.

    python benchmarks/latency.py --corpus /work/shared/data/2wiki_corpus/corpus.jsonl \
        --leaves 10000 --files 20 --burst 500

Builds a base knowledge base of N corpus leaves (records are duplicated with a marker when the
corpus is smaller), starts the real daemon on an empty watched folder, then measures (1) for ~20
one-page files written one at a time, the time from the end of the write until a query over the
HTTP API returns the file, and (2) for a burst of new files, the time until all are queryable.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from psirag_kb.config import Config
from psirag_kb.daemon import Daemon
from psirag_kb.embedding import CachedEmbedder, make_embedder
from psirag_kb.kb import KnowledgeBase


def records(corpus: Path, leaves: int) -> list[dict[str, str]]:
    """N records from a corpus, duplicated with a copy marker when it is smaller."""
    base = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line]
    out = []
    for n in range(leaves):
        item = dict(base[n % len(base)])
        copy = n // len(base)
        if copy:
            item["id"] = f"{item['id']}-copy{copy}"
            item["text"] = f"{item['text']} (Copy {copy}.)"
        out.append(item)
    return out


def query(url: str, text: str) -> list[dict[str, Any]]:
    request = urllib.request.Request(
        url + "/api/query", method="POST",
        data=json.dumps({"text": text, "mode": "sparse", "k": 3}).encode(),
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["results"]


def indexed(url: str) -> int:
    with urllib.request.urlopen(url + "/api/status", timeout=60) as response:
        return json.loads(response.read())["files"]["indexed"]


def wait_found(url: str, token: str, path: Path, timeout: float = 120.0) -> float:
    """Poll until a query for the file's unique token returns it; the time it was first seen."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if any(r["source"] == str(path) for r in query(url, token)):
            return time.perf_counter()
        time.sleep(0.01)
    raise TimeoutError(f"{path} not queryable after {timeout} s")


def page(passages: list[dict[str, str]], rng: random.Random, token: str) -> str:
    """About one page (~450 words) of corpus text with a unique token."""
    parts, words = [f"This page is about {token}."], 0
    while words < 450:
        text = rng.choice(passages)["text"]
        parts.append(text)
        words += len(text.split())
    return "\n\n".join(parts) + "\n"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--leaves", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--quiet", type=float, default=1.0, help="watcher quiet period (s)")
    parser.add_argument("--workdir", type=Path, help="keep the data here (default: a temp dir)")
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="psirag-latency-"))
    docs = work / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    config = Config().with_data_dir(work / "data")
    config = config.replace("watch", folders=[str(docs)], quiet_period_s=args.quiet)
    config = config.replace("api", port=0)
    embedder = make_embedder(config.embedding)
    rows = records(args.corpus, args.leaves)

    started = time.perf_counter()
    corpus = work / "base.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    # the base leaves come from the evaluation cache when present; the daemon embeds uncached
    with KnowledgeBase(config, CachedEmbedder(embedder, config.storage.cache_dir)) as kb:
        kb.ingest_jsonl(corpus)
        leaves = kb.store.chunk_count()
    build_s = time.perf_counter() - started

    daemon = Daemon(config, embedder=embedder)
    daemon.start()
    url = daemon.api.url
    rng = random.Random(0)
    try:
        latencies = []
        for n in range(args.files):
            path, token = docs / f"page{n:03d}.md", f"latencytoken{n:03d}"
            path.write_text(page(rows, rng, token), encoding="utf-8")
            written = time.perf_counter()
            latencies.append(wait_found(url, token, path) - written)
        before = indexed(url)
        burst_started = time.perf_counter()
        paths = []
        for n in range(args.burst):
            path = docs / f"burst{n:04d}.md"
            item = rows[rng.randrange(len(rows))]
            path.write_text(f"{item['title']}: burstmarker{n:04d}.\n{item['text']}\n",
                            encoding="utf-8")
            paths.append(path)
        last_write = time.perf_counter()
        deadline = last_write + 1800
        while indexed(url) < before + args.burst and time.perf_counter() < deadline:
            time.sleep(0.05)
        all_indexed = time.perf_counter()
        for n in rng.sample(range(args.burst), min(20, args.burst)):
            wait_found(url, f"burstmarker{n:04d}", paths[n], timeout=60)
        status = daemon.status()
    finally:
        daemon.stop()

    total = all_indexed - burst_started
    print(json.dumps({
        "leaves_before": leaves,
        "base_build_s": round(build_s, 1),
        "quiet_period_s": args.quiet,
        "single_file": {
            "files": len(latencies),
            "p50_s": round(statistics.median(latencies), 3),
            "p95_s": round(percentile(latencies, 0.95), 3),
            "max_s": round(max(latencies), 3),
            "p50_beyond_quiet_s": round(statistics.median(latencies) - args.quiet, 3),
        },
        "burst": {
            "files": args.burst,
            "write_s": round(last_write - burst_started, 2),
            "all_queryable_after_last_write_s": round(all_indexed - last_write, 2),
            "total_s": round(total, 2),
            "files_per_s": round(args.burst / total, 1),
        },
        "leaves_after": status["chunks"],
        "watcher_errors": len(status["daemon"]["errors"]),
    }, indent=2))


if __name__ == "__main__":
    main()

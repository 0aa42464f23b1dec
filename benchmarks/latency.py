"""Daemon latency: last write of a file to its text in query results, and a burst of new files.

    python benchmarks/latency.py --corpus /work/shared/data/2wiki_corpus/corpus.jsonl \
        --leaves 10000 --files 20 --burst 500

Builds a base knowledge base of N corpus leaves (records are duplicated with a marker when the
corpus is smaller), starts the real daemon on an empty watched folder, then measures (1) for ~20
one-page files written one at a time, the time from the end of the write until a hybrid query
over the HTTP API returns the file, and (2) for a burst of new files, the time until every one of
them is queryable. "Queryable" means a HYBRID query (the default mode: tree + BM25 + dense, RRF)
aimed at the file returned one of its chunks (`source` is the file's path); a status count or a
BM25-only query does not count, since DuckDB commits before the derived indexes and the tree view
are updated. The query for a file is its unique token plus some of its text: the token alone is
not enough in hybrid mode, as the tree and dense rankings of a nonsense word outvote BM25's hit.
A query returning the file is the end of the interval (poll resolution: one query plus 0.05 s for
single files; one pass over the files not yet found plus 0.25 s for the burst). Prints one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psirag_kb.config import Config
from psirag_kb.ingest.embedding import CachedEmbedder, make_embedder
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.daemon import Daemon


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


PROBE_K = 10
"""Results asked for when checking that a file is queryable."""


def query(url: str, text: str, k: int = PROBE_K) -> list[dict[str, Any]]:
    """The results of a hybrid query over the HTTP API."""
    request = urllib.request.Request(
        url + "/api/query", method="POST",
        data=json.dumps({"text": text, "mode": "hybrid", "k": k}).encode(),
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())["results"]


def returns(url: str, text: str, path: Path) -> bool:
    """Whether a hybrid query for `text` returns a chunk of the file at `path`."""
    return any(r["source"] == str(path) for r in query(url, text))


def wait_found(url: str, text: str, path: Path, timeout: float = 120.0,
               pause: float = 0.05) -> float:
    """Poll until a hybrid query for `text` returns the file; the time that query returned."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if returns(url, text, path):
            return time.perf_counter()
        time.sleep(pause)
    raise TimeoutError(f"{path} not returned by a hybrid query after {timeout} s")


def wait_burst(url: str, probes: dict[Path, str], indexed: Callable[[], bool], deadline: float,
               pause: float = 0.25, tail: int = 10) -> tuple[float | None, list[Path]]:
    """Poll until a burst is queryable: the daemon counts every file as indexed and a hybrid
    query has returned each of the last `tail` files written (probes: path -> query text, in
    write order).

    The daemon takes files in the order they were written, so the last ones are the last to
    become queryable; asking only for them keeps the poller from loading the daemon with one
    query per file (at 0.3 s a query under load, 500 files would take the poller longer than
    the daemon). Callers spot-check other files afterwards. Returns the time both held (None
    when the deadline came first) and the tail files never found.
    """
    pending = dict(list(probes.items())[-tail:])
    done = None
    while time.perf_counter() < deadline:
        for path, text in list(pending.items()):
            try:
                if returns(url, text, path):
                    del pending[path]
            except (OSError, ValueError, KeyError):  # HTTP error, timeout, bad body
                continue
        if not pending and indexed():
            done = time.perf_counter()
            break
        time.sleep(pause)
    return done, list(pending)


def page_query(text: str, token: str) -> str:
    """A query aimed at a page's first chunk: its token and the 25 words after its heading line
    (across passages: a first passage as short as "String of pearls may refer to:" alone is
    outranked by the corpus passage it came from)."""
    return f"{token} " + " ".join(text.split("\n\n", 1)[1].split()[:25])


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
        leaves = kb.stores.store.chunk_count()
    build_s = time.perf_counter() - started

    daemon = Daemon(config, embedder=embedder)
    daemon.start()
    url = daemon.api.url
    opener = urllib.request.build_opener()
    opener.addheaders = [("Authorization", f"Bearer {daemon.api.token}")]
    urllib.request.install_opener(opener)
    rng = random.Random(0)
    try:
        query(url, "warm up", k=1)  # the question model loads on the first query
        latencies = []
        for n in range(args.files):
            path, token = docs / f"page{n:03d}.md", f"latencytoken{n:03d}"
            text = page(rows, rng, token)
            path.write_text(text, encoding="utf-8")
            written = time.perf_counter()
            latencies.append(wait_found(url, page_query(text, token), path) - written)
        before = daemon.status()["files"]["indexed"]
        burst_started = time.perf_counter()
        probes: dict[Path, str] = {}
        for n in range(args.burst):
            path = docs / f"burst{n:04d}.md"
            item = rows[rng.randrange(len(rows))]
            first_line = f"{item['title']}: burstmarker{n:04d}."
            path.write_text(f"{first_line}\n{item['text']}\n", encoding="utf-8")
            probes[path] = f"burstmarker{n:04d} " + " ".join(item["text"].split()[:25])
        last_write = time.perf_counter()

        def indexed() -> bool:
            return daemon.status()["files"]["indexed"] >= before + args.burst

        all_queryable, missing = (wait_burst(url, probes, indexed, last_write + 1800)
                                  if probes else (None, []))
        if missing or (probes and all_queryable is None):
            raise TimeoutError(f"burst files not returned by a hybrid query after 1800 s, "
                               f"e.g. {missing[:1]}")
        spot = rng.sample(sorted(probes), min(20, len(probes)))  # beyond the tail checked
        spot_found = sum(returns(url, probes[path], path) for path in spot)
        status = daemon.status()
    finally:
        daemon.stop()

    single: dict[str, Any] = {"files": len(latencies)}
    if latencies:
        single |= {
            "p50_s": round(statistics.median(latencies), 3),
            "p95_s": round(percentile(latencies, 0.95), 3),
            "max_s": round(max(latencies), 3),
            "p50_beyond_quiet_s": round(statistics.median(latencies) - args.quiet, 3),
        }
    burst: dict[str, Any] = {"files": args.burst, "write_s": round(last_write - burst_started, 2),
                             "all_queryable_after_last_write_s": None, "total_s": None,
                             "files_per_s": None}
    if all_queryable is not None:  # None with --burst 0
        total = all_queryable - burst_started
        burst |= {
            "all_queryable_after_last_write_s": round(all_queryable - last_write, 2),
            "total_s": round(total, 2),
            "files_per_s": round(args.burst / total, 1),
            "spot_check_found": f"{spot_found}/{len(spot)}",
        }
    print(json.dumps({
        "leaves_before": leaves,
        "base_build_s": round(build_s, 1),
        "quiet_period_s": args.quiet,
        "single_file": single,
        "burst": burst,
        "leaves_after": status["chunks"],
        "watcher_errors": len(status["daemon"]["errors"]),
    }, indent=2))


if __name__ == "__main__":
    main()

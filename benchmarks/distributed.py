"""Ingest one folder locally and on a local Ray cluster (1, then 2 worker processes) in one run.

    PYTHONPATH=. .venv/bin/python benchmarks/distributed.py \\
        /work/shared/data/2wiki_corpus/corpus.jsonl --passages 2000 --workers 1 2

Writes PASSAGES passages of a {"id","title","text"} corpus into markdown files (PER_FILE each)
in a temporary folder, starts a Ray head of its own on loopback (its own temp dir and ports;
killed by its own processes at the end), then for each run ingests the folder into a fresh
data directory with the real model:
  local: the reader and embedder threads of this process (the default ingest);
  ray N: the same ingest with [compute] ray_address, N actors each holding the model.
Reports passages/s and chunks/s (wall time of `kb.ingest`, the tree build included), the
cluster's start (child process, actors loading the model), the round trip of an empty batch
and the pipe transfer of a full one (the per-batch overhead), the writer's commit rate
(chunks per second of its `store` time), and the scaling per added worker.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from ray_helpers import LocalRay  # noqa: E402

from psirag_kb.config import Config  # noqa: E402
from psirag_kb.ingest.raywork import Batch  # noqa: E402
from psirag_kb.kb import KnowledgeBase  # noqa: E402


def write_files(corpus: Path, folder: Path, passages: int, per_file: int) -> int:
    """Markdown files of `per_file` passages each; returns how many files."""
    folder.mkdir(parents=True)
    files = 0
    with corpus.open(encoding="utf-8") as lines:
        parts: list[str] = []
        for number, line in enumerate(lines):
            if number >= passages:
                break
            item = json.loads(line)
            parts.append(f"## {item['title']}\n\n{item['text']}\n")
            if len(parts) == per_file:
                (folder / f"f{files:05d}.md").write_text("\n".join(parts), encoding="utf-8")
                files, parts = files + 1, []
        if parts:
            (folder / f"f{files:05d}.md").write_text("\n".join(parts), encoding="utf-8")
            files += 1
    return files


def run(folder: Path, data: Path, passages: int, address: str = "", actors: int = 0,
        roundtrips: int = 0) -> dict[str, Any]:
    """One ingest of `folder` into a fresh data directory; on the cluster when `address`."""
    config = Config().with_data_dir(data).replace("compute", ray_address=address)
    result: dict[str, Any] = {"run": f"ray {actors}" if address else "local"}
    with KnowledgeBase(config) as kb:
        kb.embedder.embed(["warm up the model"])
        if address:
            kb.ingestion.compute.ray_actors = actors
            warm = folder.parent / f"warm-{actors}"
            warm.mkdir()
            (warm / "w.md").write_text("A note that starts the cluster.\n")
            started = time.perf_counter()
            kb.ingest([warm])  # starts the child and the actors (the model loads in each)
            result["cluster_start_s"] = round(time.perf_counter() - started, 1)
        load = os.getloadavg()[0]
        started = time.perf_counter()
        report = kb.ingest([folder])
        seconds = time.perf_counter() - started
        chunks = kb.stores.store.chunk_count() - (1 if address else 0)
        if address and roundtrips:
            cluster = kb.ingestion.compute.ray
            assert cluster is not None and cluster.alive, "the ingest fell back to local"
            times = []
            for _ in range(roundtrips):
                begun = time.perf_counter()
                seq = cluster.submit(Batch([], {}, {}, False, 256))
                cluster.outcome(seq, lambda: None)
                times.append(time.perf_counter() - begun)
            times.sort()
            result["empty_batch_ms"] = {"median": round(1000 * times[len(times) // 2], 1),
                                        "min": round(1000 * times[0], 1)}
    stages = report.seconds
    batches = -(-len(list(folder.iterdir())) // 64)
    result.update({
        "seconds": round(seconds, 1), "chunks": chunks, "files": report.added,
        "passages_per_s": round(passages / seconds, 1),
        "chunks_per_s": round(chunks / seconds, 1),
        "stages": stages, "batches_at_least": batches,
        "writer_chunks_per_s": round(chunks / stages["store"], 1) if stages.get("store") else None,
        "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
    })
    print(json.dumps(result), flush=True)
    return result


def transfer_ms(chunks: int = 256, rounds: int = 20) -> float:
    """Median ms to send a batch outcome of `chunks` chunks (384-d vectors, 100-token texts)
    through a pipe, as the child hands one to the knowledge base's process."""
    import multiprocessing

    import numpy as np

    from psirag_kb.ingest.raywork import Outcome
    from psirag_kb.ingest.report import IngestReport
    from psirag_kb.storage.records import ChunkRow, FileChange

    rng = np.random.default_rng(0)
    rows = [ChunkRow(i, "/srv/docs/f.md", 0, 500, 1, 9, "word " * 100, f"{i:064x}",
                     vector=rng.standard_normal(384).astype(np.float32), context="Title")
            for i in range(chunks)]
    outcome = Outcome([FileChange("/srv/docs/f.md", "file", "0" * 64, 1, 0.0, "indexed", "",
                                  rows)], ["/srv/docs/f.md"], [], IngestReport(), "node", 1)
    sender, receiver = multiprocessing.Pipe()
    times = []
    for _ in range(rounds):
        begun = time.perf_counter()
        reader = threading.Thread(target=receiver.recv)  # the pipe holds 64 KB: read beside
        reader.start()
        sender.send(outcome)
        reader.join()
        times.append(time.perf_counter() - begun)
    return round(1000 * sorted(times)[rounds // 2], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", type=Path, help='{"id","title","text"} lines')
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--per-file", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--roundtrips", type=int, default=30)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="psirag-distributed-"))
    head = None
    try:
        folder = tmp / "docs"
        files = write_files(args.corpus, folder, args.passages, args.per_file)
        print(f"{args.passages} passages in {files} files; {os.cpu_count()} cores "
              f"({platform.processor() or platform.machine()}), load {os.getloadavg()[0]:.2f}",
              flush=True)
        print(f"a 256-chunk outcome through the child's pipe: {transfer_ms()} ms", flush=True)
        results = [run(folder, tmp / "local", args.passages)]
        started = time.perf_counter()
        head = LocalRay(cpus=max(args.workers)).start()
        print(f"ray head started in {time.perf_counter() - started:.1f} s", flush=True)
        for actors in args.workers:
            results.append(run(folder, tmp / f"ray{actors}", args.passages, head.address,
                               actors, args.roundtrips))
        base = results[0]["passages_per_s"]
        print("\nrun        s   passages/s  chunks/s  vs local  writer chunks/s")
        for item in results:
            print(f"{item['run']:8} {item['seconds']:6.1f} {item['passages_per_s']:10.1f} "
                  f"{item['chunks_per_s']:9.1f} {item['passages_per_s'] / base:8.2f}x "
                  f"{item['writer_chunks_per_s']}")
    finally:
        if head is not None:
            head.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

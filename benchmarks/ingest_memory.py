"""Where psirag-kb's ingest memory goes: resident set size sampled against the running code.

    PYTHONPATH=. /work/main/.venv/bin/python benchmarks/ingest_memory.py --store /tmp/mem \
        --corpus $D/musique_train100/corpus.jsonl [--folder DIR] [--interval 0.02]

One fresh ingest (the store is emptied first) in this process, as `benchmarks/peers.py` runs it.
A thread reads the process's RSS every `--interval` seconds and the innermost psirag-kb (or
sentence-transformers / torch) function each other thread is in. Prints the RSS after the
imports, after the model's load, the peak and, per function, the highest RSS seen while some
thread was in it and the growth above the RSS on entering it, the largest first. The peak is
also `getrusage`'s, as peers.py reports it.

`--stand-in-vectors` (a diagnostic, never a figure of the product): the model is loaded and
counts tokens as usual, but passages get pseudo-random unit vectors (seeded by their text)
instead of the forward passes, so the memory of everything after the embedding (stores, tree,
abstracts) shows in minutes on a loaded machine; `--batch-only` embeds just the longest
`--batch` passages of each corpus with the real model, which is where the embedding's
activations peak.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")
WATCHED = ("psirag_kb", "sentence_transformers", "transformers", "torch", "hnswlib", "duckdb",
           "tantivy", "numpy")


def rss_mb() -> float:
    """This process's resident set size now, in MiB."""
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * PAGE / 2**20


def where(frame: Any) -> str:
    """The innermost psirag-kb function of a stack, with the library call below it if any."""
    library = ""
    while frame is not None:
        name = frame.f_code.co_filename
        if "psirag_kb" in name:
            label = f"{name.split('psirag_kb/')[-1]}:{frame.f_code.co_name}"
            return f"{label} > {library}" if library else label
        if not library and any(f"/{part}/" in name for part in WATCHED[1:]):
            library = f"{name.split('site-packages/')[-1].split('/')[0]}"
        frame = frame.f_back
    return library or ""


class StandIn:
    """The real embedder's model and tokenizer, with seeded random unit vectors for passages."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts: list[str]) -> Any:
        """One pseudo-random unit vector per text, the same for the same text."""
        import numpy as np

        out = np.empty((len(texts), self.inner.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            out[i] = np.random.default_rng(seed).standard_normal(self.inner.dim)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class Sampler(threading.Thread):
    """Samples RSS and every thread's innermost psirag-kb function."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peak = (0.0, "")
        self.highest: dict[str, float] = {}
        self.entered: dict[str, float] = {}
        self.growth: dict[str, float] = {}
        self.seen: dict[str, int] = {}
        self.running = True
        self.last: set[str] = set()

    def run(self) -> None:
        """Sample until stopped."""
        me = threading.get_ident()
        while self.running:
            rss = rss_mb()
            now = {where(frame) for ident, frame in sys._current_frames().items()
                   if ident != me} - {""}
            for label in now:
                if label not in self.last:
                    self.entered[label] = rss
                self.highest[label] = max(self.highest.get(label, 0.0), rss)
                self.growth[label] = max(self.growth.get(label, 0.0), rss - self.entered[label])
                self.seen[label] = self.seen.get(label, 0) + 1
            self.last = now
            if rss > self.peak[0]:
                self.peak = (rss, " | ".join(sorted(now)))
            time.sleep(self.interval)


def main() -> None:
    """Run one ingest under the sampler and print where the RSS rose."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, action="append", default=[])
    parser.add_argument("--folder", type=Path, action="append", default=[])
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--stand-in-vectors", action="store_true")
    parser.add_argument("--batch-only", action="store_true")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    shutil.rmtree(args.store, ignore_errors=True)
    sampler = Sampler(args.interval)
    sampler.start()
    started = time.perf_counter()
    marks = {"start": rss_mb()}
    from psirag_kb.config import Config
    from psirag_kb.ingest.embedding import make_embedder
    from psirag_kb.kb import KnowledgeBase

    config = Config().with_data_dir(args.store).replace("api", port=0)
    embedder = make_embedder(config.embedding)
    marks["imports"] = rss_mb()
    embedder.embed(["load the model"])
    marks["model loaded"] = rss_mb()
    if args.batch_only:
        for corpus in args.corpus:
            rows = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()]
            texts = sorted((f"{r.get('title', '')}\n{r['text']}" for r in rows), key=len)
            embedder.embed(texts[-args.batch:])
            marks[f"longest {args.batch} of {corpus.parent.name}"] = rss_mb()
        print(json.dumps({"marks_mb": {k: round(v, 1) for k, v in marks.items()},
                          "peak_getrusage_mb": round(
                              resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
        return
    if args.stand_in_vectors:
        embedder = StandIn(embedder)
    with KnowledgeBase(config, embedder=embedder) as kb:
        marks["kb open"] = rss_mb()
        if args.corpus:
            kb.ingest_corpora(args.corpus)
        if args.folder:
            kb.ingest(args.folder)
        chunks = kb.stores.store.chunk_count()
        marks["ingested"] = rss_mb()
    sampler.running = False
    sampler.join()
    ranked = sorted(sampler.growth, key=lambda k: -sampler.growth[k])[:args.top]
    report = {
        "chunks": chunks, "seconds": round(time.perf_counter() - started, 1),
        "marks_mb": {k: round(v, 1) for k, v in marks.items()},
        "peak_sampled_mb": round(sampler.peak[0], 1), "peak_in": sampler.peak[1],
        "peak_getrusage_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "functions": [{"where": k, "highest_mb": round(sampler.highest[k], 1),
                       "growth_mb": round(sampler.growth[k], 1), "samples": sampler.seen[k]}
                      for k in ranked],
    }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Ingest bookkeeping without embedding: first ingest and rescans of a folder of small files.

    python benchmarks/rescan.py --files 1000 [--profile]

Writes N small text files (1-3 chunks each), then times with a hashing stand-in embedder (so
the figures are the stores' and the pipeline's own cost): the first ingest, a rescan with
nothing changed, and a rescan after 15 edits, 8 deletions, 4 renames and 15 new files (what the
daemon does at start-up and on its periodic rescan). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from psirag_kb.config import Config
from psirag_kb.ingest.embedding import normalise
from psirag_kb.kb import KnowledgeBase

WORDS = ("river castle engine violin glacier pepper orbit harbour lantern meadow copper falcon "
         "quarry saddle tundra velvet walnut yeast zephyr anchor bramble cinder dune ember").split()


class HashEmbedder:
    """Bag-of-words vectors from word hashes: no model, next to no time."""

    name = "rescan-benchmark-bow"
    dim = 64

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest()[:6], 16) % self.dim] += 1
        return normalise(out + 1e-3)

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def page(rng: random.Random, n: int) -> str:
    paragraphs = [" ".join(rng.choices(WORDS, k=rng.randint(30, 90))).capitalize() + "."
                  for _ in range(rng.randint(1, 3))]
    return f"File {n}. " + "\n\n".join(paragraphs) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--profile", action="store_true", help="pyinstrument the changed rescan")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="psirag-rescan-"))
    docs = work / "docs"
    docs.mkdir()
    rng = random.Random(0)
    for n in range(args.files):
        (docs / f"f{n:05d}.txt").write_text(page(rng, n), encoding="utf-8")
    figures = {"files": args.files}
    with KnowledgeBase(Config().with_data_dir(work / "data"), HashEmbedder()) as kb:
        started = time.perf_counter()
        kb.ingest([docs])
        figures["first_ingest_s"] = round(time.perf_counter() - started, 2)
        figures["chunks"] = kb.stores.store.chunk_count()
        started = time.perf_counter()
        kb.ingest([docs])
        figures["rescan_unchanged_s"] = round(time.perf_counter() - started, 3)
        names = sorted(os.listdir(docs))
        picks = rng.sample(names, 27)
        for name in picks[:15]:
            (docs / name).write_text(page(rng, -1), encoding="utf-8")
        for name in picks[15:23]:
            (docs / name).unlink()
        for i, name in enumerate(picks[23:]):
            (docs / name).rename(docs / f"renamed{i}.txt")
        for n in range(15):
            (docs / f"new{n}.txt").write_text(page(rng, n), encoding="utf-8")
        profiler = None
        if args.profile:
            from pyinstrument import Profiler

            profiler = Profiler()
            profiler.start()
        started = time.perf_counter()
        report = kb.ingest([docs])
        figures["rescan_changed_s"] = round(time.perf_counter() - started, 3)
        figures["changed_report"] = {k: v for k, v in report.as_dict().items() if k != "problems"}
        if profiler is not None:
            profiler.stop()
            print(profiler.output_text(unicode=False))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

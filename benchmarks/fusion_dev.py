"""Dev-set recall@5 of every mode under several fusion settings, on one index.

    python benchmarks/fusion_dev.py --work /tmp/fusion-dev \
        --kb multi=$D/musique_train100,$D/hotpotqa_train100,$D/2wiki_corpus \
        --kb single=$D/popqa_dev500,$D/2wiki_corpus \
        --ask multi:$D/musique_train100 --ask multi:$D/hotpotqa_train100 \
        --ask single:$D/popqa_dev500 --variants rrf,phrase,phrase+margin

Each `--kb NAME=SET,...` is indexed once into `--work/NAME` (the corpus.jsonl of each set folder,
as `psirag-kb eval` does; a second run reuses it, `--index-only` stops after indexing). Each
`--ask NAME:SET` scores SET's questions.jsonl against that index in every mode, once per
variant (sparse and dense, which fuse nothing, once): `rrf` is plain reciprocal rank fusion
(`[retrieval] certain_first = []`), the others name the certain-hit signals joined by `+`
(`phrase`, `margin`, `margin@R` for certain_margin R). The fusion is applied at query time, so
every variant ranks on the same index. Prints one JSON line per (set, mode, variant).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.evaluation import load_questions, recall_at
from psirag_kb.ingest.embedding import CachedEmbedder, make_embedder
from psirag_kb.kb import KnowledgeBase
from psirag_kb.search import fusion

DEFAULT_CERTAIN_MAX = fusion.CERTAIN_MAX
MODES = ("sparse", "dense", "tree", "hybrid", "flat_hybrid", "auto")
PURE = ("sparse", "dense")
"""Modes that fuse nothing: scored under the first variant only."""


def settings(variant: str) -> dict[str, object]:
    """Apply a variant: `rrf` (no certain hits) or the signals joined by `+`, where `margin@R`
    sets certain_margin to R and `phrase#N` lets a phrase be held by up to N chunks
    (fusion.CERTAIN_MAX); returns the [retrieval] settings."""
    fusion.CERTAIN_MAX = DEFAULT_CERTAIN_MAX
    if variant == "rrf":
        return {"certain_first": []}
    names, margin = [], 2.0
    for part in variant.split("+"):
        name, _, value = part.partition("@")
        name, _, cap = name.partition("#")
        names.append(name)
        margin = float(value) if value else margin
        fusion.CERTAIN_MAX = int(cap) if cap else fusion.CERTAIN_MAX
    return {"certain_first": names, "certain_margin": margin}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--kb", action="append", required=True, help="NAME=SETDIR,SETDIR,...")
    parser.add_argument("--ask", action="append", default=[], help="NAME:SETDIR")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--variants", default="rrf,phrase+margin")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--index-only", action="store_true")
    args = parser.parse_args()
    base = Config()
    embedder = CachedEmbedder(make_embedder(base.embedding, base.storage.cache_dir),
                              base.storage.cache_dir)
    for spec in args.kb:
        name, _, sets = spec.partition("=")
        with KnowledgeBase(base.with_data_dir(args.work / name), embedder=embedder) as kb:
            if kb.stores.store.chunk_count() == 0:
                started = time.perf_counter()
                kb.ingest_corpora([Path(s) / "corpus.jsonl" for s in sets.split(",")])
                print(json.dumps({"kb": name, "chunks": kb.stores.store.chunk_count(),
                                  "ingest_s": round(time.perf_counter() - started, 1)}),
                      flush=True)
            if args.index_only:
                continue
            for ask in args.ask:
                target, _, folder = ask.partition(":")
                if target != name:
                    continue
                questions = load_questions(Path(folder) / "questions.jsonl")
                for mode in args.modes.split(","):
                    variants = args.variants.split(",")
                    for variant in variants[:1] if mode in PURE else variants:
                        kb.config = kb.config.replace("retrieval", **settings(variant))
                        kb.rank(questions[0]["question"], mode, args.k)  # warm-up
                        r5 = 0.0
                        started = time.perf_counter()
                        for item in questions:
                            found = kb.sources(kb.rank(item["question"], mode, args.k).ids)
                            r5 += recall_at(found, item["gold"], 5)
                        count = max(len(questions), 1)
                        print(json.dumps({
                            "set": Path(folder).name, "mode": mode, "variant": variant,
                            "recall@5": round(r5 / count, 4),
                            "ms": round(1000 * (time.perf_counter() - started) / count, 1),
                        }), flush=True)


if __name__ == "__main__":
    main()

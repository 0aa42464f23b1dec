"""Cost of live tree updates: add a 10-chunk file to a large KB and delete it, versus a rebuild.

    .venv/bin/python benchmarks/incremental.py ../shared/data/*/corpus.jsonl --leaves 10000

Times are from the call to queryable (DuckDB commit with the tree rows, Tantivy commit, hnswlib
update, node vectors), excluding the embedding of the new chunks, which is reported apart.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import tempfile
import time
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.embedding import CachedEmbedder, make_embedder
from psirag_kb.ingestion import IngestReport, read_records
from psirag_kb.kb import KnowledgeBase
from psirag_kb.store import FileChange


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("corpora", type=Path, nargs="+", help="JSONL corpora for the base KB")
    parser.add_argument("--leaves", type=int, default=10_000, help="leaves in the base KB")
    parser.add_argument("--repeat", type=int, default=10, help="add/delete rounds")
    parser.add_argument("--profile", action="store_true", help="print a profile of the adds")
    args = parser.parse_args()

    config = Config()
    embedder = CachedEmbedder(make_embedder(config.embedding), config.storage.cache_dir)
    rows = [r for c in args.corpora for r in read_records(c, c.read_bytes())][: args.leaves]
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase(config.with_data_dir(Path(tmp) / "kb"), embedder=embedder)
        change = FileChange("base-corpus", "corpus", "base", 0, 0.0, "indexed", "", rows)
        with kb._bulk():
            kb._reuse_and_embed([change], IngestReport())
            kb._apply([change])
        started = time.perf_counter()
        kb.rebuild_tree()
        rebuild_s = time.perf_counter() - started
        add, delete, embed = [], [], []
        profile = cProfile.Profile() if args.profile else None
        for round_ in range(args.repeat):
            doc = Path(tmp) / f"note-{round_}.md"
            doc.write_text("\n\n".join(
                f"Round {round_} paragraph {i}: the lighthouse keeper logged storm number {i} "
                f"with wind speeds and tide heights, noting damage to the pier and the boats. "
                f"The harbour master compared the readings with the charts of the previous "
                f"winter and wrote that the eastern breakwater had shifted by a few metres, "
                f"so the fishing fleet was told to moor in the inner basin until repairs."
                for i in range(10)) + "\n")
            kb.embed_seconds = 0.0
            started = time.perf_counter()
            if profile:
                profile.enable()
            report = kb.ingest([doc])
            total = time.perf_counter() - started
            if profile:
                profile.disable()
            assert report.chunks_embedded >= 1
            embed.append(kb.embed_seconds)
            add.append(total - kb.embed_seconds)
            assert kb.query(f"Round {round_} lighthouse keeper", mode="sparse")["results"]
            started = time.perf_counter()
            kb.remove([doc])
            delete.append(time.perf_counter() - started)
        if profile:
            pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
        status = kb.status()
        problems = kb.tree_index.problems()
        kb.close()
    ms = lambda xs: round(1000 * statistics.median(xs), 1)  # noqa: E731
    print(json.dumps({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}",
        "leaves": status["chunks"], "tree": status["tree"], "valid": not problems,
        "chunks_per_file": report.chunks_embedded,
        "add_ms_p50": ms(add), "add_ms_max": round(1000 * max(add), 1),
        "delete_ms_p50": ms(delete), "delete_ms_max": round(1000 * max(delete), 1),
        "embed_ms_p50": ms(embed), "full_rebuild_ms": round(1000 * rebuild_s, 1),
    }, indent=2))


if __name__ == "__main__":
    main()

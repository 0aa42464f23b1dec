"""Cost of live tree updates: add a 10-chunk file to a large KB and delete it, versus a rebuild.

    .venv/bin/python benchmarks/incremental.py ../shared/data/*/corpus.jsonl --leaves 10000

An add is timed from the call to `kb.ingest([file])` until a hybrid query (the default mode:
tree + BM25 + dense, RRF) for a distinctive sentence of the file returns one of its chunks, that
query included: chunking, the DuckDB commit with the tree rows, the Tantivy commit, the hnswlib
update, the published tree view, the question's embedding and the search. The embedding of the
new chunks is taken out and reported apart. A delete is timed from the call to `kb.remove([file])`
until the same hybrid query no longer returns any chunk of the file. Both calls return after the
derived indexes are updated, so one query normally settles it; otherwise the query is repeated
(and the number of extra queries is reported on stderr). Questions are embedded without the
embedding cache, as in the daemon.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.ingest.corpora import read_records
from psirag_kb.ingest.embedding import CachedEmbedder, make_embedder
from psirag_kb.ingest.report import IngestReport
from psirag_kb.kb import KnowledgeBase
from psirag_kb.storage.records import FileChange

PROBE_K = 10
TIMEOUT_S = 60.0


def settle(kb: KnowledgeBase, text: str, doc: Path, present: bool) -> int:
    """Query (hybrid) until the file is returned (`present`) or not; the queries it took."""
    deadline = time.perf_counter() + TIMEOUT_S
    queries = 0
    while True:
        queries += 1
        results = kb.query(text, mode="hybrid", k=PROBE_K)["results"]
        if any(r["source"] == str(doc) for r in results) == present:
            return queries
        if time.perf_counter() > deadline:
            state = "returned by" if present else "still returned by"
            raise TimeoutError(f"{doc} not {state} a hybrid query after {TIMEOUT_S} s")
        time.sleep(0.001)


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

        def base() -> None:
            with kb.stores.bulk():
                kb.ingestion.reuse_and_embed([change], IngestReport())
                kb.stores.apply([change])

        kb.stores.writer.call(base)  # store writes belong to the writer thread
        started = time.perf_counter()
        kb.rebuild_tree()
        rebuild_s = time.perf_counter() - started
        kb.query("warm up", mode="hybrid", k=1)  # the first query starts the question thread
        add, delete, embed = [], [], []
        extra_queries = 0
        # the writes run on the KB's writer thread: profile it as well as this one
        profile = cProfile.Profile() if args.profile else None
        writer_profile = cProfile.Profile() if args.profile else None
        for round_ in range(args.repeat):
            doc = Path(tmp) / f"note-{round_}.md"
            doc.write_text("\n\n".join(
                f"Round {round_} paragraph {i}: the lighthouse keeper logged storm number {i} "
                f"with wind speeds and tide heights, noting damage to the pier and the boats. "
                f"The harbour master compared the readings with the charts of the previous "
                f"winter and wrote that the eastern breakwater had shifted by a few metres, "
                f"so the fishing fleet was told to moor in the inner basin until repairs."
                for i in range(10)) + "\n")
            probe = (f"Round {round_} paragraph 3: the lighthouse keeper logged storm number 3 "
                     "with wind speeds and tide heights")
            kb.ingestion.embed_seconds = 0.0
            if profile and writer_profile:
                kb.stores.writer.call(writer_profile.enable)
                profile.enable()
            started = time.perf_counter()
            report = kb.ingest([doc])
            extra_queries += settle(kb, probe, doc, present=True) - 1
            total = time.perf_counter() - started
            if profile and writer_profile:
                profile.disable()
                kb.stores.writer.call(writer_profile.disable)
            assert report.chunks_embedded >= 1
            embed.append(kb.ingestion.embed_seconds)
            add.append(total - kb.ingestion.embed_seconds)
            started = time.perf_counter()
            kb.remove([doc])
            extra_queries += settle(kb, probe, doc, present=False) - 1
            delete.append(time.perf_counter() - started)
        if profile and writer_profile:
            for name, stats in (("writer thread", writer_profile), ("calling thread", profile)):
                print(f"--- {name}")
                pstats.Stats(stats).sort_stats("cumulative").print_stats(25)
        if extra_queries:
            print(f"{extra_queries} queries beyond the first were needed before a hybrid query "
                  "showed an add or a delete", file=sys.stderr)
        status = kb.status()
        problems = kb.stores.tree_index.problems()
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

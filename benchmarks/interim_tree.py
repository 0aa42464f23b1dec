"""A first ingest with and without interim trees: when the map first has topics, what it costs.

    python benchmarks/interim_tree.py $FOLDER --work $WORK

Indexes the folder twice into fresh data directories under `--work`, in one run, as the daemon
does (the real model, the abstract refresher running beside the ingest): once with interim trees
(the default: one at 2,000 passages, then each time they have grown fourfold) and once without
(the first threshold set beyond the folder). For each, prints the ingest's seconds until every
passage is in the tree and labelled, the seconds until the map first has labelled topics and the
final build's seconds, one JSON line each; the log (stderr) names each interim tree with its
passages and seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.refresher import AbstractRefresher
from psirag_kb.tree import bulk


def first_ingest(folder: Path, data: Path, interim: bool) -> dict[str, Any]:
    """One first ingest with the refresher beside it; its timings."""
    shutil.rmtree(data, ignore_errors=True)
    bulk.INTERIM_FIRST = 2000 if interim else 10**12
    with KnowledgeBase(Config().with_data_dir(data)) as kb:
        refresher = AbstractRefresher(kb, busy=kb.busy, quiet_s=3.0)
        started = time.perf_counter()
        first_map: list[float] = []
        done = threading.Event()

        def watch() -> None:  # when a labelled tree is first there to draw
            while not done.wait(0.2):
                view = kb.tree_view()
                if view.root is not None and not view.dirty and view.n_leaves:
                    first_map.append(time.perf_counter() - started)
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        refresher.start()
        report = kb.ingest([folder])
        ingested = time.perf_counter() - started
        while kb.tree_view().dirty or kb.tree_view().n_leaves < kb.chunk_count():
            time.sleep(0.2)
        labelled = time.perf_counter() - started
        done.set()
        refresher.stop()
        first = first_map[0] if first_map else labelled  # the watcher may miss the end
        return {"interim": interim, "chunks": kb.chunk_count(), "ingest_s": round(ingested, 1),
                "all_labelled_s": round(labelled, 1), "first_map_s": round(first, 1),
                "final_build_s": (report.tree_build or {}).get("seconds")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--order", default="with,without",
                        help="which run first (the second may find the OS's file cache warm)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    print(json.dumps({"machine": f"{platform.machine()}, python {platform.python_version()}",
                      "load": os.getloadavg()}), flush=True)
    for which in args.order.split(","):
        row = first_ingest(args.folder.resolve(), args.work / f"data-{which}", which == "with")
        print(json.dumps(row | {"load_after": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()

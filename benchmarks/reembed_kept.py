"""Reembed and abstracts: how many nodes of the new tree keep the abstract written before.

    python benchmarks/reembed_kept.py --folder examples/docs --to /tmp/i34/models/minilm-static
    python benchmarks/reembed_kept.py --jsonl /work/shared/data/hotpotqa_train100/corpus.jsonl \
        --to /tmp/i34/models/minilm-static

Builds a knowledge base of a folder or a JSON-lines corpus with the bundled MiniLM in a temporary
data directory, writes every node's abstract (offline: the count is the same for an LLM's, which
is kept by the same rule), reembeds with `--to` and waits for the tree built from the new
vectors. Prints the nodes before and after, how many of the new tree's nodes cover exactly the
chunks of an old node (and so keep its abstract, clean), per layer, as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from psirag_kb.config import Config  # noqa: E402
from psirag_kb.kb import KnowledgeBase  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--folder", type=Path)
    source.add_argument("--jsonl", type=Path)
    parser.add_argument("--to", required=True, help="the model to reembed with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Config().with_data_dir(Path(tmp) / "data")
        with KnowledgeBase(config) as kb:
            if args.folder:
                kb.ingest([args.folder])
            else:
                kb.ingest_jsonl(args.jsonl)
            kb.regenerate_abstracts(offline=True)
            live = kb.stores.tree_index.live
            before = {node: live.layer[node] for node in live.children
                      if node not in live.dirty and live.abstracts.get(node)}
            out: dict = {"chunks": kb.stores.store.chunk_count(), "nodes_before": len(live.children),
                         "clean_before": len(before),
                         "layers_before": dict(sorted(Counter(before.values()).items()))}
            started = time.perf_counter()
            kb.reembed(args.to)
            while kb.reembedding.state not in ("done", "failed"):
                time.sleep(0.1)
            if kb.reembedding.state == "failed":
                raise SystemExit(kb.reembedding.error)
            while kb.stores.tree_state["state"] != "ok":
                time.sleep(0.1)
            live = kb.stores.tree_index.live
            clean = {node: live.layer[node] for node in live.children if node not in live.dirty}
            out |= {"reembed_and_tree_s": round(time.perf_counter() - started, 1),
                    "kept_by_switch": kb.reembedding.kept, "nodes_after": len(live.children),
                    "kept_after": kb.stores.kept_given,
                    "kept_by_layer": dict(sorted(Counter(clean.values()).items())),
                    "layers_after": dict(sorted(Counter(live.layer[n] for n in live.children
                                                        ).items()))}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

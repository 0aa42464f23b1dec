"""SIGKILL an ingesting process (no daemon) mid-run; after a restart the stores agree."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase

sys.path.insert(0, str(Path(__file__).parent))
from crash_worker import HashEmbedder  # noqa: E402


def worker(data_dir: str, folder: str) -> None:
    """Ingest a folder file by file in small batches (run in a subprocess)."""
    import psirag_kb.ingest.ingestion as ingestion

    ingestion.BATCH_FILES = 7
    config = Config().with_data_dir(Path(data_dir))
    with KnowledgeBase(config, embedder=HashEmbedder()) as kb:
        print("ready", flush=True)
        kb.ingest([folder], lambda done, total, current: print(done, flush=True))
        print("done", flush=True)


def check_consistent(kb: KnowledgeBase) -> None:
    ids, _ = kb.stores.store.all_vectors()
    assert len(set(ids.tolist())) == len(ids)
    per_file = Counter(
        (hit.path, hit.ordinal) for hit in kb.stores.store.hits(ids.tolist()).values()
    )
    assert all(count == 1 for count in per_file.values()), "duplicated chunk"
    assert kb.stores.sparse.count() == len(ids) == kb.stores.dense.count
    assert np.array_equal(kb.stores.tree_index.chunk_ids(), ids)
    assert kb.stores.tree_index.problems() == []


@pytest.mark.parametrize("seed", [1])
def test_sigkill_during_ingest_then_restart(tmp_path, seed):
    folder = tmp_path / "docs"
    folder.mkdir()
    rng = np.random.default_rng(seed)
    words = ["river", "castle", "engine", "violin", "glacier", "pepper", "orbit", "harbour"]
    for i in range(120):
        picks = rng.choice(words, 3)
        (folder / f"f{i:03d}.txt").write_text(
            f"File {i} is about {' and '.join(picks)}.\n\n" + f"Extra line {i} on {picks[0]}.\n"
        )
    data = tmp_path / "data"
    config = Config().with_data_dir(data)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    with KnowledgeBase(config, embedder=HashEmbedder()) as kb:
        kb.ingest([folder / "f000.txt"])  # a tree exists, so later files take the live path
    kills = 0
    for batches, delay in ((1, 0.0), (2, 0.01), (4, 0.0), (6, 0.02), (9, 0.005), (12, 0.0)):
        proc = subprocess.Popen(
            [sys.executable, __file__, str(data), str(folder)],
            stdout=subprocess.PIPE, text=True, env=env,
        )
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(batches):  # kill after that many committed batches, or a moment later
            if proc.stdout.readline().strip() in ("done", ""):
                break
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=30)
        with KnowledgeBase(config, embedder=HashEmbedder()) as kb:
            check_consistent(kb)
        for i in rng.choice(120, 5, replace=False):  # edits between runs
            path = folder / f"f{i:03d}.txt"
            path.write_text(path.read_text() + f"Edited after kill {kills}.\n")
    assert kills >= 4
    with KnowledgeBase(config, embedder=HashEmbedder()) as kb:
        kb.ingest([folder])
        check_consistent(kb)
        assert kb.stores.store.state_counts()["indexed"] == 120
        for path in folder.iterdir():
            record = kb.stores.store.file(str(path))
            assert record is not None and record.hash == hashlib.sha256(
                path.read_bytes()).hexdigest()
        result = kb.query("Edited after kill", mode="sparse", k=50)["results"]
        assert all("Edited" in r["text"] for r in result[:3])


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2])

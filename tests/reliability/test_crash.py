"""SIGKILL the real daemon at named points while it ingests 1,000 files; nothing is lost.

Each round starts the daemon (tests/reliability/crash_worker.py) with one kill point armed, lets
it die there, then starts it clean: after that restart and its reconciliation every file on disk
is indexed exactly once in DuckDB, BM25, hnswlib and the tree, no deleted or superseded text can
be found, and the tree is valid. Between rounds files are created, edited, deleted and renamed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from waiting import wait_until

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase

sys.path.insert(0, str(Path(__file__).parent))
from crash_worker import HashEmbedder  # noqa: E402

TOKEN = re.compile(r"\btok\d+q\b")
"""The token Folder.write puts in each version of a file."""
WORKER = Path(__file__).with_name("crash_worker.py")
ROOT = Path(__file__).resolve().parents[2]
WORDS = ("river castle engine violin glacier pepper orbit harbour lantern meadow copper falcon "
         "quarry saddle tundra velvet walnut yeast zephyr anchor bramble cinder dune ember").split()

# Rounds of (point, n): die the n-th time the point is reached. Points in one round follow each
# other without a clean start between them: a kill mid bulk ingest leaves chunks without a
# tree, so the next start builds one (`tree-build`); `bm25-apply` leaves BM25 stale, so the next
# start rebuilds it (`bm25-rebuild`). After each round a clean start reconciles and is checked.
ROUNDS = [
    [("embedding", 4), ("tree-build", 1)],  # bulk ingest into an empty KB; the restart's build
    [("tree-update", 2)],    # live insert: tree changed in memory, transaction open
    [("duckdb-commit", 3)],  # chunks, files and tree rows written, COMMIT not run
    [("bm25-apply", 2), ("bm25-rebuild", 1)],  # DuckDB committed, Tantivy not; its rebuild
    [("bm25-commit", 3)],    # Tantivy committed, its generation file not updated
    [("dense-save", 1)],     # hnswlib file replaced, its generation file not
    [("abstracts", 1)],      # regenerated abstracts written, transaction open
    [("embedding", 3), ("duckdb-commit", 2)],  # live path, twice in a row
]

# points every round with changes reaches (the others need a particular state first)
ALWAYS_REACHED = ["embedding", "duckdb-commit", "tree-update", "bm25-apply", "bm25-commit"]


class Folder:
    """The watched folder and what the test expects to be indexed."""

    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.rng = np.random.default_rng(seed)
        self.tokens: dict[str, str] = {}  # file name -> the token only its text contains
        self.gone: list[str] = []  # tokens that must never be found again
        self.next = 0
        self.writes = 0

    def write(self, name: str) -> None:
        self.writes += 1
        self.tokens[name] = f"tok{self.writes}q"
        paragraphs = []
        for _ in range(int(self.rng.integers(1, 4))):
            words = self.rng.choice(WORDS, int(self.rng.integers(30, 90)))
            paragraphs.append(" ".join(words).capitalize() + ".")
        paragraphs[0] = f"Document {name} says {self.tokens[name]}. " + paragraphs[0]
        (self.root / name).write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")

    def create(self, count: int) -> None:
        for _ in range(count):
            self.write(f"f{self.next:04d}.txt")
            self.next += 1

    def mutate(self, edits: int = 15, deletes: int = 8, renames: int = 4, new: int = 15) -> None:
        names = sorted(self.tokens)
        picks = self.rng.choice(len(names), edits + deletes + renames, replace=False)
        for i in picks[:edits]:
            self.gone.append(self.tokens[names[i]])
            self.write(names[i])
        for i in picks[edits:edits + deletes]:
            self.gone.append(self.tokens.pop(names[i]))
            (self.root / names[i]).unlink()
        for i in picks[edits + deletes:]:
            new_name = f"f{self.next:04d}.txt"
            self.next += 1
            os.rename(self.root / names[i], self.root / new_name)
            self.tokens[new_name] = self.tokens.pop(names[i])
        self.create(new)


def start(data: Path, folder: Path, *point: str) -> tuple[subprocess.Popen, str]:
    """Start the worker daemon; return it and its API URL."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(data), str(folder), *point],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    line = proc.stdout.readline()
    if "serving" not in line:
        proc.wait(timeout=30)
        return proc, ""
    return proc, line.split("serving ")[1].split(";")[0]


def idle(url: str, data: Path) -> bool:
    """Whether the daemon has nothing queued (its start-up scan included)."""
    token = (data / "api.token").read_text().strip()
    request = urllib.request.Request(url + "/api/status",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status = json.loads(response.read())
    except OSError:
        return False
    return status["daemon"]["queue"] == 0


def kill_at(data: Path, folder: Path, point: str, n: int, timeout: float = 120.0) -> None:
    """Run the daemon until it SIGKILLs itself at the point; fail if it never gets there."""
    proc, _ = start(data, folder, point, str(n))
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"kill point {point} #{n} was not reached in {timeout:.0f} s")
    assert proc.returncode == -signal.SIGKILL, f"{point}: exit status {proc.returncode}"


def kill_after(data: Path, folder: Path, delay: float) -> None:
    """Run the daemon and SIGKILL it from outside after `delay` seconds."""
    proc, _ = start(data, folder)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def reconcile(data: Path, folder: Path, timeout: float = 120.0) -> None:
    """Start the daemon clean, wait until its reconciliation is done, stop it with SIGTERM."""
    proc, url = start(data, folder)
    assert url, f"daemon did not start (exit status {proc.returncode})"
    wait_until(lambda: idle(url, data), timeout, 0.2, "reconciliation")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def check(data: Path, folder: Folder) -> None:
    """Every file on disk is indexed once everywhere; nothing stale or deleted is findable."""
    config = Config().with_data_dir(data)
    with KnowledgeBase(config, embedder=HashEmbedder()) as kb:
        ids, vectors = kb.stores.store.all_vectors()
        assert len(set(ids.tolist())) == len(ids)
        hits = kb.stores.store.hits(ids.tolist())
        per_file = Counter((hit.path, hit.ordinal) for hit in hits.values())
        assert all(count == 1 for count in per_file.values()), "a chunk is stored twice"
        assert kb.stores.sparse.count() == len(ids) == kb.stores.dense.count
        assert np.array_equal(kb.stores.tree_index.chunk_ids(), ids)
        assert kb.stores.tree_index.problems() == []
        records = {r.path: r for r in kb.stores.store.files()}
        on_disk = {str(p): p for p in folder.root.iterdir()}
        assert set(records) == set(on_disk), "indexed files differ from the folder"
        for path, record in records.items():
            assert record.state == "indexed", (path, record.state, record.reason)
            assert record.hash == hashlib.sha256(on_disk[path].read_bytes()).hexdigest()
        for name, token in folder.tokens.items():
            found = {hits[i].path for i in kb.stores.sparse.search(token, 5)[0].tolist()}
            assert found == {str(folder.root / name)}, f"{token} of {name} found in {found}"
        stored = {word for hit in hits.values() for word in TOKEN.findall(hit.text)}
        for token in folder.gone:
            assert len(kb.stores.sparse.search(token, 5)[0]) == 0, f"{token} came back"
            assert token not in stored, f"{token} is still in a stored chunk's text"
        rows = np.arange(0, len(ids), max(1, len(ids) // 50))
        labels, _ = kb.stores.dense.search_many(vectors[rows], 5)
        assert set(labels.ravel().tolist()) <= set(ids.tolist()), "hnswlib returns a lost chunk"
        assert all(ids[row] in labels[i] for i, row in enumerate(rows)), "a vector is missing"


def run_rounds(tmp_path: Path, files: int, rounds: list[list[tuple[str, int]]],
               delays: list[float], seed: int) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    folder = Folder(root, seed)
    folder.create(files)
    data = tmp_path / "data"
    for points in rounds:
        for point, n in points:
            began = time.monotonic()
            kill_at(data, root, point, n)
            print(f"killed at {point} #{n} after {time.monotonic() - began:.1f} s")
        began = time.monotonic()
        reconcile(data, root)
        print(f"reconciled in {time.monotonic() - began:.1f} s")
        check(data, folder)
        folder.mutate()
    for delay in delays:
        kill_after(data, root, delay)
        reconcile(data, root)
        check(data, folder)
        folder.mutate()
    reconcile(data, root)
    check(data, folder)


def test_sigkill_at_every_commit_point_loses_nothing(tmp_path: Path) -> None:
    run_rounds(tmp_path, 1000, ROUNDS, delays=[1.5, 3.0], seed=7)


@pytest.mark.long
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_sigkill_at_random_points_long(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    points = [ALWAYS_REACHED[i] for i in rng.choice(len(ALWAYS_REACHED), 20)]
    run_rounds(tmp_path, 1000, [[(p, int(rng.integers(1, 4)))] for p in points],
               delays=rng.uniform(0.5, 6.0, 10).round(2).tolist(), seed=seed)

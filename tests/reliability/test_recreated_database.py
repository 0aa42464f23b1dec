"""A database deleted and recreated (or another one put in its place) beside the BM25 and
hnswlib indexes of the old one: its chunk ids 1..n are the old indexes' ids for other text,
and nothing of the old files may answer a query (real model, DuckDB, Tantivy, hnswlib)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase

ROOT = Path(__file__).resolve().parents[2]
MODES = ("sparse", "dense", "tree", "hybrid")
A = {f"quokka{n}.md": f"Quokka {n} smiles at the camera on Rottnest island, a marsupial charm."
     for n in range(3)}
B = {f"penguin{n}.md": f"Penguin {n} waddles across the frozen antarctic ice shelf at dawn."
     for n in range(3)}


def write(folder: Path, notes: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in notes.items():
        (folder / name).write_text(text + "\n")
    return folder


def drop_database(data_dir: Path) -> None:
    for name in ("kb.duckdb", "kb.duckdb.wal"):
        (data_dir / name).unlink(missing_ok=True)


def only_b(kb: KnowledgeBase, b: Path) -> None:
    """Every mode finds B, the quokka words match nothing in BM25, and hnswlib holds DuckDB's
    vectors for every chunk id (not the old database's)."""
    ids = kb.stores.store.chunk_ids()
    assert len(ids) == len(B) and kb.stores.sparse.count() == kb.stores.dense.count == len(ids)
    assert np.allclose(kb.stores.dense.get(ids), kb.stores.store.vectors(ids), atol=1e-5)
    assert kb.query("quokka Rottnest marsupial", mode="sparse", k=5)["results"] == []
    for mode in MODES:
        found = kb.query("penguin waddles on the antarctic ice", mode=mode, k=3)["results"]
        assert found and all(Path(r["path"]).parent == b for r in found), mode
        assert all("Quokka" not in r["text"] for r in found)


def test_a_database_recreated_beside_old_indexes_shares_nothing_with_them(
        config: Config, minilm, tmp_path: Path) -> None:
    a, b = write(tmp_path / "A", A), write(tmp_path / "B", B)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([a])
    drop_database(config.data_dir)
    # a new database: B is ingested, and the process dies before it saves the dense index
    script = ("import os, sys\nfrom pathlib import Path\nfrom psirag_kb.config import Config\n"
              "from psirag_kb.kb import KnowledgeBase\n"
              "kb = KnowledgeBase(Config().with_data_dir(Path(sys.argv[1])))\n"
              "assert kb.ingest([sys.argv[2]]).added == 3\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", script, str(config.data_dir), str(b)], check=True,
                   cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    with KnowledgeBase(config, embedder=minilm) as kb:
        only_b(kb, b)


def test_another_database_put_in_place_is_not_mistaken_for_the_old_one(
        config: Config, minilm, tmp_path: Path) -> None:
    a, b = write(tmp_path / "A", A), write(tmp_path / "B", B)
    other = config.with_data_dir(tmp_path / "other")
    for where, folder in ((config, a), (other, b)):
        with KnowledgeBase(where, embedder=minilm) as kb:
            kb.ingest([folder])
            state = (kb.stores.store.generation, kb.stores.store.chunk_count())
    with KnowledgeBase(config, embedder=minilm) as kb:  # the same generation and size
        assert (kb.stores.sparse.generation, kb.stores.sparse.count()) == state
    drop_database(config.data_dir)
    shutil.copy(other.data_dir / "kb.duckdb", config.data_dir / "kb.duckdb")
    with KnowledgeBase(config, embedder=minilm) as kb:
        only_b(kb, b)

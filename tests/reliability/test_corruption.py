"""Damaged stores: derived indexes are rebuilt from DuckDB, a damaged DuckDB file is named."""

from __future__ import annotations

import pytest

from psirag_kb.errors import StoreError
from psirag_kb.kb import KnowledgeBase


@pytest.fixture
def built(config, fake_embedder, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(12):
        (docs / f"n{i}.txt").write_text(f"Note {i} about the harbour and boat number {i}.\n")
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        kb.ingest([docs])
        chunks = kb.store.chunk_count()
    return config, chunks


def test_garbled_bm25_and_dense_files_are_rebuilt(built, fake_embedder):
    config, chunks = built
    for path in (config.data_dir / "bm25").iterdir():
        if path.is_file() and path.name != "GENERATION":
            path.write_bytes(b"\x00garbage" * 10)
    (config.data_dir / "dense" / "dense.hnsw").write_bytes(b"not an index")
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        assert kb.sparse.count() == chunks == kb.dense.count
        assert kb.query("harbour boat number 7", mode="sparse")["results"]


def test_damaged_database_is_named_with_the_recovery_command(built, fake_embedder):
    config, _ = built
    database = config.data_dir / "kb.duckdb"
    database.write_bytes(b"\x00" * 4096 + b"definitely not duckdb" * 100)
    wal = database.with_name("kb.duckdb.wal")
    if wal.exists():
        wal.unlink()
    with pytest.raises(StoreError) as caught:
        KnowledgeBase(config, embedder=fake_embedder)
    message = str(caught.value)
    assert str(database) in message and "ingest" in message

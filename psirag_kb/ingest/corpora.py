"""Benchmark corpora in: one leaf per {"id","title","text"} record of a JSON-lines file."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from psirag_kb.errors import KBError
from psirag_kb.ingest.chunking import content_hash
from psirag_kb.ingest.report import IngestReport, Progress
from psirag_kb.storage.records import ChunkRow, FileChange

if TYPE_CHECKING:
    from psirag_kb.tree.stores import Stores

def file_hash(data: bytes) -> str:
    """Content hash of a file's bytes."""
    return hashlib.sha256(data).hexdigest()


def read_records(path: Path, data: bytes) -> list[ChunkRow]:
    """One chunk row per {"id","title","text"} line of a benchmark corpus."""
    rows: list[ChunkRow] = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            title, text = str(item.get("title", "")).strip(), str(item["text"]).strip()
            source = str(item["id"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KBError(f"{path}:{number}: not a {{id, title, text}} record ({exc})") from exc
        body = f"{title}\n{text}" if title else text
        rows.append(ChunkRow(len(rows), source, None, None, None, None, body, content_hash(body)))
    return rows


class ChunkEmbedding(Protocol):
    """What corpora need of the ingest: chunks reused or embedded, and the time it took."""

    embed_seconds: float

    def reuse_and_embed(self, changes: list[FileChange], report: IngestReport) -> None:
        """Keep chunks whose hash is unchanged; embed the others."""


class Corpora:
    """Indexes benchmark corpora on the writer thread."""

    def __init__(self, stores: Stores, embedding: ChunkEmbedding) -> None:
        self.stores = stores
        self.embedding = embedding

    def ingest_jsonl(self, path: Path | str, progress: Progress | None = None) -> IngestReport:
        """Index a benchmark corpus: one leaf per {"id","title","text"} record."""
        path = Path(os.path.abspath(path))
        return self.stores.writer.call(lambda: self._ingest_jsonl(path, progress),
                                       key=("ingest-jsonl", str(path)))

    def _ingest_jsonl(self, path: Path, progress: Progress | None) -> IngestReport:
        """`ingest_jsonl` on the writer thread."""
        report = IngestReport()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise KBError(f"cannot read corpus {path}: {exc}") from exc
        digest = file_hash(data)
        record = self.stores.store.file(str(path))
        if record and record.hash == digest:
            report.unchanged += 1
            return report
        rows = read_records(path, data)
        change = FileChange(str(path), "corpus", digest, len(data), path.stat().st_mtime,
                            "indexed", "", rows)
        with self.stores.bulk():
            if record is None:
                report.added += 1
            else:
                report.updated += 1
            self.embedding.reuse_and_embed([change], report)
            self.stores.apply([change])
        if progress:
            progress(len(rows), len(rows), str(path))
        return report

    def ingest_corpora(
        self, corpora: Iterable[Path], batches: int = 1, seed: int = 0
    ) -> dict[str, float]:
        """Index benchmark corpora: at once, or shuffled in sequential incremental batches."""
        corpora = [Path(os.path.abspath(c)) for c in corpora]
        return self.stores.writer.call(lambda: self._ingest_corpora(corpora, batches, seed))

    def _ingest_corpora(self, corpora: list[Path], batches: int, seed: int) -> dict[str, float]:
        """`ingest_corpora` on the writer thread."""
        self.embedding.embed_seconds = self.stores.tree_seconds = 0.0
        if batches <= 1:
            with self.stores.bulk():
                for corpus in corpora:
                    self._ingest_jsonl(corpus, None)
        else:
            rows = [row for corpus in corpora
                    for row in read_records(Path(corpus), Path(corpus).read_bytes())]
            order = np.random.default_rng(seed).permutation(len(rows))
            for number, part in enumerate(np.array_split(order, batches)):
                batch = [rows[i] for i in part]
                for ordinal, row in enumerate(batch):
                    row.ordinal = ordinal
                change = FileChange(f"batch-{number:05d}", "corpus", f"batch-{number}",
                                    0, 0.0, "indexed", "", batch)
                self.embedding.reuse_and_embed([change], IngestReport())
                self.stores.apply([change])
        return {"embed_s": round(self.embedding.embed_seconds, 2),
                "tree_build_s": round(self.stores.tree_seconds, 2)}

"""Moved files: a file's record and leaves follow it to its new path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from psirag_kb.ingest.context import file_title, fit
from psirag_kb.ingest.reading import path_hash
from psirag_kb.ingest.report import IngestReport
from psirag_kb.storage.records import FileRecord

if TYPE_CHECKING:
    from psirag_kb.config import Config
    from psirag_kb.storage.store import Store
    from psirag_kb.tree.stores import Stores


def name_header(old: Path | str, new: Path | str) -> str | None:
    """The header a file's old name gave its chunks with no title and no heading, when the
    new name gives them another (None when the name stays the same)."""
    before, after = fit([file_title(old)]), fit([file_title(new)])
    return before if before != after else None


class Renames:
    """Finds files moved while nobody watched, and moves records to their new paths."""

    def __init__(self, config: Config, stores: Stores) -> None:
        self.config = config
        self.stores = stores

    @property
    def store(self) -> Store:
        """The DuckDB store."""
        return self.stores.store

    def header(self, old: Path | str, new: Path | str) -> str | None:
        """`name_header` when chunks have headers."""
        return name_header(old, new) if self.config.ingest.chunk_context else None

    def pairs(self, files: list[Path],
              expected: dict[str, FileRecord]) -> list[tuple[str, str]]:
        """(vanished path, new path) of new files with a vanished file's content (hashed here,
        off the writer)."""
        by_hash: dict[str, str] = {}
        for gone, record in expected.items():
            if record.state == "indexed" and record.hash:
                by_hash.setdefault(record.hash, gone)
        if not by_hash:
            return []
        known = self.store.records(str(p) for p in files)
        pairs = []
        for path in files:
            if not by_hash:
                break
            if str(path) in known:
                continue
            try:
                digest = path_hash(path)
            except OSError:
                continue
            old = by_hash.pop(digest, None)
            if old is not None:
                pairs.append((old, str(path)))
        return pairs

    def apply(self, pairs: list[tuple[str, str]], report: IngestReport) -> set[str]:
        """On the writer: move the records of renamed files; returns the old paths moved."""
        moved = set()
        for old, new in pairs:
            if self.stores.rename(old, new, self.header(old, new)):
                moved.add(old)
                report.renamed += 1
        return moved

    def rename(self, old: str, new: str) -> tuple[bool, bool]:
        """Move a file's record (`old` and `new` absolute): (whether it moved, whether it must
        be read again, its chunks' headers naming the old file)."""
        header = self.header(old, new)
        moved = self.stores.writer.call(lambda: self.stores.rename(old, new, header),
                                        key=("rename", old, new))
        record = self.store.file(new) if moved and header else None
        reread = (record is not None and record.state == "indexed" and not record.hash
                  and os.path.isfile(new))
        return moved, reread

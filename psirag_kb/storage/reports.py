"""Reports over the files table: files per state and encoding, problems, unavailable files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from psirag_kb.storage.records import NOTE_SEP, FileRecord


class Reports:
    """The status reports of a store (a base of `Store`, which gives the reading connection)."""

    def reader(self) -> duckdb.DuckDBPyConnection:
        """The connection for reads (given by `Store`)."""
        raise NotImplementedError

    def state_counts(self, within: Sequence[str] | None = None) -> dict[str, int]:
        """Number of files per state (only files that are, or lie below, one of the absolute
        paths `within` when given); "unavailable" only when there are some."""
        counts = {"indexed": 0, "skipped": 0, "failed": 0}
        where, params = _below(within)
        for state, count in self.reader().execute(
            f"SELECT state, count(*) FROM files WHERE {where} GROUP BY state", params
        ).fetchall():
            counts[state] = int(count)
        return counts

    def encodings(self, within: Sequence[str] | None = None) -> dict[str, int]:
        """Indexed files per legacy encoding they were decoded from (UTF-8 and documents whose
        readers decode them are left out), only below the absolute paths `within` when given."""
        where, params = _below(within)
        rows = self.reader().execute(
            "SELECT encoding, count(*) FROM files WHERE state = 'indexed' AND coalesce(encoding, "
            f"'') NOT IN ('', 'utf-8') AND {where} GROUP BY encoding ORDER BY encoding", params,
        ).fetchall()
        return {encoding: int(count) for encoding, count in rows}

    def problems(self, limit: int = 1000,
                 within: Sequence[str] | None = None) -> list[FileRecord]:
        """Skipped and failed files with their reasons, and indexed files with a note (PDF
        pages that need OCR), only below the absolute paths `within` when given; unavailable
        files are summed up by `unavailable`."""
        where, params = _below(within)
        rows = self.reader().execute(
            "SELECT id, path, origin, hash, size, mtime, state, reason, chunks FROM files "
            "WHERE state <> 'unavailable' AND (state <> 'indexed' OR coalesce(reason, '') <> '') "
            f"AND {where} ORDER BY state, path LIMIT ?",
            [*params, limit],
        ).fetchall()
        return [FileRecord(*row) for row in rows]

    def unavailable(self, limit: int = 100,
                    within: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Unavailable files grouped by reason: {"reason", "files", "since"}, oldest first (only
        below the absolute paths `within` when given)."""
        where, params = _below(within)
        rows = self.reader().execute(
            "SELECT split_part(reason, ?, 1) AS why, count(*), min(updated) FROM files "
            f"WHERE state = 'unavailable' AND {where} GROUP BY why "
            "ORDER BY min(updated), why LIMIT ?",
            [NOTE_SEP, *params, limit],
        ).fetchall()
        return [{"reason": why, "files": int(count), "since": since}
                for why, count, since in rows]


def _below(within: Sequence[str] | None) -> tuple[str, list[str]]:
    """A WHERE clause (and its parameters) for files that are, or lie below, one of these
    absolute paths: true for None, false for none (corpus records lie in no folder)."""
    if within is None:
        return "TRUE", []
    if not within:
        return "FALSE", []
    tests = " OR ".join(["path = ? OR starts_with(path, ?)"] * len(within))
    return (f"origin = 'file' AND ({tests})",
            [v for p in within for v in (p, p.rstrip("/") + "/")])

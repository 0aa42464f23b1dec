"""Small helpers over DuckDB cursors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb


def scalar(db: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row of a query that always returns one (an aggregate)."""
    row = db.execute(sql, list(params)).fetchone()
    if row is None:
        raise LookupError(f"no row from {sql!r}")
    return row[0]

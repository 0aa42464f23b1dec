"""The audit trail: a JSON line per request in audit.jsonl (data directory), rotated by size."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

AUDIT_FILE = "audit.jsonl"


class AuditLog:
    """Appends {time, person, action[, client], scope, results[, query]} lines (mode 0600); past
    `max_bytes` the file becomes audit.1.jsonl and older ones shift, `backups` kept.

    A lock around one buffered write per line: a request thread waits only for other lines.
    """

    def __init__(self, data_dir: Path | str, max_bytes: int = 10_000_000, backups: int = 5,
                 queries: bool = False) -> None:
        self.path = Path(data_dir) / AUDIT_FILE
        self.max_bytes = max_bytes
        self.backups = backups
        self.queries = queries
        self._lock = threading.Lock()
        self._handle: Any = None
        self._size = 0

    def _open(self) -> None:
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._handle = os.fdopen(descriptor, "a", encoding="utf-8")
        self._size = os.fstat(descriptor).st_size

    def _rotate(self) -> None:
        self._handle.close()
        self._handle = None
        for number in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"audit.{number}.jsonl")
            if older.exists():
                os.replace(older, self.path.with_name(f"audit.{number + 1}.jsonl"))
        if self.backups > 0:
            os.replace(self.path, self.path.with_name("audit.1.jsonl"))
        else:
            self.path.unlink(missing_ok=True)

    def record(self, person: str | None, action: str,
               scope: Sequence[str] | str | int | None = None, results: int | None = None,
               query: str | None = None, status: int | None = None,
               client: str | None = None) -> None:
        """Append one line (the query text only when [api] audit_queries is on; person None:
        a token nobody holds, with the client's address)."""
        line: dict[str, Any] = {"time": round(time.time(), 3), "person": person,
                                "action": action}
        if client is not None:
            line["client"] = client
        if scope is not None:
            line["scope"] = list(scope) if isinstance(scope, list | tuple) else scope
        if results is not None:
            line["results"] = results
        if status is not None:
            line["status"] = status
        if query is not None and self.queries:
            line["query"] = query
        text = json.dumps(line, ensure_ascii=False) + "\n"
        try:
            with self._lock:
                if self._handle is None:
                    self._open()
                elif self._size + len(text) > self.max_bytes > 0:
                    self._rotate()
                    self._open()
                self._handle.write(text)
                self._handle.flush()
                self._size += len(text.encode("utf-8"))
        except OSError:  # a full disk must not fail the request it records
            log.warning("cannot append to %s", self.path, exc_info=True)

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

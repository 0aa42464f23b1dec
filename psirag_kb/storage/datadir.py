"""Who owns a data directory: an flock on `daemon.lock` naming the holder's pid and role.

The daemon holds it for its whole life, from its first instant; a command that opens the stores
in-process holds it while it runs. A daemon waits for a command to finish; a command that finds
the daemon there talks to its API instead of opening the stores.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psirag_kb.errors import KBError

log = logging.getLogger(__name__)

LOCK_FILE = "daemon.lock"
"""In the data directory: holds "pid role" of the process that owns it."""
DAEMON = "daemon"
COMMAND = "command"


class DaemonError(KBError):
    """The daemon cannot start (data directory taken, port in use)."""


@dataclass(frozen=True)
class Holder:
    """The process holding a data directory."""

    pid: int
    role: str


def _parse(text: str) -> Holder:
    parts = text.split()
    try:
        pid = int(parts[0])
    except (IndexError, ValueError):
        pid = -1
    return Holder(pid, parts[1] if len(parts) > 1 else DAEMON)


def holder(data_dir: Path) -> Holder | None:
    """Who holds the data directory now, or None when it is free."""
    path = Path(data_dir) / LOCK_FILE
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError:
        return None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _parse(handle.read())
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None
    finally:
        handle.close()


class DataDirLock:
    """An exclusive flock on `daemon.lock`; the lock of a killed process is free at once."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_FILE
        self._handle: Any = None

    def try_acquire(self, role: str = DAEMON) -> Holder | None:
        """Take the lock and return None, or return who holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.seek(0)
                found = _parse(handle.read())
                handle.close()
                return found
            try:  # the holder before us may have unlinked the file: lock the one at the path
                same = os.stat(self.path).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            handle.close()
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()} {role}\n")
        handle.flush()
        self._handle = handle
        return None

    def acquire(self, role: str = DAEMON, wait_s: float | None = 0.0,
                stop: threading.Event | None = None) -> None:
        """Take the lock, waiting up to `wait_s` (None: for ever) while a command holds it.

        Raises DaemonError naming the holder when a daemon holds it, or when the wait ends
        (its deadline, or `stop` set).
        """
        deadline = None if wait_s is None else time.monotonic() + wait_s
        said = 0.0
        while (found := self.try_acquire(role)) is not None:
            ended = (deadline is not None and time.monotonic() >= deadline) or (
                stop is not None and stop.is_set())
            if found.role == DAEMON or ended:
                what = "another daemon" if found.role == DAEMON else "a psirag-kb command"
                raise DaemonError(
                    f"{what} (pid {found.pid}) already owns {self.path.parent}; stop it with "
                    f"`kill {found.pid}` or use another --data-dir"
                )
            if time.monotonic() - said >= 10.0:
                said = time.monotonic()
                log.info("waiting for a psirag-kb command (pid %d) to finish with %s",
                         found.pid, self.path.parent)
            time.sleep(0.1)

    def release(self) -> None:
        """Drop the lock and its file."""
        if self._handle is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            self._handle.close()
            self._handle = None

"""Who owns a data directory: an flock on `daemon.lock` naming the holder's pid and role.

The daemon holds it for its whole life, from its first instant; a command that opens the stores
in-process holds it while it runs. A daemon waits for a command to finish; a command that finds
the daemon there talks to its API instead of opening the stores. A long-lived session (`mcp`,
`tui`) holding it in-process is asked to hand it over instead: the daemon writes
`takeover.request`, the session polls for it, closes its stores, releases the lock and goes on
through the daemon's API.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psirag_kb.errors import KBError

log = logging.getLogger(__name__)

LOCK_FILE = "daemon.lock"
"""In the data directory: holds "pid role [name]" of the process that owns it."""
TAKEOVER_FILE = "takeover.request"
"""In the data directory while a daemon waits for a session to hand it over: the daemon's pid."""
DAEMON = "daemon"
COMMAND = "command"
SESSION = "session"
"""An in-process `mcp` or `tui`: hands the data directory over to a daemon that asks."""


class DaemonError(KBError):
    """The daemon cannot start (data directory taken, port in use)."""


@dataclass(frozen=True)
class Holder:
    """The process holding a data directory."""

    pid: int
    role: str
    name: str = ""

    def describe(self) -> str:
        """Who this is, for messages: "psirag-kb mcp (pid 12)", "a psirag-kb command (pid 7)"."""
        if self.role == DAEMON:
            return f"the daemon (pid {self.pid})"
        if self.role == SESSION:
            return f"psirag-kb {self.name or 'session'} (pid {self.pid})"
        if self.name:
            return f"psirag-kb {self.name} (pid {self.pid})"
        return f"a psirag-kb command (pid {self.pid})"


def _parse(text: str) -> Holder:
    parts = text.split()
    try:
        pid = int(parts[0])
    except (IndexError, ValueError):
        pid = -1
    return Holder(pid, parts[1] if len(parts) > 1 else DAEMON, parts[2] if len(parts) > 2 else "")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def request_takeover(data_dir: Path) -> None:
    """Ask the session holding the data directory to hand it over to this process."""
    path = Path(data_dir) / TAKEOVER_FILE
    temporary = path.with_name(f"{TAKEOVER_FILE}.{os.getpid()}")
    temporary.write_text(f"{os.getpid()}\n", encoding="utf-8")
    os.replace(temporary, path)


def takeover_requested(data_dir: Path) -> int | None:
    """The pid of a live process waiting to take the data directory over, if any."""
    path = Path(data_dir) / TAKEOVER_FILE
    try:
        pid = int(path.read_text(encoding="utf-8").split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid_alive(pid) else None


def clear_takeover(data_dir: Path) -> None:
    """Withdraw this process's takeover request (another's is left alone)."""
    path = Path(data_dir) / TAKEOVER_FILE
    try:
        if int(path.read_text(encoding="utf-8").split()[0]) == os.getpid():
            path.unlink(missing_ok=True)
    except (OSError, ValueError, IndexError):
        pass


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

    def try_acquire(self, role: str = DAEMON, name: str = "") -> Holder | None:
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
        handle.write(f"{os.getpid()} {role} {name}".rstrip() + "\n")
        handle.flush()
        self._handle = handle
        return None

    def acquire(self, role: str = DAEMON, wait_s: float | None = 0.0,
                stop: threading.Event | None = None,
                waiting: Callable[[Holder], None] | None = None) -> None:
        """Take the lock, waiting up to `wait_s` (None: for ever) while a command holds it; a
        daemon asks a session (`mcp`, `tui`) holding it to hand it over. `waiting(holder)` is
        told whom each round of the wait is for (it may raise to end the wait).

        Raises DaemonError naming the holder when a daemon holds it, or when the wait ends
        (its deadline, or `stop` set).
        """
        deadline = None if wait_s is None else time.monotonic() + wait_s
        said = 0.0
        asked = False
        try:
            while (found := self.try_acquire(role)) is not None:
                ended = (deadline is not None and time.monotonic() >= deadline) or (
                    stop is not None and stop.is_set())
                if found.role != DAEMON and found.name == "restore" and ended:
                    raise DaemonError(f"stopped while waiting for {found.describe()} to finish "
                                      f"writing {self.path.parent}; start the daemon again once "
                                      "the restore has finished")
                if found.role == DAEMON or ended:
                    what = "another daemon" if found.role == DAEMON else found.describe()
                    raise DaemonError(
                        f"{what} (pid {found.pid}) already owns {self.path.parent}; stop it "
                        f"with `kill {found.pid}` or use another --data-dir"
                        if found.role == DAEMON else
                        f"{what} still holds {self.path.parent}; stop it with "
                        f"`kill {found.pid}` or use another --data-dir"
                    )
                if waiting is not None:
                    waiting(found)
                if (found.role == SESSION and role == DAEMON
                        and takeover_requested(self.path.parent) != os.getpid()):
                    request_takeover(self.path.parent)
                    asked = True
                    log.info("asking %s to hand %s over", found.describe(), self.path.parent)
                elif time.monotonic() - said >= 10.0:
                    said = time.monotonic()
                    log.info("waiting for %s to finish with %s", found.describe(),
                             self.path.parent)
                time.sleep(0.1)
        finally:
            if asked:
                clear_takeover(self.path.parent)

    def release(self) -> None:
        """Drop the lock and its file."""
        if self._handle is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            self._handle.close()
            self._handle = None

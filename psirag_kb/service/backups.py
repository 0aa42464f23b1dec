"""Backups asked for over the API: named, never placed; each lands in the daemon's
[backup] dir, the one folder outside the data directory the configuration lets it write."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from psirag_kb.service.guard import HTTPError
from psirag_kb.storage.backup import backup_name

__all__ = ["NO_DIR", "NamedBackups"]

NO_DIR = ("this daemon takes backups over its API only into its [backup] dir, and none is set: "
          "set [backup] dir = \"/an/absolute/folder\" (best on another disk) in its config.toml "
          "and restart it; `psirag-kb backup DEST` at the daemon's machine then moves a backup "
          "from there to DEST")


class NamedBackups:
    """The folder a named backup goes to, one backup at a time."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder).expanduser() if folder else None
        self._one = threading.Lock()

    def target(self, name: str) -> Path:
        """[backup] dir / `name`: 409 when no dir is configured or the name is taken, a
        BackupError (400) for a name that is not one."""
        if self.folder is None:
            raise HTTPError(409, NO_DIR)
        backup_name(name)
        target = self.folder / name
        if os.path.lexists(target) or os.path.lexists(self.folder / f"{name}.partial"):
            raise HTTPError(409, f"a backup named {name!r} is in [backup] dir already; give "
                                 "another name")
        self.folder.mkdir(parents=True, exist_ok=True)
        return target

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Held while a named backup is taken (409 when one is under way)."""
        if not self._one.acquire(blocking=False):
            raise HTTPError(409, "a backup is being taken; retry once it is done")
        try:
            yield
        finally:
            self._one.release()

"""Folders that vanished (an unmounted drive, a moved share): their files kept unavailable."""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from psirag_kb.ingest.report import IngestReport
from psirag_kb.paths import inside
from psirag_kb.storage.records import UNAVAILABLE, FileRecord

if TYPE_CHECKING:
    from psirag_kb.config import Config
    from psirag_kb.storage.store import Store
    from psirag_kb.tree.stores import Stores

log = logging.getLogger(__name__)


def empty(folder: Path) -> bool:
    """Whether a folder is missing or holds no entry at all (an unmounted drive's mount point)."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return True


def gone_reason(folder: Path) -> str:
    """Why a vanished folder's files are unavailable."""
    if folder.is_dir():
        return f"folder {folder} is empty (a drive or share not mounted?)"
    return f"folder {folder} is missing (moved, or a drive or share not mounted?)"


class Vanished:
    """Tells deleted files from those of a vanished folder, and marks the latter unavailable."""

    def __init__(self, config: Config, stores: Stores) -> None:
        self.config = config
        self.stores = stores

    @property
    def store(self) -> Store:
        """The DuckDB store."""
        return self.stores.store

    def missing(self, path: Path, known: list[FileRecord], keep_vanished: bool,
                vanished: dict[str, str], report: IngestReport) -> list[str]:
        """A named path that does not exist: a file is removed; a folder's files are kept as
        unavailable (unless the watcher saw a small folder go: then they are removed)."""
        if known[0].path == str(path):
            return [str(path)]
        indexed = [r.path for r in known if r.state == "indexed"]
        kept = sum(r.state in ("indexed", UNAVAILABLE) for r in known)
        if keep_vanished and kept < self.config.ingest.vanished_folder_min_files:
            return [r.path for r in known]
        reason = gone_reason(path)
        vanished.update(dict.fromkeys(indexed, reason))
        if not keep_vanished:
            report.problems.append((str(path), UNAVAILABLE, (
                f"{reason}: its {len(known)} indexed file(s) stay searchable as unavailable "
                f"until it returns; `psirag-kb forget {path}` removes them")))
        return []

    def below(self, folder: Path, gone: list[FileRecord], vanished: dict[str, str]) -> list[str]:
        """Split the known files missing from a walked folder: those whose folder vanished as a
        whole (the walked folder itself empty, or a folder below it missing or empty that held
        [ingest] vanished_folder_min_files or more) go to `vanished`; the rest are returned, to
        be removed. Costs one check per folder of the missing files."""
        emptied: dict[Path, bool] = {}
        groups: dict[Path, list[FileRecord]] = defaultdict(list)
        removals: list[str] = []
        for record in gone:
            ancestor = folder
            for part in (None, *Path(record.path).relative_to(folder).parts[:-1]):
                ancestor = ancestor if part is None else ancestor / part
                if ancestor not in emptied:
                    emptied[ancestor] = empty(ancestor)
                if emptied[ancestor]:
                    groups[ancestor].append(record)
                    break
            else:
                removals.append(record.path)  # its folder is there: the file was deleted
        least = self.config.ingest.vanished_folder_min_files
        for top, records in groups.items():
            indexed = [r.path for r in records if r.state == "indexed"]
            kept = sum(r.state in ("indexed", UNAVAILABLE) for r in records)
            if top != folder and kept < least:
                removals.extend(r.path for r in records)
            else:
                vanished.update(dict.fromkeys(indexed, gone_reason(top)))
        return removals

    def mark_unavailable(self, vanished: dict[str, str], report: IngestReport) -> None:
        """Mark files whose folder vanished unavailable, one update per reason."""
        by_reason: dict[str, list[str]] = defaultdict(list)
        for path, reason in vanished.items():
            by_reason[reason].append(path)
        for reason, paths in by_reason.items():
            marked = self.store.mark_unavailable(paths, reason)
            report.unavailable += marked
            if marked:
                log.info("%d file(s) unavailable: %s", marked, reason)

    def vanish(self, folders: Iterable[Path | str]) -> int:
        """Mark the indexed files of watched folders that vanished unavailable (their chunks
        stay searchable); returns how many were marked."""
        keys = [Path(os.path.abspath(f)) for f in folders]

        def run() -> int:
            report = IngestReport()
            for folder in keys:
                paths = [r.path for r in self.store.files(str(folder)) if r.state == "indexed"]
                self.mark_unavailable(dict.fromkeys(paths, gone_reason(folder)), report)
            return report.unavailable

        return self.stores.writer.call(run, key=("vanish", tuple(map(str, keys))))

    def forget_unwatched(self, folders: Iterable[Path | str]) -> int:
        """Record the watched folders; remove the unavailable files of folders watched the
        last time and not now (they could only come back through the watcher)."""
        now = [os.path.abspath(f) for f in folders]

        def run() -> int:
            before = json.loads(self.store.meta().get("watched_folders", "[]"))
            dropped = [f for f in before if not any(inside(Path(f), Path(n)) for n in now)]
            targets = [r.path for f in dropped for r in self.store.files(f)
                       if r.state == UNAVAILABLE]
            if targets:
                self.stores.apply([], targets)
                log.warning("forgot %d unavailable file(s) of folder(s) no longer watched: %s",
                            len(targets), ", ".join(dropped))
            self.store.set_meta_value("watched_folders", json.dumps(now))
            return len(targets)

        return self.stores.writer.call(run, key="forget-unwatched")

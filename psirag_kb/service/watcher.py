"""Folder watcher: watchdog events become debounced, coalesced ingest, remove and rename calls.

A file is read as soon as its writer closes it (inotify's close-after-write) or renames it into
place; changes that bring no close (polled folders, a path truncated, a writer that keeps the
file open) wait for the quiet period, and a file its writer still holds open after writing is
not read before it is closed or OPEN_WAIT_S have passed. A file that changes while it is read
is read again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers.inotify import InotifyObserver
from watchdog.observers.polling import PollingObserver

from psirag_kb.errors import Cancelled
from psirag_kb.ingest.documents import is_supported, link_inside
from psirag_kb.ingest.ingestion import SMALL_INGEST
from psirag_kb.ingest.report import Progress
from psirag_kb.paths import inside
from psirag_kb.service.mounts import MOUNTINFO, poll_reason

log = logging.getLogger(__name__)

BATCH_PATHS = 64
"""Files handed to one ingest call, so queries and shutdown get a turn between batches."""
ROOT_CHECK_S = 1.0
"""Seconds between checks that the watched folders still exist."""
REFRESH_GAP_S = 1.0
"""Least seconds between two fresh watches of a folder, and how long the old watch keeps
reporting after it (longer than watchdog's 0.5 s wait to pair the halves of a move)."""
EVENT_TYPES = frozenset({"created", "modified", "deleted", "moved", "closed"})
OPEN_WAIT_S = 30.0
"""Longest wait for the close of a file its writer keeps open after writing to it (a log, a
database): then it is read as it is, once quiet, and read again when it is closed."""
REMOVAL_WAIT_S = 0.2
"""How long a path gone on an inotify-watched folder waits for a file to take its place (an
editor that moves the old file away, then writes the new one), so the two are one update."""


Stopping = Cancelled
"""Raised from an ingest progress callback to stop after the committed batch: the same
exception the writer raises when the knowledge base closes mid-ingest, so both end a run quietly."""


Signature = tuple[int, int, int]


@dataclass
class _Pending:
    """A path waiting to be read: when to look again, what it looked like, whether its writer
    closed it (read at once) and since when a writer holds it open after writing (or None)."""

    due: float
    signature: Signature | None
    closed: bool = False
    writing: float | None = None
    held: bool = False
    """Quiet for the quiet period but not read: its writer has not closed it yet."""


def signature(path: Path) -> Signature | None:
    """(size, mtime in ns, inode) of a path, or None when it does not exist."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a path: a folder deleted and created again is a new folder."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _linked_folder(path: Path) -> bool:
    """Whether a path is a symlink to a folder, which is not followed (as in a full scan)."""
    return path.is_symlink() and path.is_dir()


class _Handler(FileSystemEventHandler):
    """Forwards the event types that matter to the watcher, saying whether inotify saw them
    (a poll sees no opens and closes)."""

    def __init__(self, watcher: FolderWatcher, inotify: bool = True) -> None:
        self.watcher = watcher
        self.inotify = inotify

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in EVENT_TYPES:
            self.watcher.on_event(event, self.inotify)


class FolderWatcher:
    """Watches folders recursively and keeps the knowledge base in step with them."""

    def __init__(self, kb: Any, folders: Sequence[Path], quiet_period_s: float,
                 data_dir: Path, poll: str = "auto", poll_interval_s: float = 10.0,
                 mountinfo: Path = MOUNTINFO, open_wait_s: float = OPEN_WAIT_S) -> None:
        self.kb = kb
        self.folders = [Path(os.path.abspath(f)) for f in folders]
        self.quiet = float(quiet_period_s)
        self.open_wait = float(open_wait_s)
        self.data_dir = Path(os.path.abspath(data_dir))
        self.errors: deque[dict[str, Any]] = deque(maxlen=50)
        self.processed = 0
        self.tracking: Callable[[str, Progress], AbstractContextManager[Progress]] = \
            lambda job, inner: nullcontext(inner)
        """Wraps the progress callback of a folder scan ("scan") and of a large set of files
        ("ingest") for the block that runs it: the daemon's `Activity.tracking` shows them."""
        self._pending: dict[Path, _Pending] = {}
        self._moves: list[tuple[Path, Path, bool]] = []
        self._scans: set[Path] = set()
        self._mutex = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._observer = InotifyObserver(generate_full_events=True)
        """Full events: a file moved in from outside the watched folders comes as a move
        (taken as its writer's close), not as a creation."""
        self.poll, self.poll_interval = poll, float(poll_interval_s)
        self._mountinfo = mountinfo
        self._poller = PollingObserver(timeout=self.poll_interval)
        """Watches the folders inotify cannot be trusted with: every poll_interval_s it stats
        each file and reports what changed as the same events, handled by the same rules."""
        self._polled: dict[Path, str] = {}
        """Watched folders that are polled, with the reason (see `poll_status`)."""
        self._watches: dict[Path, Any] = {}
        self._fresh: dict[Path, bool] = {}
        """Which of a folder's two spellings (without or with a trailing separator) its current
        watch uses: a refresh schedules the other one, a distinct watch, then drops the first."""
        self._arrived: set[Path] = set()
        """Folders created or moved in since their watched folder was last watched afresh."""
        self._refreshed: dict[Path, float] = {}
        self._retiring: list[tuple[float, Path, Any]] = []
        """(when to drop it, its folder, watch) of watches replaced by a fresh one."""
        self._identity: dict[Path, tuple[int, int] | None] = {}
        self._lost: set[Path] = set()
        self._absent: set[Path] = set()
        """Watched folders found missing, whose files were marked unavailable."""
        self._thread = threading.Thread(target=self._run, name="psirag-watcher", daemon=True)
        self._busy = False
        self._bulk: deque[tuple[list[Path], list[Path], list[Path]]] = deque()
        """Large work for the bulk thread: (folders to scan, files to ingest, paths gone)."""
        self._bulk_busy = False
        self._bulk_wake = threading.Event()
        self._bulk_thread = threading.Thread(target=self._run_bulk, name="psirag-watcher-bulk",
                                             daemon=True)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the observer and the worker thread."""
        for folder in self.folders:
            self._schedule(folder)
        self._observer.start()
        self._poller.start()
        self._thread.start()
        self._bulk_thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop watching; the worker finishes the batch it is committing."""
        self._stop.set()
        self._wake.set()
        self._bulk_wake.set()
        self._observer.stop()
        self._poller.stop()
        self._observer.join(timeout)
        self._poller.join(timeout)
        for thread in (self._thread, self._bulk_thread):
            if thread.is_alive():
                thread.join(timeout)

    def _schedule(self, folder: Path) -> None:
        """Watch one folder, unless it does not exist (it is checked again later)."""
        if not folder.is_dir():
            log.warning("watched folder %s does not exist; waiting for it", folder)
            return
        try:
            self._identity[folder] = _identity(folder)
            self._retire(folder)
            raw = str(folder) + (os.sep if self._fresh.get(folder, False) else "")
            reason = poll_reason(folder, self.poll, self._mountinfo)  # again: it may be remounted
            observer = self._poller if reason else self._observer
            if reason:
                self._polled[folder] = reason
            else:
                self._polled.pop(folder, None)
            self._watches[folder] = observer.schedule(_Handler(self, inotify=not reason), raw,
                                                      recursive=True)
            if reason:
                log.info("watching %s by polling every %.0f s: %s", folder, self.poll_interval,
                         reason)
            else:
                log.info("watching %s", folder)
        except OSError as exc:
            log.warning("cannot watch %s: %s", folder, exc)

    def _unschedule(self, folder: Path) -> None:
        self._drop(self._watches.pop(folder, None))

    def _drop(self, watch: Any) -> None:
        if watch is None:
            return
        for observer in (self._observer, self._poller):
            try:
                observer.unschedule(watch)
                return
            except (KeyError, OSError):  # the other observer's, or stopped with its folder
                continue

    def poll_status(self) -> list[dict[str, Any]]:
        """How each watched folder is watched: {"folder", "polled", "reason", "interval_s"}."""
        return [{"folder": str(folder), "polled": folder in self._polled,
                 "reason": self._polled.get(folder, "inotify"),
                 **({"interval_s": self.poll_interval} if folder in self._polled else {})}
                for folder in self.folders]

    def _refresh(self, folder: Path) -> None:
        """Watch a folder afresh, every folder below it included.

        watchdog can leave a folder unwatched for good when it is created inside a folder that
        is renamed before watchdog handles the creation (about one such folder in five in
        tests/reliability/test_watcher_storm.py): its later changes would never be seen. So
        after folders arrive, a second watch is scheduled (the folder spelled with a trailing
        separator, which watchdog keys apart); the first one keeps reporting for REFRESH_GAP_S
        so that no event in flight is lost, and events seen twice meanwhile coalesce.
        """
        old = self._watches.get(folder)
        if old is None or folder in self._polled:  # a poll sees every folder there is
            return
        self._retire(folder)  # an older watch spelled as the new one would be the same watch
        fresh = not self._fresh.get(folder, False)
        raw = str(folder) + (os.sep if fresh else "")
        try:
            self._watches[folder] = self._observer.schedule(_Handler(self, inotify=True), raw,
                                                            recursive=True)
        except OSError as exc:
            log.warning("cannot watch %s afresh: %s", folder, exc)
            return
        self._fresh[folder] = fresh
        self._retiring.append((time.monotonic() + REFRESH_GAP_S, folder, old))

    def _retire(self, folder: Path | None = None) -> None:
        """Drop the old watches that are due (all of a folder's, when one is given)."""
        now, kept = time.monotonic(), []
        for due, owner, watch in self._retiring:
            if owner == folder or due <= now:
                self._drop(watch)
            else:
                kept.append((due, owner, watch))
        self._retiring = kept

    def _settle_watches(self) -> list[Path]:
        """Drop retired watches; watch afresh the folders where folders arrived (at most once
        per REFRESH_GAP_S each). Returns the arrived folders, to be scanned after that."""
        self._retire()
        now = time.monotonic()
        rescan: list[Path] = []
        for folder in self.folders:
            mine = [p for p in self._arrived if p == folder or folder in p.parents]
            if not mine or now - self._refreshed.get(folder, -REFRESH_GAP_S) < REFRESH_GAP_S:
                continue
            self._refresh(folder)
            self._refreshed[folder] = now
            self._arrived.difference_update(mine)
            rescan.extend(mine)
        return rescan

    # -- queue ------------------------------------------------------------------------------

    @property
    def queue_size(self) -> int:
        """Paths waiting to be processed (including the one being processed)."""
        with self._mutex:
            return (len(self._pending) + len(self._moves) + len(self._scans) + int(self._busy)
                    + sum(len(s) + len(f) + len(m) for s, f, m in self._bulk)
                    + int(self._bulk_busy))

    def scan(self, folders: Iterable[Path] | None = None) -> None:
        """Queue a full ingest of folders (all watched ones by default)."""
        with self._mutex:
            self._scans.update(Path(f) for f in (self.folders if folders is None else folders))
        self._wake.set()

    def relevant(self, path: Path) -> bool:
        """Whether a path is inside a watched folder and not ignored or in the data directory."""
        if inside(path, self.data_dir):
            return False
        for folder in self.folders:
            if path == folder:
                return True
            if folder in path.parents:
                return not self.kb.ignored(path.relative_to(folder))
        return False

    def on_event(self, event: FileSystemEvent, inotify: bool = False) -> None:
        """Queue the paths an event concerns (called from the observer thread; `inotify`: the
        event comes from inotify, which reports closes, not from a poll)."""
        kind, is_dir = event.event_type, event.is_directory
        if kind == "moved" and not event.src_path:  # moved in from outside: a file arrived
            dest = Path(os.fsdecode(event.dest_path))
            if self.relevant(dest):
                self._touch(dest, closed=not is_dir)
            return
        src = Path(os.fsdecode(event.src_path))
        if kind == "moved" and not event.dest_path:
            kind = "deleted"  # moved out of the watched folders
        if kind == "modified" and is_dir:
            return
        if kind in ("deleted", "moved") and src in self.folders:
            self._lost.add(src)  # its inotify watch is gone even if the folder comes back
        removal = REMOVAL_WAIT_S if inotify else None
        if kind != "moved":
            if self.relevant(src):
                self._touch(src, closed=kind == "closed",
                            writing=inotify and kind == "modified",
                            wait=removal if kind == "deleted" else None)
            return
        dest = Path(os.fsdecode(event.dest_path))
        src_ok, dest_ok = self.relevant(src), self.relevant(dest)
        with self._mutex:
            self._pending.pop(src, None)
            if src_ok and dest_ok:
                self._moves.append((src, dest, is_dir))
        if src_ok and not dest_ok:
            self._touch(src, wait=removal)  # moved away or to an ignored name: a removal
        elif dest_ok and not src_ok:
            # an editor's temp file renamed over the real one: an update, complete
            self._touch(dest, closed=not is_dir)
        self._wake.set()

    def _touch(self, path: Path, closed: bool = False, writing: bool = False,
               wait: float | None = None) -> None:
        """(Re)start a path's wait; events for a queued path coalesce. A close (or a rename into
        place) makes it due at once; a write seen by inotify holds it until its close; `wait`
        shortens the quiet period."""
        now = time.monotonic()
        quiet = self.quiet if wait is None else min(wait, self.quiet)
        with self._mutex:
            entry = self._pending.get(path)
            since = entry.writing if entry is not None and entry.writing is not None else now
            self._pending[path] = _Pending(now if closed else now + quiet, signature(path),
                                           closed, since if writing else None)
        self._wake.set()

    def held_open(self) -> list[Path]:
        """Files quiet for the quiet period but not read, because their writer keeps them open
        (read when closed, or OPEN_WAIT_S after the first write)."""
        with self._mutex:
            return sorted(path for path, entry in self._pending.items() if entry.held)

    def _take(self) -> tuple[list[tuple[Path, Path, bool]], list[Path], list[Path], float]:
        """Moves, scans, the files their writers closed, and the paths whose size and mtime
        held still for the quiet period (unless a writer still holds them open)."""
        now = time.monotonic()
        ready: list[Path] = []
        next_due = now + 0.5
        with self._mutex:
            moves, self._moves = self._moves, []
            scans, self._scans = sorted(self._scans), set()
            for path, entry in list(self._pending.items()):
                if entry.due > now:
                    next_due = min(next_due, entry.due)
                    continue
                if not entry.closed:
                    current = signature(path)
                    if current != entry.signature:
                        entry.signature, entry.due = current, now + self.quiet
                        next_due = min(next_due, entry.due)
                        continue
                    if entry.writing is not None and now < entry.writing + self.open_wait:
                        entry.due, entry.held = entry.writing + self.open_wait, True
                        next_due = min(next_due, entry.due)
                        continue
                ready.append(path)
                del self._pending[path]
            self._busy = bool(moves or scans or ready)
        return moves, scans, ready, next_due

    # -- worker -----------------------------------------------------------------------------

    def _run(self) -> None:
        """Process ready paths until stopped; one bad path never stops the loop."""
        last_check = 0.0
        while not self._stop.is_set():
            if time.monotonic() - last_check >= ROOT_CHECK_S:
                last_check = time.monotonic()
                self._check_roots()
            if self._arrived or self._retiring:
                arrived = self._settle_watches()
                if arrived:
                    self.scan(arrived)
            moves, scans, ready, next_due = self._take()
            if moves or scans or ready:
                try:
                    self._process(moves, scans, ready)
                except Stopping:
                    break
                finally:
                    with self._mutex:
                        self._busy = False
                continue
            self._wake.wait(max(0.01, min(next_due - time.monotonic(), ROOT_CHECK_S)))
            self._wake.clear()

    def _run_bulk(self) -> None:
        """The bulk thread: folder scans and large sets of files, one after another, while
        the watcher thread goes on with moves, removals and a few edited files at a time."""
        while not self._stop.is_set():
            with self._mutex:
                work = self._bulk.popleft() if self._bulk else None
                self._bulk_busy = work is not None
            if work is None:
                self._bulk_wake.wait(ROOT_CHECK_S)
                self._bulk_wake.clear()
                continue
            scans, files, missing = work
            try:
                if missing and files and self._ingest_with_removals(missing, files):
                    files = missing = []
                if missing:
                    self._remove(missing)
                if scans:
                    present = [s for s in scans if s.is_dir()]
                    with self.tracking("scan", self.check_stop) as progress:
                        report = self._guard("scan", ", ".join(map(str, present)),
                                             self.kb.ingest, present, progress, True)
                    self._log_report("scanned " + ", ".join(map(str, present)), report)
                if files:
                    with self.tracking("ingest", self.check_stop) as progress:
                        for start, batch in _batches(files, BATCH_PATHS):
                            self._ingest(batch, _offset(progress, start, len(files)))
            except Stopping:
                break
            finally:
                with self._mutex:
                    self._bulk_busy = False

    def _hand_over(self, scans: list[Path], files: list[Path], missing: list[Path]) -> None:
        """Queue large work for the bulk thread."""
        with self._mutex:
            self._bulk.append((scans, files, missing))
        self._bulk_wake.set()

    def _check_roots(self) -> None:
        """Notice watched folders that vanished (their files become unavailable, not removed)
        or came back (rescanned: unchanged files are indexed again without being embedded)."""
        for folder in self.folders:
            present = folder.is_dir()
            replaced = folder in self._lost or _identity(folder) != self._identity.get(folder)
            if present and folder in self._watches and replaced:
                log.warning("watched folder %s was replaced (remounted?): rescanning", folder)
                self._unschedule(folder)
            self._lost.discard(folder)
            if folder in self._watches and not present:
                log.warning("watched folder %s disappeared", folder)
                self._unschedule(folder)
            if not present and folder not in self._absent:
                self._absent.add(folder)
                marked = self._guard("vanish", folder, self.kb.vanish, [folder])
                if marked:
                    log.warning("watched folder %s is missing: %d file(s) kept as unavailable",
                                folder, marked)
            elif folder not in self._watches and present:
                log.info("watched folder %s is back: rescanning", folder)
                self._absent.discard(folder)
                self._schedule(folder)
                self.scan([folder])

    def check_stop(self, done: int, total: int, current: str) -> None:
        """Ingest progress callback: stop after the committed batch when shutting down."""
        if self._stop.is_set():
            raise Stopping(current)

    def _guard(self, what: str, path: Path | str, func: Any, *args: Any) -> Any:
        """Run one path's operation, logging and recording an error instead of raising it."""
        try:
            return func(*args)
        except Stopping:
            raise
        except Exception as exc:  # noqa: BLE001 - one bad path never stops the loop
            log.exception("%s %s failed", what, path)
            self.errors.append({"path": str(path), "action": what, "error": str(exc),
                                "time": time.time()})
            return None

    def _process(self, moves: list[tuple[Path, Path, bool]], scans: list[Path],
                 ready: list[Path]) -> None:
        """Apply moves, then folder scans, removals and file updates."""
        self._arrived.update(p for p in [*(d for _, d, is_dir in moves if is_dir), *ready]
                             if p.is_dir() and not _linked_folder(p))
        scans.extend(self._settle_watches())
        files: list[Path] = []
        for src, dest, is_dir in moves:
            self._guard("move", src, self._move, src, dest, is_dir, files, scans)
        missing: list[Path] = []
        for path in ready:
            if _linked_folder(path):
                continue
            if path.is_dir():
                scans.append(path)
            elif path.exists():
                files.append(path)
            else:
                missing.append(path)
        files = [f for f in dict.fromkeys(files)
                 if not _linked_folder(f) and not link_inside(f, self.folders)]
        gone = [folder for folder in self.folders if not folder.is_dir()]
        for folder in gone:  # a file gone with its watched folder: the folder moved
            if any(folder in path.parents for path in missing):
                self._lost.add(folder)  # so it is rescanned when it comes back
        # a vanished folder's files are kept as unavailable by _check_roots, never removed here
        # (their delete events may be taken before the folder's absence is noticed)
        missing = [p for p in missing
                   if p not in self.folders and not any(f in p.parents for f in gone)]
        present = [s for s in dict.fromkeys(scans) if s.is_dir() and not _linked_folder(s)]
        # a folder and one inside it are one scan: a walk that lists a file twice indexes it twice
        present = [s for s in present if not any(p in s.parents for p in present)]
        self.processed += len(ready) + len(moves) + len(present)
        # scans and many files go to the bulk thread: edits that follow are not held up by them
        if len(files) > SMALL_INGEST:  # a vanished file may be one of them, moved
            self._hand_over(present, files, missing)
            return
        if missing and files and self._ingest_with_removals(missing, files):
            files = missing = []
        if missing:
            self._remove(missing)
        if present:
            self._hand_over(present, [], [])
        for start in range(0, len(files), BATCH_PATHS):
            self._ingest(files[start:start + BATCH_PATHS])

    def _remove(self, missing: list[Path]) -> None:
        """Bring vanished paths up to date in one commit (a deleted file is removed, a large
        folder gone as a whole is kept as unavailable); if that fails, one path at a time."""
        try:
            report = self.kb.ingest(missing, self.check_stop, keep_vanished=True)
        except Stopping:
            raise
        except Exception:  # noqa: BLE001 - isolate the bad path below
            log.debug("removing %d paths at once failed; one by one", len(missing), exc_info=True)
            for path in missing:
                report = self._guard("remove", path, self.kb.ingest, [path], self.check_stop,
                                     True)
                self._log_report(f"{path} gone", report)
            return
        self._log_report(f"{len(missing)} path(s) gone", report)

    def _ingest_with_removals(self, missing: list[Path], files: list[Path]) -> bool:
        """One ingest of vanished and new files, so a move seen as delete + create keeps leaves.

        (The knowledge base matches a vanished file and a new one by content hash.) False when
        the call fails as a whole, e.g. because a vanished path was a folder or never indexed.
        """
        before = {path: signature(path) for path in files}
        try:
            report = self.kb.ingest([*missing, *files], self.check_stop, keep_vanished=True)
        except Stopping:
            raise
        except Exception:  # noqa: BLE001 - the caller falls back to one path at a time
            log.debug("combined ingest failed; handling paths one by one", exc_info=True)
            return False
        self._log_report(f"{len(files)} file(s), {len(missing)} gone", report)
        self._read_again(before)
        return True

    def _read_again(self, before: dict[Path, Signature | None]) -> None:
        """Queue again the files that changed while they were read (size, mtime or inode moved
        on), unless an event queued them already: a change with no event is not lost."""
        changed = [path for path, seen in before.items()
                   if seen is not None and signature(path) != seen]
        with self._mutex:
            changed = [path for path in changed if path not in self._pending]
        for path in changed:
            log.info("%s changed while it was read: reading it again", path)
            self._touch(path)

    def _ingest(self, batch: list[Path], progress: Progress | None = None) -> None:
        """Ingest a batch; if the call fails as a whole, retry each path on its own."""
        before = {path: signature(path) for path in batch}
        try:
            report = self.kb.ingest(batch, progress or self.check_stop, keep_vanished=True)
        except Stopping:
            raise
        except Exception:  # noqa: BLE001 - isolate the bad path below
            log.debug("batch ingest failed; retrying path by path", exc_info=True)
            for path in batch:
                if path.exists():
                    report = self._guard("ingest", path, self.kb.ingest, [path])
                else:
                    report = None
                    self._guard("remove", path, self.kb.remove, [path])
                self._log_report(str(path), report)
            self._read_again(before)
            return
        self._log_report(f"{len(batch)} file(s)", report)
        self._read_again(before)

    def _log_report(self, what: str, report: Any) -> None:
        if report is None:
            return
        for path, state, reason in getattr(report, "problems", []):
            if state == "failed":
                self.errors.append({"path": path, "action": "ingest", "error": reason,
                                    "time": time.time()})
        log.info("%s: added %d, updated %d, unchanged %d, removed %d, renamed %d, "
                 "unavailable %d, restored %d", what, report.added, report.updated,
                 report.unchanged, report.removed, report.renamed,
                 getattr(report, "unavailable", 0), getattr(report, "restored", 0))

    def _move(self, src: Path, dest: Path, is_dir: bool, files: list[Path],
              scans: list[Path]) -> None:
        """A file or folder moved inside the watched folders: keep its leaves, change paths."""
        if not is_dir:
            if is_supported(dest) and self.kb.rename(src, dest):
                log.info("renamed %s -> %s", src, dest)
            elif not src.exists():
                self.kb.remove([src])
            files.append(dest)
            return
        for root, dirs, names in os.walk(dest):
            dirs[:] = [d for d in dirs if not self.kb.ignored(Path(d))]
            for name in names:
                new = Path(root) / name
                if not self.kb.ignored(Path(name)):
                    self.kb.rename(src / new.relative_to(dest), new)
        self.kb.remove([src])
        scans.append(dest)


def _batches(items: list[Path], size: int) -> Iterator[tuple[int, list[Path]]]:
    """(offset, slice) of consecutive slices of `size` items."""
    for start in range(0, len(items), size):
        yield start, items[start:start + size]


def _offset(progress: Progress, start: int, total: int) -> Progress:
    """A batch's progress callback reporting the whole set's: `start` files came before it."""
    return lambda done, _, current: progress(start + done, total, current)

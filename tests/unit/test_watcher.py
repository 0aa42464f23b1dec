"""The watcher's debounce, coalescing, moves and error isolation against a recording fake KB."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import wait_for
from waiting import ManualClock

from psirag_kb.ingest.report import IngestReport
from psirag_kb.service.watcher import FolderWatcher

QUIET = 0.3
OPEN = 30.0


class RecordingKB:
    """Records ingest/remove/rename/vanish calls; a path named 'bad.md' makes ingest raise; an
    ingest of paths that no longer exist is recorded as a "remove" of them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.known: set[str] = set()
        self.mutex = threading.Lock()

    def ignored(self, path: Path) -> bool:
        return any(p.startswith(".") or p.endswith((".tmp", ".swp")) for p in path.parts)

    def ingest(self, paths: list[Path], progress: Callable | None = None,
               keep_vanished: bool = False) -> IngestReport:
        paths = [Path(p) for p in paths]
        if any(p.name == "bad.md" for p in paths):
            raise RuntimeError("cannot parse")
        gone = [p for p in paths if not p.exists()]
        if gone:
            self.remove(gone)
        with self.mutex:
            self.calls.append(("ingest", sorted(str(p) for p in paths)))
            self.known.update(str(p) for p in paths if p.is_file())
        return IngestReport(added=len(paths))

    def remove(self, paths: list[Path]) -> int:
        with self.mutex:
            self.calls.append(("remove", [str(p) for p in paths]))
            gone = [k for k in self.known if any(k == str(p) or k.startswith(f"{p}/")
                                                 for p in paths)]
            self.known.difference_update(gone)
        return len(gone)

    def vanish(self, folders: list[Path]) -> int:
        with self.mutex:
            self.calls.append(("vanish", [str(p) for p in folders]))
            kept = [k for k in self.known if any(k.startswith(f"{p}/") for p in folders)]
            self.known.difference_update(kept)
        return len(kept)

    def rename(self, old: Path, new: Path) -> bool:
        with self.mutex:
            self.calls.append(("rename", (str(old), str(new))))
            if str(old) not in self.known:
                return False
            self.known.discard(str(old))
            self.known.add(str(new))
        return True

    def of(self, kind: str) -> list[Any]:
        with self.mutex:
            return [args for name, args in self.calls if name == kind]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[FolderWatcher, RecordingKB, Path]]:
    folder = tmp_path / "docs"
    folder.mkdir()
    kb = RecordingKB()
    watcher = FolderWatcher(kb, [folder], QUIET, tmp_path / "docs" / ".data")
    watcher.start()
    yield watcher, kb, folder
    watcher.stop()


def ingested(kb: RecordingKB) -> list[str]:
    return [p for batch in kb.of("ingest") for p in batch]


@pytest.fixture
def frozen(tmp_path: Path, monkeypatch) -> Iterator[tuple[FolderWatcher, RecordingKB, Path,
                                                          ManualClock]]:
    """A watcher whose clock moves only by hand: a quiet period never ends by itself."""
    clock = ManualClock()
    monkeypatch.setattr(f"{FolderWatcher.__module__}.time", clock)
    folder = tmp_path / "docs"
    folder.mkdir()
    kb = RecordingKB()
    watcher = FolderWatcher(kb, [folder], QUIET, tmp_path / "docs" / ".data", open_wait_s=OPEN)
    watcher.start()
    yield watcher, kb, folder, clock
    watcher.stop()


def test_a_file_closed_by_its_writer_is_read_at_once(frozen) -> None:
    watcher, kb, folder, clock = frozen
    note = folder / "note.md"
    note.write_text("written and closed")
    wait_for(lambda: str(note) in ingested(kb), what="read on its close")
    assert watcher.queue_size == 0


def test_writes_through_an_open_file_are_one_read_at_its_close(frozen) -> None:
    watcher, kb, folder, clock = frozen
    target = folder / "a.md"
    with target.open("w") as handle:
        for n in range(5):  # five writes 50 ms apart on the watcher's clock, the file open
            handle.write(f"part {n}\n")
            handle.flush()
            clock.now += 0.05
        # inotify reports in order: once a note closed after them is read, every event of the
        # five writes has been handled
        (folder / "later.md").write_text("written after the five")
        wait_for(lambda: str(folder / "later.md") in ingested(kb))
        clock.now += QUIET + 0.05  # past the quiet period of the last write
        wait_for(lambda: watcher.held_open() == [target], what="a.md held for its close")
        assert str(target) not in ingested(kb)  # half-written: never read
    wait_for(lambda: str(target) in ingested(kb) and watcher.queue_size == 0)
    assert ingested(kb).count(str(target)) == 1


def test_a_file_kept_open_is_read_after_the_open_wait_and_again_at_its_close(frozen) -> None:
    watcher, kb, folder, clock = frozen
    log_file = folder / "service.log"
    with log_file.open("w") as handle:
        handle.write("started\n")
        handle.flush()
        (folder / "marker.md").write_text("after the first write")
        wait_for(lambda: str(folder / "marker.md") in ingested(kb))
        clock.now += QUIET + 0.05
        wait_for(lambda: watcher.held_open() == [log_file])
        clock.now += OPEN  # its writer kept it open this long: read as it is
        wait_for(lambda: str(log_file) in ingested(kb), what="read after the open wait")
        assert watcher.held_open() == []
    wait_for(lambda: ingested(kb).count(str(log_file)) == 2, what="read again when closed")


def test_a_file_renamed_into_place_is_read_at_once(frozen, tmp_path: Path) -> None:
    watcher, kb, folder, clock = frozen
    temporary = folder / "note.md.tmp"  # an ignored name: the editor's temp file
    temporary.write_text("saved by an editor")
    os.replace(temporary, folder / "note.md")
    outside = tmp_path / "downloaded.md"  # moved in from outside the watched folder
    outside.write_text("moved in")
    os.rename(outside, folder / "downloaded.md")
    wait_for(lambda: {str(folder / "note.md"), str(folder / "downloaded.md")}
             <= set(ingested(kb)), what="both read without a quiet period")
    assert str(temporary) not in ingested(kb)


def test_a_file_changed_while_it_is_read_is_read_again(tmp_path: Path, monkeypatch) -> None:
    clock = ManualClock()
    monkeypatch.setattr(f"{FolderWatcher.__module__}.time", clock)
    folder = tmp_path / "docs"
    folder.mkdir()
    target = folder / "a.md"

    class ChangingKB(RecordingKB):
        """Its first read of a.md sees the file change underneath with no write event (only
        its mtime moves, as after an edit through a memory map)."""

        def ingest(self, paths: list[Path], progress: Callable | None = None,
                   keep_vanished: bool = False) -> IngestReport:
            report = super().ingest(paths, progress, keep_vanished)
            if ingested(self).count(str(target)) == 1:
                stat = target.stat()
                os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
            return report

    kb = ChangingKB()
    watcher = FolderWatcher(kb, [folder], QUIET, tmp_path / ".data")
    watcher.start()
    try:
        target.write_text("first")
        wait_for(lambda: str(target) in ingested(kb) and watcher.queue_size == 1,
                 what="queued again after its first read")
        clock.now += QUIET + 0.05
        wait_for(lambda: ingested(kb).count(str(target)) == 2, what="read again")
    finally:
        watcher.stop()


def test_ignored_and_data_dir_paths_are_not_processed(setup) -> None:
    watcher, kb, folder = setup
    (folder / ".data").mkdir()
    (folder / ".data" / "daemon.log").write_text("log")
    (folder / "draft.md.swp").write_text("swap")
    (folder / ".hidden.md").write_text("hidden")
    (folder / "real.md").write_text("real")
    wait_for(lambda: str(folder / "real.md") in ingested(kb))
    assert ingested(kb) == [str(folder / "real.md")]


def test_atomic_save_is_one_update(setup) -> None:
    watcher, kb, folder = setup
    target = folder / "note.md"
    target.write_text("old")
    wait_for(lambda: str(target) in ingested(kb))
    temporary = folder / "note.md.tmp"
    temporary.write_text("new")
    os.replace(temporary, target)
    wait_for(lambda: ingested(kb).count(str(target)) == 2)
    wait_for(lambda: watcher.queue_size == 0)
    assert str(temporary) not in ingested(kb)
    assert kb.of("rename") == []


def test_move_renames_and_delete_removes(setup) -> None:
    watcher, kb, folder = setup
    old, new = folder / "old.md", folder / "sub" / "new.md"
    new.parent.mkdir()
    old.write_text("text")
    wait_for(lambda: str(old) in kb.known)
    os.rename(old, new)
    wait_for(lambda: (str(old), str(new)) in kb.of("rename"))
    wait_for(lambda: str(new) in kb.known)
    new.unlink()
    wait_for(lambda: [str(new)] in kb.of("remove"))
    assert str(new) not in kb.known


def test_move_to_ignored_name_is_a_removal(setup) -> None:
    watcher, kb, folder = setup
    path = folder / "keep.md"
    path.write_text("text")
    wait_for(lambda: str(path) in kb.known)
    os.rename(path, folder / "keep.md.tmp")
    wait_for(lambda: [str(path)] in kb.of("remove"))


def test_deleted_folder_removes_everything_under_it(setup) -> None:
    watcher, kb, folder = setup
    sub = folder / "sub"
    sub.mkdir()
    for n in range(3):
        (sub / f"{n}.md").write_text(f"file {n}")
    wait_for(lambda: len(kb.known) == 3)
    for child in sub.iterdir():
        child.unlink()
    sub.rmdir()
    wait_for(lambda: not kb.known)


def test_one_bad_file_does_not_stop_the_loop(setup) -> None:
    watcher, kb, folder = setup
    (folder / "bad.md").write_text("x")
    (folder / "good.md").write_text("y")
    wait_for(lambda: str(folder / "good.md") in ingested(kb))
    wait_for(lambda: watcher.errors)
    assert watcher.errors[0]["path"] == str(folder / "bad.md")
    (folder / "later.md").write_text("z")
    wait_for(lambda: str(folder / "later.md") in ingested(kb))


def test_watched_folder_that_comes_back_is_rescanned(setup) -> None:
    watcher, kb, folder = setup
    (folder / "a.md").write_text("a")
    wait_for(lambda: kb.known)
    (folder / "a.md").unlink()
    folder.rmdir()
    wait_for(lambda: [str(folder)] in kb.of("vanish") and not kb.known)
    assert [str(folder)] not in kb.of("remove")  # its files are kept, as unavailable
    folder.mkdir()
    (folder / "b.md").write_text("b")
    wait_for(lambda: [str(folder)] in kb.of("ingest"))
    (folder / "c.md").write_text("c")
    wait_for(lambda: str(folder / "c.md") in ingested(kb))

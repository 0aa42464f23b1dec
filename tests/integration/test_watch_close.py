"""The daemon reads a file when its writer closes it or renames it into place (no quiet period),
never reads a file half-written while its writer keeps it open, and reads a file again when it
changed while it was read; real daemon, real MiniLM, real files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import api, wait_for, watching

from psirag_kb.config import Config
from psirag_kb.ingest import reading
from psirag_kb.service.daemon import Daemon

NEVER = 3600.0
"""A quiet period no test outlives: what is read was read because of its close or rename."""
SHORT = 0.2


def hits(daemon: Daemon, text: str, mode: str) -> list[tuple[str, str]]:
    """(source, text) of a query's results."""
    status, body = api(daemon, "POST", "/api/query", {"text": text, "mode": mode, "k": 5})
    assert status == 200, body
    return [(r["source"], r["text"]) for r in body["results"]]


def searchable(daemon: Daemon, path: Path, words: str) -> bool:
    """Whether both BM25 and the dense index return `path` with a text holding `words`."""
    return all(any(source == str(path) and words in text for source, text in hits(daemon, words,
                                                                                   mode))
               for mode in ("sparse", "dense"))


def start(config: Config, docs: Path, embedder: Any, quiet: float) -> Daemon:
    daemon = Daemon(watching(config, docs, quiet), embedder=embedder)
    daemon.start()
    wait_for(lambda: daemon.watcher.queue_size == 0, what="the start-up scan")
    return daemon


@pytest.fixture
def closing(config: Config, docs: Path, minilm) -> Iterator[Daemon]:
    daemon = start(config, docs, minilm, NEVER)
    yield daemon
    daemon.stop()


@pytest.fixture
def short(config: Config, docs: Path, minilm) -> Iterator[Daemon]:
    daemon = start(config, docs, minilm, SHORT)
    yield daemon
    daemon.stop()


def test_closed_and_renamed_files_are_searchable_without_the_quiet_period(
        closing: Daemon, docs: Path) -> None:
    note = docs / "harbour.md"
    note.write_text("The harbour clock of Vellmar counts hours backwards at noon.\n")
    wait_for(lambda: searchable(closing, note, "harbour clock of Vellmar"), timeout=60,
             what="read on its close")
    note.write_text("The granary roof of Ulvik holds copper weathervanes in a row.\n")
    wait_for(lambda: searchable(closing, note, "granary roof of Ulvik"), timeout=60)
    assert not searchable(closing, note, "harbour clock of Vellmar")
    temporary = docs / "harbour.md.tmp"  # an editor's temp file (an ignored name) renamed over
    temporary.write_text("The ferry bell of Tarsk rings nine times before the last crossing.\n")
    os.replace(temporary, note)
    wait_for(lambda: searchable(closing, note, "ferry bell of Tarsk"), timeout=60,
             what="read on the rename")
    note.unlink()
    wait_for(lambda: not closing.kb.is_indexed(note), timeout=60, what="removed")


def test_a_writer_pausing_mid_file_is_never_read_half_written(short: Daemon,
                                                              docs: Path) -> None:
    # What a writer that keeps the file open longer than the quiet period gets: the file waits
    # for its close (up to the watcher's OPEN_WAIT_S), so its first half is never indexed alone.
    report = docs / "report.md"
    with report.open("w") as handle:
        handle.write("The quay lantern of Orsk is painted green every spring.\n\n")
        handle.flush()
        wait_for(lambda: short.watcher.held_open() == [report],
                 what="held after its quiet period, its writer still writing")
        assert not short.kb.is_indexed(report)
        assert not any(source == str(report) for source, _ in hits(short, "quay lantern",
                                                                   "sparse"))
        handle.write("The ferry bell of Tarsk rings nine times before the last crossing.\n")
    wait_for(lambda: searchable(short, report, "ferry bell of Tarsk"), timeout=60)
    assert searchable(short, report, "quay lantern of Orsk")


def test_a_file_changed_while_it_is_read_is_read_again(short: Daemon, docs: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    minutes = docs / "minutes.md"
    real = reading.read_document
    raced: list[Path] = []

    def racing(path: Path, *args: Any, **kwargs: Any) -> Any:
        document = real(path, *args, **kwargs)
        if Path(path) == minutes and not raced:  # a writer saves again during the first read
            raced.append(path)
            minutes.write_text("Final minutes: the committee chose the greenhouse.\n")
        return document

    monkeypatch.setattr(reading, "read_document", racing)
    minutes.write_text("Draft minutes: the committee discussed the bicycle shed.\n")
    wait_for(lambda: raced and searchable(short, minutes, "the committee chose the greenhouse"),
             timeout=60)
    assert not any(source == str(minutes) for source, _ in hits(short, "bicycle shed", "sparse"))

"""The daemon polls its watched folder ([watch] poll = "always"): a change is indexed by the poll
alone (no inotify watch is scheduled), status says the folder is polled and why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_helpers import api, wait_for, watching

from psirag_kb.config import Config
from psirag_kb.service.daemon import Daemon

INTERVAL = 0.5


@pytest.fixture
def polled(config: Config, docs: Path, minilm) -> Iterator[Daemon]:
    settings = watching(config, docs, 0.2).replace("watch", poll="always",
                                                     poll_interval_s=INTERVAL)
    running = Daemon(settings, embedder=minilm)
    running.start()
    yield running
    running.stop()


def sources(daemon: Daemon, text: str) -> list[str]:
    status, body = api(daemon, "POST", "/api/query", {"text": text, "mode": "sparse", "k": 5})
    assert status == 200, body
    return [r["source"] for r in body["results"]]


def test_changes_on_a_polled_folder_are_indexed(polled: Daemon, docs: Path) -> None:
    status = api(polled, "GET", "/api/status")[1]
    assert status["daemon"]["watching"] == [{"folder": str(docs), "polled": True,
                                             "reason": '[watch] poll = "always"',
                                             "interval_s": INTERVAL}]
    assert not polled.watcher._observer.emitters  # inotify watches nothing: the poll does it
    wait_for(lambda: polled.watcher.queue_size == 0)  # the start-up scan is done
    note = docs / "share" / "minutes.md"
    note.parent.mkdir()
    note.write_text("The committee approved the new bicycle shed.\n")
    wait_for(lambda: str(note) in sources(polled, "bicycle shed committee"), timeout=60)
    note.write_text("The committee postponed the greenhouse.\n")
    wait_for(lambda: str(note) in sources(polled, "greenhouse postponed"), timeout=60)
    assert str(note) not in sources(polled, "bicycle shed")
    note.unlink()
    wait_for(lambda: str(note) not in sources(polled, "greenhouse postponed"), timeout=60)
    assert api(polled, "GET", "/api/status")[1]["files"]["indexed"] == 0


def test_status_on_the_command_line_names_polled_folders(polled: Daemon, docs: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    from psirag_kb.cli import main

    config_file = docs.parent / "config.toml"
    config_file.write_text(f'[storage]\ndata_dir = "{polled.data_dir}"\n')
    assert main(["--config", str(config_file), "status"]) == 0
    out = capsys.readouterr().out
    assert f"polled every {INTERVAL:g} s: {docs}: [watch] poll = \"always\"" in out

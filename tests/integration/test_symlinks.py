"""Symlinks that leave a watched or ingested folder are not followed (real files, real stores)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import api, wait_for

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.daemon import Daemon

QUIET = 0.2
SECRET = "The vault combination is kept by a quokka.\n"
OWN = "A plain note about the capybara.\n"


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """The folder that is ingested or watched, holding one ordinary note."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "own.md").write_text(OWN)
    return folder


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside that folder which must not become searchable through a link."""
    folder = tmp_path / "outside"
    folder.mkdir()
    path = folder / "secret.md"
    path.write_text(SECRET)
    return path


@pytest.fixture
def kb(config: Config, fake_embedder) -> Iterator[KnowledgeBase]:
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        yield kb


def found(kb: KnowledgeBase, text: str) -> set[str]:
    """Sources of every mode's results for a query."""
    return {r["source"] for mode in ("sparse", "dense", "hybrid")
            for r in kb.query(text, mode=mode, k=20)["results"]}


def problems(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """path -> (state, reason) of the skipped and failed files in a status answer."""
    return {p["path"]: (p["state"], p["reason"]) for p in status["problems"]}


def indexed(kb: KnowledgeBase) -> list[str]:
    return sorted(f.path for f in kb.stores.store.files() if f.state == "indexed")


def skipped(target: Path, folder: Path) -> tuple[str, str]:
    """The recorded state of a link to `target` that leaves `folder`."""
    return ("skipped", f"symlink to {target}, outside the folder {folder}; "
            "set [ingest] follow_external_links = true to index it")


# -- ingest -------------------------------------------------------------------------------------


def test_external_link_is_skipped_with_its_reason_in_status(kb, docs, secret):
    link = docs / "notes.md"
    link.symlink_to(secret)
    report = kb.ingest([docs])
    assert (report.added, report.skipped) == (1, 1)
    assert report.problems == [(str(link), *skipped(secret, docs))]
    assert problems(kb.status()) == {str(link): skipped(secret, docs)}
    assert indexed(kb) == [str(docs / "own.md")]
    assert str(link) not in found(kb, "vault combination quokka")
    again = kb.ingest([docs])  # a rescan reports it again and changes nothing
    assert (again.skipped, again.added, again.unchanged) == (1, 0, 1)
    assert problems(kb.status()) == {str(link): skipped(secret, docs)}


def test_links_that_leave_the_folder_in_any_way_are_skipped(kb, docs, secret):
    (docs / "sub").mkdir()
    (docs / "absolute.md").symlink_to(secret)
    (docs / "sub" / "dots.md").symlink_to(Path("..", "..", "outside", "secret.md"))
    (docs / "hop.md").symlink_to(secret)
    (docs / "chain.md").symlink_to("hop.md")  # a link to a link inside that leaves
    (docs / "dangling.md").symlink_to(secret.parent / "missing.md")
    report = kb.ingest([docs])
    assert problems(kb.status()) == {
        str(docs / "absolute.md"): skipped(secret, docs),
        str(docs / "sub" / "dots.md"): skipped(secret, docs),
        str(docs / "hop.md"): skipped(secret, docs),
        str(docs / "chain.md"): skipped(secret, docs),
        str(docs / "dangling.md"): skipped(secret.parent / "missing.md", docs),
    }
    assert (report.added, report.skipped, report.failed) == (1, 5, 0)
    assert indexed(kb) == [str(docs / "own.md")]
    assert not found(kb, "vault combination quokka") - {str(docs / "own.md")}


@pytest.mark.parametrize("follow", [False, True])
def test_links_inside_the_folder_and_folder_links_behave_as_before(
        config, fake_embedder, docs, secret, follow):
    (docs / "sub").mkdir()
    (docs / "alias.md").symlink_to("own.md")
    (docs / "sub" / "up.md").symlink_to(Path("..", "own.md"))
    (docs / "chain.md").symlink_to("alias.md")
    (secret.parent / "back.md").symlink_to(docs / "own.md")
    (docs / "round.md").symlink_to(secret.parent / "back.md")  # out and back in
    (docs / "later.md").symlink_to("missing.md")  # dangling inside: nothing to read yet
    (docs / "linked").symlink_to(secret.parent, target_is_directory=True)
    config = config.replace("ingest", follow_external_links=follow)
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        report = kb.ingest([docs])
        assert (report.added, report.skipped, report.failed) == (1, 0, 0)
        assert problems(kb.status()) == {}
        # once, as itself
        assert [f.path for f in kb.stores.store.files()] == [str(docs / "own.md")]
        named = kb.ingest([docs / "alias.md", docs / "round.md"])  # named links: as before
        assert (named.added, named.skipped) == (2, 0)
        assert problems(kb.status()) == {}


def test_external_links_are_indexed_when_enabled(config, fake_embedder, docs, secret):
    link = docs / "notes.md"
    link.symlink_to(secret)
    config = config.replace("ingest", follow_external_links=True)
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        report = kb.ingest([docs])
        assert (report.added, report.skipped) == (2, 0)
        assert problems(kb.status()) == {}
        assert indexed(kb) == sorted([str(link), str(docs / "own.md")])
        assert str(link) in found(kb, "vault combination quokka")


def test_indexed_file_replaced_by_an_external_link_is_removed(kb, docs, secret):
    note = docs / "notes.md"
    note.write_text("The wombat digs a burrow under the shed.\n")
    kb.ingest([docs])
    assert str(note) in found(kb, "wombat burrow")
    note.unlink()
    note.symlink_to(secret)
    report = kb.ingest([docs])
    assert report.skipped == 1
    assert kb.stores.store.file(str(note)).state == "skipped"
    assert str(note) not in found(kb, "wombat burrow") | found(kb, "vault combination quokka")
    assert kb.stores.store.chunk_count() == kb.stores.sparse.count() == kb.stores.dense.count == 1


def test_named_link_is_judged_by_its_own_folder(kb, docs, secret):
    link = docs / "notes.md"
    link.symlink_to(secret)
    report = kb.ingest([link])
    assert report.problems == [(str(link), *skipped(secret, docs))]
    assert indexed(kb) == []
    kb.ingest([secret])  # naming the target itself indexes it, under its own name
    assert indexed(kb) == [str(secret)]
    assert found(kb, "vault combination quokka") == {str(secret)}


# -- the daemon's watcher -----------------------------------------------------------------------


@pytest.fixture
def start(config: Config, docs: Path, fake_embedder) -> Iterator[Callable[[], Daemon]]:
    """Start a daemon watching `docs`; stopped in teardown."""
    started: list[Daemon] = []

    def run() -> Daemon:
        watched = config.replace("watch", folders=[str(docs)], quiet_period_s=QUIET)
        daemon = Daemon(watched.replace("api", port=0), embedder=fake_embedder)
        started.append(daemon)
        daemon.start()
        return daemon

    yield run
    for daemon in started:
        daemon.stop()


def status(daemon: Daemon) -> dict[str, Any]:
    code, body = api(daemon, "GET", "/api/status")
    assert code == 200, body
    return body


def sources(daemon: Daemon, text: str) -> set[str]:
    code, body = api(daemon, "POST", "/api/query", {"text": text, "mode": "sparse", "k": 20})
    assert code == 200, body
    return {r["source"] for r in body["results"]}


def settled(daemon: Daemon) -> None:
    """Wait until the watcher has nothing queued."""
    wait_for(lambda: daemon.watcher.queue_size == 0)


@pytest.mark.parametrize("where", ["top", "new subfolder"])
def test_link_created_in_a_watched_folder_is_not_indexed(start, docs, secret, where):
    daemon = start()
    wait_for(lambda: sources(daemon, "capybara") == {str(docs / "own.md")})
    folder = docs if where == "top" else docs / "sub"
    folder.mkdir(exist_ok=True)
    link = folder / "notes.md"
    link.symlink_to(secret)
    wait_for(lambda: problems(status(daemon)).get(str(link)) == skipped(secret, folder))
    settled(daemon)
    assert sources(daemon, "vault combination quokka") == set()
    assert status(daemon)["files"] == {"indexed": 1, "skipped": 1, "failed": 0}
    daemon.watcher.scan()  # the periodic rescan agrees
    settled(daemon)
    assert sources(daemon, "vault combination quokka") == set()


def test_link_present_at_start_is_not_indexed(start, docs, secret):
    link = docs / "notes.md"
    link.symlink_to(secret)
    daemon = start()
    wait_for(lambda: problems(status(daemon)).get(str(link)) == skipped(secret, docs))
    settled(daemon)
    assert sources(daemon, "vault combination quokka") == set()


@pytest.mark.parametrize("how", ["replaced atomically", "deleted and linked"])
def test_watched_file_retargeted_outside_is_removed(start, docs, secret, how):
    note = docs / "notes.md"
    note.write_text("The wombat digs a burrow under the shed.\n")
    daemon = start()
    wait_for(lambda: sources(daemon, "wombat burrow") == {str(note)})
    if how == "replaced atomically":  # what `ln -sf` and editors' safe writes do
        (docs / "notes.md.tmp").symlink_to(secret)
        os.replace(docs / "notes.md.tmp", note)
    else:
        note.unlink()
        note.symlink_to(secret)
    wait_for(lambda: problems(status(daemon)).get(str(note)) == skipped(secret, docs))
    settled(daemon)
    assert sources(daemon, "wombat burrow") == set()
    assert sources(daemon, "vault combination quokka") == set()

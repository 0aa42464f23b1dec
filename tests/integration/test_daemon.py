"""The real daemon in a thread (fake embedder, real stores and watchdog) driven over its API."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import api, wait_for, watching

from psirag_kb.cli import main
from psirag_kb.config import Config
from psirag_kb.errors import KBError, TreeEmpty
from psirag_kb.service.client import DAEMON_FILE, HTTPClient, connect
from psirag_kb.service.daemon import Daemon, DaemonError

QUIET = 0.2


def results(daemon: Daemon, text: str) -> list[dict[str, Any]]:
    status, body = api(daemon, "POST", "/api/query", {"text": text, "mode": "sparse", "k": 20})
    assert status == 200, body
    return body["results"]


def sources(daemon: Daemon, text: str) -> set[str]:
    return {r["source"] for r in results(daemon, text)}


def make_config(config: Config, folder: Path, **api: Any) -> Config:
    config = watching(config, folder, QUIET)
    return config.replace("api", **api) if api else config


@pytest.fixture
def daemon(config: Config, docs: Path, fake_embedder) -> Iterator[Daemon]:
    running = Daemon(make_config(config, docs), embedder=fake_embedder)
    running.start()
    yield running
    running.stop()


def idle(daemon: Daemon) -> bool:
    return daemon.watcher.queue_size == 0


def test_create_edit_delete(daemon: Daemon, docs: Path) -> None:
    note = docs / "note.md"  # not zebra.md: the file name is indexed as the chunk's header
    note.write_text("Zebras graze on the savanna at dawn.\n")
    wait_for(lambda: str(note) in sources(daemon, "zebras savanna"))
    note.write_text("Penguins huddle against the antarctic wind.\n")
    wait_for(lambda: str(note) in sources(daemon, "penguins antarctic"))
    assert sources(daemon, "zebras savanna") == set()
    note.unlink()
    wait_for(lambda: not sources(daemon, "penguins antarctic"))
    assert api(daemon, "GET", "/api/status")[1]["files"]["indexed"] == 0


def test_move_keeps_leaves_and_changes_path(daemon: Daemon, docs: Path) -> None:
    (docs / "animals").mkdir()
    old = docs / "giraffe.md"
    old.write_text("Giraffes browse acacia leaves with long tongues.\n")
    before = wait_for(lambda: results(daemon, "giraffes acacia"))
    new = docs / "animals" / "giraffe.md"
    os.rename(old, new)
    after = wait_for(lambda: [r for r in results(daemon, "giraffes acacia")
                              if r["source"] == str(new)])
    assert [r["chunk_id"] for r in after] == [r["chunk_id"] for r in before]
    wait_for(lambda: idle(daemon))
    assert sources(daemon, "giraffes acacia") == {str(new)}


def test_move_into_a_just_created_folder(daemon: Daemon, docs: Path) -> None:
    old = docs / "ibis.md"
    old.write_text("Ibises wade through shallow marshes.\n")
    wait_for(lambda: results(daemon, "ibises marshes"))
    (docs / "fresh").mkdir()  # its watch may not exist yet: seen as delete + create
    new = docs / "fresh" / "ibis.md"
    os.rename(old, new)
    wait_for(lambda: sources(daemon, "ibises marshes") == {str(new)})
    wait_for(lambda: idle(daemon))
    assert api(daemon, "GET", "/api/status")[1]["chunks"] == 1


def test_folder_move_and_folder_delete(daemon: Daemon, docs: Path) -> None:
    sub = docs / "sub"
    sub.mkdir()
    for n in range(3):
        (sub / f"{n}.md").write_text(f"Okapi note number {n} about forest okapis.\n")
    wait_for(lambda: len(sources(daemon, "okapi")) == 3)
    chunk_ids = sorted(r["chunk_id"] for r in results(daemon, "okapi"))
    os.rename(sub, docs / "moved")
    wait_for(lambda: {Path(s).parent.name for s in sources(daemon, "okapi")} == {"moved"})
    assert sorted(r["chunk_id"] for r in results(daemon, "okapi")) == chunk_ids
    for child in (docs / "moved").iterdir():
        child.unlink()
    (docs / "moved").rmdir()
    wait_for(lambda: not sources(daemon, "okapi"))


def test_editor_atomic_save_is_one_update(daemon: Daemon, docs: Path) -> None:
    note = docs / "draft.md"
    note.write_text("Lemurs live on Madagascar.\n")
    wait_for(lambda: str(note) in sources(daemon, "lemurs madagascar"))
    generation = api(daemon, "GET", "/api/status")[1]["generation"]
    temporary = docs / ".draft.md.swp"
    temporary.write_text("Lemurs leap between baobab trees.\n")
    os.replace(temporary, note)
    wait_for(lambda: str(note) in sources(daemon, "baobab"))
    wait_for(lambda: idle(daemon))
    status = api(daemon, "GET", "/api/status")[1]
    assert status["generation"] == generation + 1
    assert status["files"]["indexed"] == 1 and not status["problems"]


def test_burst_of_files(daemon: Daemon, docs: Path) -> None:
    for n in range(60):
        (docs / f"burst{n:03d}.md").write_text(f"Burst file {n} mentions quokka{n}.\n")
    wait_for(lambda: api(daemon, "GET", "/api/status")[1]["files"]["indexed"] == 60)
    # the BM25 commit follows DuckDB's by a moment: queryable is what a query returns
    wait_for(lambda: str(docs / "burst042.md") in sources(daemon, "quokka42"))


def test_ignored_files_and_data_dir_inside_the_folder(config: Config, docs: Path,
                                                      fake_embedder) -> None:
    inside = make_config(config.with_data_dir(docs / ".kbdata"), docs)
    running = Daemon(inside, embedder=fake_embedder)
    running.start()
    try:
        (docs / "notes.md.swp").write_text("swap file about walruses\n")
        (docs / ".hidden.md").write_text("hidden walruses\n")
        (docs / "real.md").write_text("real walruses\n")
        wait_for(lambda: sources(running, "walruses") == {str(docs / "real.md")})
        wait_for(lambda: idle(running))
        status = api(running, "GET", "/api/status")[1]
        assert status["files"]["indexed"] == 1 and status["daemon"]["errors"] == []
    finally:
        running.stop()


def test_reconciles_changes_made_while_stopped(config: Config, docs: Path,
                                               fake_embedder) -> None:
    keep, edit, gone = docs / "keep.md", docs / "edit.md", docs / "gone.md"
    keep.write_text("Capybaras are calm.\n")
    edit.write_text("Tapirs have trunks.\n")
    gone.write_text("Pangolins have scales.\n")
    first = Daemon(make_config(config, docs), embedder=fake_embedder)
    first.start()
    try:
        wait_for(lambda: api(first, "GET", "/api/status")[1]["files"]["indexed"] == 3)
    finally:
        first.stop()
    edit.write_text("Tapirs swim in rivers.\n")
    gone.unlink()
    (docs / "new.md").write_text("Armadillos dig burrows.\n")
    second = Daemon(make_config(config, docs), embedder=fake_embedder)
    second.start()
    try:
        wait_for(lambda: sources(second, "armadillos") == {str(docs / "new.md")})
        wait_for(lambda: not sources(second, "pangolins"))
        assert sources(second, "tapirs rivers") == {str(edit)}
        assert sources(second, "trunks") == set()
    finally:
        second.stop()


def test_status_tree_and_reindex(daemon: Daemon, docs: Path, tmp_path: Path) -> None:
    note = docs / "a.md"
    note.write_text("Meerkats stand guard.\n")
    (docs / "b.md").write_text("Meerkats dig for beetles.\n")
    wait_for(lambda: len(sources(daemon, "meerkats")) == 2)
    status = api(daemon, "GET", "/api/status")[1]
    assert status["watch"] == [str(docs)]
    assert status["daemon"]["pid"] == os.getpid() and status["daemon"]["url"] == daemon.api.url
    assert {j["name"] for j in status["daemon"]["jobs"]} >= {"rescan", "store"}
    assert api(daemon, "GET", "/api/health")[1]["ok"] is True
    code, root = api(daemon, "GET", "/api/tree")
    assert code == 200 and root["children"]
    assert api(daemon, "GET", f"/api/tree/{root['id']}")[1]["id"] == root["id"]
    assert api(daemon, "GET", "/api/tree/987654")[0] == 404
    code, report = api(daemon, "POST", "/api/reindex", {"path": str(note)})
    assert code == 200 and report["unchanged"] == 1
    outside = tmp_path / "outside.md"
    outside.write_text("secret")
    for path in (str(outside), f"{docs}/../outside.md", "relative.md", "/etc/passwd"):
        code, body = api(daemon, "POST", "/api/reindex", {"path": path})
        assert code == 400, (path, body)
    assert api(daemon, "POST", "/api/reindex", {"path": 5})[0] == 400
    assert api(daemon, "POST", "/api/query", {"text": ""})[0] == 400
    assert api(daemon, "POST", "/api/query", {"text": "x", "mode": "nonsense"})[0] == 400


def test_token_is_checked(config: Config, docs: Path, fake_embedder) -> None:
    token = "t0ken-" + "9" * 30
    running = Daemon(make_config(config, docs, token=token), embedder=fake_embedder)
    running.start()
    try:
        assert api(running, "GET", "/api/status", token="")[0] == 401
        assert api(running, "GET", "/api/status", token="wrong")[0] == 401
        assert api(running, "GET", "/api/status", token=token)[0] == 200
        assert not (config.data_dir / "api.token").exists()  # a hand-set token is used as is
    finally:
        running.stop()


def test_a_token_is_generated_once_and_required_on_loopback(config: Config, docs: Path,
                                                            fake_embedder) -> None:
    running = Daemon(make_config(config, docs), embedder=fake_embedder)
    running.start()
    try:
        token_file = config.data_dir / "api.token"
        token = token_file.read_text().strip()
        assert len(token) >= 32 and token_file.stat().st_mode & 0o777 == 0o600
        assert running.api.token == token
        assert api(running, "GET", "/api/status", token="")[0] == 401
        assert api(running, "GET", "/api/health", token="") == (200, {"ok": True,
                                                                      "state": "serving"})
        assert api(running, "GET", "/api/status", token=token)[0] == 200
    finally:
        running.stop()
    again = Daemon(make_config(config, docs), embedder=fake_embedder)
    again.start()
    try:
        assert again.api.token == token  # the same token across restarts
    finally:
        again.stop()


def test_short_hand_set_tokens_are_refused(config: Config, docs: Path, fake_embedder) -> None:
    with pytest.raises(KBError, match="at least 32"):
        Daemon(make_config(config, docs, token="t0ken"), embedder=fake_embedder).start()


def test_second_daemon_on_the_same_data_dir_is_refused(daemon: Daemon, config: Config,
                                                       docs: Path, fake_embedder) -> None:
    with pytest.raises(DaemonError, match=f"pid {os.getpid()}"):
        Daemon(make_config(config, docs), embedder=fake_embedder).start()
    assert api(daemon, "GET", "/api/health")[0] == 200


def test_no_tree_yet_is_a_passing_state_not_a_fault(daemon: Daemon, config: Config,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Before anything is indexed (and while a first ingest runs) the API answers 409 with why,
    the client raises TreeEmpty and the CLI says it without calling it a failure."""
    code, body = api(daemon, "GET", "/api/tree")
    assert code == 409 and "no topic tree yet" in body["error"]
    client = connect(daemon.config)
    assert isinstance(client, HTTPClient)
    with pytest.raises(TreeEmpty, match="no topic tree yet"):
        client.node(None)
    assert main(["--data-dir", str(config.data_dir), "tree"]) == 1
    shown = capsys.readouterr().err
    assert "no topic tree yet" in shown and "answered" not in shown


def test_cli_and_client_go_through_the_daemon(daemon: Daemon, docs: Path, config: Config,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    note = docs / "cli.md"
    note.write_text("Wombats produce cube-shaped droppings.\n")
    wait_for(lambda: sources(daemon, "wombats"))
    client = connect(daemon.config)
    assert isinstance(client, HTTPClient)
    assert client.status()["daemon"]["pid"] == os.getpid()
    data_dir = ["--data-dir", str(config.data_dir)]
    wait_for(lambda: idle(daemon))
    assert main([*data_dir, "status", "--json"]) == 0
    served = json.loads(capsys.readouterr().out)["daemon"]  # the daemon's own view
    assert served["pid"] == os.getpid() and served["queue"] == 0
    assert main([*data_dir, "query", "wombats", "--mode", "sparse", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["source"] == str(note)
    assert main([*data_dir, "ingest", str(note), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reports"][0]["unchanged"] == 1
    assert main([*data_dir, "ingest", "--jsonl", str(note)]) == 1
    assert main([*data_dir, "maintain"]) == 0  # handed to the daemon, which owns the stores
    assert f"pid {os.getpid()}" in capsys.readouterr().err


def test_stop_removes_daemon_file_and_releases_the_data_dir(config: Config, docs: Path,
                                                            fake_embedder) -> None:
    running = Daemon(make_config(config, docs), embedder=fake_embedder)
    running.start()
    assert (config.data_dir / DAEMON_FILE).is_file()
    running.stop()
    assert not (config.data_dir / DAEMON_FILE).exists()
    again = Daemon(make_config(config, docs), embedder=fake_embedder)
    again.start()
    again.stop()

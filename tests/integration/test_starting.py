"""A starting daemon answers on its port: while it migrates the schema of the previous
release's data directory, or waits for a restore writing it, /api/health is 200 with the state,
/api/ready and every other route 503 naming what runs, then the real API serves on the same
port; an abandoned restore and one that outlasts the wait end the start with a clear error
(real DuckDB, Tantivy and hnswlib; the real model for the release fixture)."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import wait_for, watching
from test_upgrades import PREVIOUS, unpack

from psirag_kb.cli.commands.backup import cmd_restore
from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service import client as client_module
from psirag_kb.service import daemon as daemon_module
from psirag_kb.service.client import (
    STARTING_FILE,
    HTTPClient,
    NotServing,
    remote_daemon,
    running_daemon,
)
from psirag_kb.service.daemon import Daemon, DaemonError
from psirag_kb.storage import backup as backup_module
from psirag_kb.storage import migrations
from psirag_kb.storage.backup import RESTORING, BackupError
from psirag_kb.storage.datadir import COMMAND, DataDirLock
from psirag_kb.storage.migrations import SCHEMA_VERSION, Migration, Step

NOTES = {"heron.md": "Herons stand still in shallow water waiting for fish.\n",
         "pike.md": "Pike wait still in shallow water to ambush smaller fish.\n"}


def free_port() -> int:
    """A loopback port nothing listens on (the daemon's fixed [api] port, as in production)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str, path: str, token: str = "", body: Any = None) -> tuple[int, Any, Any]:
    """(status, headers, decoded JSON) of one request; connection refused raises."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method="POST" if data else "GET")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, json.loads(exc.read())


class Starter:
    """`Daemon.start` in a thread (it blocks while the daemon waits or migrates)."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.failed: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.daemon.start()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.failed = exc

    def join(self) -> None:
        self.thread.join(300)
        assert not self.thread.is_alive(), "the daemon did not finish starting"
        if self.failed is not None:
            raise self.failed


def assert_refused_while(url: str, token: str, state: str, words: str) -> None:
    """A stranger: health 200 and ready 503 with the state word only, 401 on every other route
    (OpenAI's shape on /v1). The admin token: the reason on health and ready, 503 naming
    `words` on status, query and /v1."""
    status, headers, health = get(url, "/api/health")
    assert status == 200 and health == {"ok": True, "state": state}, health
    assert headers.get("Retry-After") == "5"
    status, headers, ready = get(url, "/api/ready")
    assert status == 503 and ready == {"ready": False, "state": state}, ready
    assert headers.get("Retry-After") == "5"
    for path, body in (("/api/status", None), ("/api/query", {"text": "fish"})):
        status, _, refused = get(url, path, "", body)
        assert status == 401 and "bearer token" in refused["error"], (path, refused)
    status, _, refused = get(url, "/v1/models")
    assert status == 401 and refused["error"]["type"] == "authentication_error", refused
    status, _, health = get(url, "/api/health", token)
    assert status == 200 and health["state"] == state and words in health["reason"], health
    status, headers, ready = get(url, "/api/ready", token)
    assert status == 503 and ready["ready"] is False and ready["state"] == state, ready
    assert any(words in reason for reason in ready["reasons"]), ready
    for path, body in (("/api/status", None), ("/api/query", {"text": "fish"})):
        status, _, refused = get(url, path, token, body)
        assert status == 503 and words in refused["error"], (path, refused)
        assert "not serving yet" in refused["error"] and refused["state"] == state
    status, _, refused = get(url, "/v1/models", token)
    assert status == 503 and words in refused["error"]["message"], refused


def test_a_migrating_daemon_answers_503_naming_both_schemas_then_serves(
        tmp_path: Path, minilm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = unpack(PREVIOUS, tmp_path)  # schema 4, written by the previous release
    port = free_port()
    config = config.replace("api", port=port)
    migrating, release = threading.Event(), threading.Event()
    last = migrations.MIGRATIONS[-1]

    def held(step: Step) -> None:
        migrating.set()
        release.wait(120)
        last.run(step)

    monkeypatch.setattr(migrations, "MIGRATIONS",
                        [*migrations.MIGRATIONS[:-1],
                         Migration(last.version, last.name, held, last.rebuild)])
    daemon = Daemon(config, embedder=minilm)
    starter = Starter(daemon)
    try:
        wait_for(lambda: migrating.is_set() or starter.failed, 120, "the migration step")
        url = f"http://127.0.0.1:{port}"
        token = (config.data_dir / "api.token").read_text().strip()
        words = f"from version 4 to {SCHEMA_VERSION}"
        assert_refused_while(url, token, "migrating", words)
        # the CLI finds the starting daemon and says what it does instead of a refused socket
        assert json.loads((config.data_dir / STARTING_FILE).read_text())["url"] == url
        with pytest.raises(KBError, match=f"does not serve yet .*migrating: .*{words}"):
            running_daemon(config, wait_s=0.0, quiet=True)
        with pytest.raises(NotServing, match=words):
            HTTPClient(url, token).status()
        monkeypatch.setattr(client_module, "DAEMON_START_WAIT_S", 0.0)
        with pytest.raises(NotServing, match=f"not serving yet \\(migrating: .*{words}"):
            remote_daemon(config.replace("api", server=url))  # --server: not "token refused"
        release.set()
        starter.join()
        assert daemon.api is not None and daemon.api.url == url  # the same port throughout
        wait_for(lambda: get(url, "/api/ready")[0] == 200, 60, "ready after the migration")
        status, _, health = get(url, "/api/health", token)
        assert status == 200 and health["state"] == "serving" and "pid" in health
        status, _, shown = get(url, "/api/status", token)
        assert status == 200 and shown["chunks"] == 50
        assert not (config.data_dir / STARTING_FILE).exists()
        assert running_daemon(config, quiet=True) is not None
    finally:
        release.set()
        starter.thread.join(300)
        daemon.stop()


def backed_up(tmp_path: Path, fake_embedder: Any) -> Path:
    """A backup of a knowledge base holding NOTES."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in NOTES.items():
        (docs / name).write_text(text)
    with KnowledgeBase(Config().with_data_dir(tmp_path / "source"), fake_embedder) as kb:
        kb.ingest([docs])
        kb.backup(tmp_path / "backup")
    return tmp_path / "backup"


def held_restore(tmp_path: Path, fake_embedder: Any, monkeypatch: pytest.MonkeyPatch
                 ) -> tuple[Config, threading.Event, threading.Event]:
    """A backup of the notes at tmp_path/backup and a restore target whose first copied file
    waits for `release` (`copying` set when it does): a restore in progress meanwhile."""
    backed_up(tmp_path, fake_embedder)
    copying, release = threading.Event(), threading.Event()
    copy = backup_module._copy

    def held(source: Path, to: Path) -> None:
        if not copying.is_set():
            copying.set()
            release.wait(120)
        copy(source, to)

    monkeypatch.setattr(backup_module, "_copy", held)
    return Config().with_data_dir(tmp_path / "data"), copying, release


def test_a_daemon_started_beside_a_restore_waits_for_it_answering_503_then_serves_it(
        tmp_path: Path, fake_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    target, copying, release = held_restore(tmp_path, fake_embedder, monkeypatch)
    restoring = threading.Thread(target=cmd_restore, args=(
        Namespace(src=tmp_path / "backup", force=False, json=True), target), daemon=True)
    restoring.start()
    wait_for(copying.is_set, 60, "the restore's copy")
    port = free_port()
    token = "restore-test-token-" + "r" * 32  # the admin's, while api.token is being restored
    config = watching(target, tmp_path / "docs", 0.2).replace("api", port=port, token=token)
    daemon = Daemon(config, embedder=fake_embedder)
    starter = Starter(daemon)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: (config.data_dir / STARTING_FILE).exists() or starter.failed, 60,
                 "the starting daemon")
        assert (config.data_dir / RESTORING).exists()
        assert_refused_while(url, token, "restoring", "a restore (pid")
        release.set()
        restoring.join(120)
        starter.join()
        wait_for(lambda: get(url, "/api/ready")[0] == 200, 60, "ready after the restore")
        status, _, shown = get(url, "/api/status", token)
        assert status == 200 and shown["chunks"] == len(NOTES), shown
        # serving: a stranger still learns only the state word
        assert get(url, "/api/health")[2] == {"ok": True, "state": "serving"}
        assert get(url, "/api/ready")[2] == {"ready": True, "state": "serving"}
        status, _, refused = get(url, "/api/status")
        assert status == 401 and "bearer token" in refused["error"]
        status, _, refused = get(url, "/v1/models")
        assert status == 401 and refused["error"]["code"] == "invalid_api_key"
    finally:
        release.set()
        starter.thread.join(300)
        daemon.stop()


def test_an_abandoned_restore_ends_the_start_saying_what_to_do(
        tmp_path: Path, fake_embedder: Any) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / RESTORING).write_text(str(tmp_path / "backup"))  # its process is gone: lock free
    port = free_port()
    daemon = Daemon(Config().with_data_dir(data).replace("api", port=port),
                    embedder=fake_embedder)
    with pytest.raises(BackupError, match="the process that ran it ended") as caught:
        daemon.start()
    assert f"restore {tmp_path / 'backup'} --force" in str(caught.value)
    assert not (data / STARTING_FILE).exists() and not (data / "daemon.json").exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # the port is closed again
    assert not (data / "api.token").exists()  # nothing written into the half-restored folder


def test_a_restore_that_outlasts_the_wait_ends_the_start(
        tmp_path: Path, fake_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    target, copying, release = held_restore(tmp_path, fake_embedder, monkeypatch)
    monkeypatch.setattr(daemon_module, "RESTORE_WAIT_S", 0.0)
    restoring = threading.Thread(target=cmd_restore, args=(
        Namespace(src=tmp_path / "backup", force=False, json=True), target), daemon=True)
    restoring.start()
    try:
        wait_for(copying.is_set, 60, "the restore's copy")
        daemon = Daemon(target.replace("api", port=0), embedder=fake_embedder)
        try:
            with pytest.raises(DaemonError, match=r"a restore \(pid \d+\) has been writing") \
                    as caught:
                daemon.start()
        finally:
            daemon.stop()  # a no-op after a start that gave up
        assert "start the daemon again once `psirag-kb restore` has finished" in str(caught.value)
        assert not (target.data_dir / STARTING_FILE).exists()
    finally:
        release.set()
        restoring.join(120)
    with KnowledgeBase(target, fake_embedder) as kb:  # the restore itself went on to the end
        assert kb.stores.store.chunk_count() == len(NOTES)


def test_a_daemon_stopped_while_it_waits_for_a_restore_says_so(
        tmp_path: Path, fake_embedder: Any) -> None:
    data = tmp_path / "data"
    restore = DataDirLock(data)
    assert restore.try_acquire(COMMAND, "restore") is None  # as `psirag-kb restore` holds it
    (data / RESTORING).write_text(str(tmp_path / "backup"))
    daemon = Daemon(Config().with_data_dir(data).replace("api", port=0), embedder=fake_embedder)
    starter = Starter(daemon)
    try:
        wait_for(lambda: daemon.starting.get()[0] == "restoring" or starter.failed, 60,
                 "the wait for the restore")
        daemon.request_stop()  # SIGTERM: the wait ends, never advising to kill the restore
        with pytest.raises(DaemonError, match="stopped while waiting for psirag-kb restore"):
            starter.join()
        assert not (data / STARTING_FILE).exists()
    finally:
        restore.release()

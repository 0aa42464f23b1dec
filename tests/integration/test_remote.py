"""A team member's CLI against a daemon named by URL: --server, PSIRAG_KB_URL and its token."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_helpers import serving_notes

from psirag_kb.cli import main
from psirag_kb.service.daemon import Daemon

NOTES = {
    "birds/heron.md": "Herons stand still in shallow water waiting for fish.\n",
    "birds/swift.md": "Swifts sleep on the wing during their long migration.\n",
    "fish/pike.md": "Pike wait still in shallow water to ambush smaller fish.\n",
}


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Path]]:
    """The team's daemon (its own data directory, bound to loopback here)."""
    with serving_notes(tmp_path_factory.mktemp("team"), NOTES,
                       "still shallow swifts") as served:
        yield served


@pytest.fixture
def laptop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A member's machine: an empty data directory of its own, in a folder of its own."""
    monkeypatch.chdir(tmp_path)
    return tmp_path / "laptop-data"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_server_flag_with_the_token_in_the_environment(team, laptop, capsys,
                                                       monkeypatch) -> None:
    daemon, docs = team
    monkeypatch.setenv("PSIRAG_KB_TOKEN", daemon.api.token)
    code, out, _ = run(capsys, "--data-dir", str(laptop), "--server", daemon.api.url,
                       "status", "--json")
    assert code == 0 and json.loads(out)["files"]["indexed"] == len(NOTES)
    assert json.loads(out)["daemon"]["pid"] > 0
    code, out, _ = run(capsys, "--data-dir", str(laptop), "--server", daemon.api.url,
                       "query", "herons shallow water", "--mode", "sparse", "--json")
    assert code == 0 and json.loads(out)["results"][0]["source"] == str(docs / "birds/heron.md")
    code, out, _ = run(capsys, "--data-dir", str(laptop), "--server", daemon.api.url,
                       "tree", "--json")
    assert code == 0 and json.loads(out)["leaves"] == len(NOTES)
    assert not laptop.exists()  # nothing was opened on the member's machine


def test_url_and_token_file_from_the_environment_and_flags(team, laptop, capsys, tmp_path,
                                                           monkeypatch) -> None:
    daemon, _ = team
    token_file = tmp_path / "team.token"
    token_file.write_text(daemon.api.token + "\n")
    monkeypatch.setenv("PSIRAG_KB_URL", daemon.api.url)
    code, out, _ = run(capsys, "--data-dir", str(laptop), "--token-file", str(token_file),
                       "status", "--json")
    assert code == 0 and json.loads(out)["files"]["indexed"] == len(NOTES)


def test_scoped_query_through_the_server(team, laptop, capsys, monkeypatch) -> None:
    daemon, docs = team
    monkeypatch.setenv("PSIRAG_KB_TOKEN", daemon.api.token)
    code, out, _ = run(capsys, "--data-dir", str(laptop), "--server", daemon.api.url, "query",
                       "still in shallow water", "--mode", "sparse", "--in",
                       str(docs / "fish"), "--json")
    results = json.loads(out)["results"]
    assert code == 0 and [r["source"] for r in results] == [str(docs / "fish/pike.md")]


def test_a_wrong_token_is_named_as_the_problem(team, laptop, capsys, monkeypatch) -> None:
    daemon, _ = team
    monkeypatch.setenv("PSIRAG_KB_TOKEN", "w" * 40)
    code, _, err = run(capsys, "--data-dir", str(laptop), "--server", daemon.api.url, "status")
    assert code == 1 and "token refused" in err
    monkeypatch.delenv("PSIRAG_KB_TOKEN")
    code, _, err = run(capsys, "--data-dir", str(laptop), "--server", daemon.api.url, "status")
    assert code == 1 and "token missing" in err
    monkeypatch.setenv("PSIRAG_KB_TOKEN", "short")
    code, _, err = run(capsys, "--data-dir", str(laptop), "--server", daemon.api.url, "status")
    assert code == 1 and "at least 32" in err


def test_a_wrong_address_is_named_as_the_problem(laptop, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PSIRAG_KB_TOKEN", "a" * 40)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once it is closed
    code, _, err = run(capsys, "--data-dir", str(laptop), "--server",
                       f"http://127.0.0.1:{port}", "status")
    assert code == 1 and "address failed" in err
    code, _, err = run(capsys, "--data-dir", str(laptop), "--server", "kb.example:8765",
                       "status")
    assert code == 1 and "http://" in err


def test_tls_to_a_plain_http_daemon_is_named_as_the_problem(team, laptop, capsys,
                                                            monkeypatch) -> None:
    daemon, _ = team
    monkeypatch.setenv("PSIRAG_KB_TOKEN", daemon.api.token)
    url = daemon.api.url.replace("http://", "https://")
    code, _, err = run(capsys, "--data-dir", str(laptop), "--server", url, "status")
    assert code == 1 and "TLS failed" in err


def test_commands_that_need_local_files_refuse_a_server(laptop, capsys, tmp_path) -> None:
    code, _, err = run(capsys, "--data-dir", str(laptop), "--server", "http://127.0.0.1:1",
                       "ingest", str(tmp_path))
    assert code == 1 and "this machine's data directory" in err

"""`maintain` with a daemon running is handed to the daemon, which owns the stores."""

from __future__ import annotations

import json
from pathlib import Path

from daemon_helpers import api, serving_notes, wait_for

from psirag_kb.cli import main

NOTES = {
    "birds/heron.md": "Herons stand still in shallow water waiting for fish.\n",
    "fish/pike.md": "Pike wait still in shallow water to ambush smaller fish.\n",
}


def maintain_runs(daemon) -> int:
    return next(j["runs"] for j in daemon.jobs.status() if j["name"] == "maintain")


def test_maintain_runs_in_the_daemon_and_shows_its_result(tmp_path: Path, capsys,
                                                          monkeypatch) -> None:
    with serving_notes(tmp_path, NOTES, "still shallow") as (daemon, _):
        data = ["--data-dir", str(daemon.config.data_dir)]
        before = maintain_runs(daemon)
        assert main([*data, "maintain", "--json"]) == 0
        printed = capsys.readouterr()
        report = json.loads(printed.out)
        assert set(report) >= {"drift", "abstracts"}, report  # the daemon's own run's report
        assert maintain_runs(daemon) == before + 1
        assert f"pid {daemon.health()['pid']}" in printed.err
        # on a team server only an admin may have it run, through the API or --server
        people = daemon.people
        tokens = {role: people.add(f"p-{role}", role, [str(tmp_path / "docs")])
                  for role in ("reader", "editor", "admin")}
        for role in ("reader", "editor"):
            status, body = api(daemon, "POST", "/api/maintain", {}, token=tokens[role])
            assert status == 403 and "admin" in body["error"], (role, body)
        monkeypatch.setenv("PSIRAG_KB_TOKEN", tokens["editor"])
        laptop = ["--data-dir", str(tmp_path / "laptop"), "--server", daemon.api.url]
        assert main([*laptop, "maintain"]) == 1
        assert "admin" in capsys.readouterr().err
        assert maintain_runs(daemon) == before + 1
        monkeypatch.setenv("PSIRAG_KB_TOKEN", tokens["admin"])
        assert main([*laptop, "maintain", "--json"]) == 0
        assert "abstracts" in json.loads(capsys.readouterr().out)
        wait_for(lambda: maintain_runs(daemon) == before + 2)


def test_a_maintain_serving_readers_is_not_asked_again(tmp_path: Path) -> None:
    with serving_notes(tmp_path, NOTES, "still shallow") as (daemon, _):
        daemon.serve_only = True  # as the owner a command-line maintain starts
        try:
            status, body = api(daemon, "POST", "/api/maintain", {})
        finally:
            daemon.serve_only = False  # so that stopping it stops its jobs too
        assert status == 400 and "running maintain" in body["error"]

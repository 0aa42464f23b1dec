"""Over the API a backup is named, never placed: it lands in [backup] dir (refused without
one), a path or a bad name is refused, and `psirag-kb backup DEST` at the daemon's machine
moves the daemon's backup to DEST; no route writes or reads outside the configured folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import api, serving_notes

from psirag_kb.cli import main
from psirag_kb.config import Config, load_config
from psirag_kb.errors import ConfigError
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.backups import NamedBackups
from psirag_kb.storage.backup import MANIFEST, BackupError, backup_name, read_manifest, restore

NOTES = {"pike.md": "# Pike\n\nThe pike waits in still shallow water.\n",
         "carp.md": "# Carp\n\nThe carp roots in still shallow mud.\n"}
BAD_NAMES = ("../escape", "..", ".", "/srv/abs", "a/b", "a\\b", "~root", "", "x" * 65,
             "psirag-backup-20260101T000000Z-g1", "late.partial", "tab\there", "nul\x00")


@pytest.mark.fast
@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_backup_name_is_one_safe_path_component(name: str) -> None:
    with pytest.raises(BackupError, match="not a backup name"):
        backup_name(name)


@pytest.mark.fast
def test_good_backup_names_pass() -> None:
    for name in ("nightly", "2026-12-06", "kb.v2_final", "A", "x" * 64, "a..b"):
        assert backup_name(name) == name


@pytest.mark.fast
def test_every_hours_zero_means_named_backups_only_and_negative_is_refused(
        tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[backup]\ndir = "/srv/backups"\nevery_hours = 0\n')
    assert load_config(path).backup.every_hours == 0
    path.write_text('[backup]\ndir = "/srv/backups"\nevery_hours = -1\n')
    with pytest.raises(ConfigError, match="every_hours"):
        load_config(path)


def _dir(folder: Path) -> Any:
    return lambda config, _docs: config.replace("backup", dir=str(folder), every_hours=0.0)


def test_the_api_names_a_backup_into_the_backup_dir_and_refuses_paths(
        tmp_path: Path, fake_embedder: Any, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "backups"
    outside = tmp_path / "elsewhere"
    with serving_notes(tmp_path, NOTES, "still shallow", _dir(folder)) as (daemon, _docs):
        # the old body, a path in any form, a bad name: 400, nothing written anywhere
        for body in ({"dest": str(outside)}, {"name": str(outside)},
                     *({"name": name} for name in BAD_NAMES), {"name": 7}, {}):
            status, refused = api(daemon, "POST", "/api/backup", body)
            assert status == 400, (body, refused)
        assert not outside.exists() and not folder.exists()

        status, taken = api(daemon, "POST", "/api/backup", {"name": "nightly-1"})
        assert status == 200, taken
        assert taken["path"] == str(folder / "nightly-1") and taken["chunks"] == 2
        assert sorted(p.name for p in folder.iterdir()) == ["nightly-1"]
        status, again = api(daemon, "POST", "/api/backup", {"name": "nightly-1"})
        assert status == 409 and "nightly-1" in again["error"]

        # the CLI at the daemon's machine: the daemon's backup moved to DEST
        dest = tmp_path / "mine" / "kb-copy"
        assert main(["--data-dir", str(daemon.data_dir), "backup", str(dest), "--json"]) == 0
        moved = json.loads(capsys.readouterr().out)
        assert moved["path"] == str(dest) and moved["chunks"] == 2
        assert read_manifest(dest)["chunks"] == 2
        assert sorted(p.name for p in folder.iterdir()) == ["nightly-1"]  # none left behind
        assert not list(daemon.data_dir.glob("backup.stage.*"))
        assert main(["--data-dir", str(daemon.data_dir), "backup", str(dest)]) == 1
        assert "not an empty folder" in capsys.readouterr().err

        # through --server DEST is the backup's name in that daemon's [backup] dir
        monkeypatch.setenv("PSIRAG_KB_TOKEN", daemon.api.token)
        remote = ["--server", daemon.api.url, "backup"]
        assert main([*remote, "remote-1", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["path"] == str(folder / "remote-1")
        assert main([*remote, str(outside)]) == 1
        assert "not a backup name" in capsys.readouterr().err
        assert not outside.exists()
        monkeypatch.delenv("PSIRAG_KB_TOKEN")

        # without [backup] dir the API refuses, saying how to configure it; so does the CLI
        daemon.named_backups = NamedBackups("")
        status, refused = api(daemon, "POST", "/api/backup", {"name": "other"})
        assert status == 409 and "[backup] dir" in refused["error"], refused
        assert main(["--data-dir", str(daemon.data_dir), "backup",
                     str(tmp_path / "second")]) == 1
        assert "[backup] dir" in capsys.readouterr().err
        assert not (tmp_path / "second").exists()

    for source in (folder / "nightly-1", dest):  # both restore
        target = tmp_path / f"restored-{source.name}"
        restore(source, target)
        with KnowledgeBase(Config().with_data_dir(target), fake_embedder) as kb:
            assert kb.stores.store.chunk_count() == 2
    assert (folder / "nightly-1" / MANIFEST).exists()


def test_reindex_and_forget_never_reach_outside_the_watched_folders(
        tmp_path: Path, fake_embedder: Any) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.md").write_text("# Key\n\nThe vault opens at dawn.\n")
    with serving_notes(tmp_path, NOTES, "still shallow") as (daemon, docs):
        (docs / "link.md").symlink_to(secret / "key.md")
        (docs / "linked").symlink_to(secret)
        for path in (secret, secret / "key.md", docs / "link.md", docs / "linked",
                     docs / "linked" / "key.md", docs / ".." / "secret", daemon.data_dir,
                     Path("/"), "relative/path"):
            status, refused = api(daemon, "POST", "/api/reindex", {"path": str(path)})
            assert status == 400, (path, refused)
        for path in (docs / ".." / "secret", "relative/path", ""):
            assert api(daemon, "POST", "/api/forget", {"path": str(path)})[0] == 400
        found = api(daemon, "POST", "/api/query", {"text": "vault dawn", "mode": "sparse"})[1]
        assert not any("key.md" in r["source"] or "link" in r["source"]
                       for r in found["results"])

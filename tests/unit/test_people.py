"""The people registry: hashed tokens, roles, grants, reloads; the audit trail; the per-person
limiter; `psirag-kb users` on a data directory without a daemon."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from daemon_helpers import wait_for

from psirag_kb.access import OWNER, Access
from psirag_kb.cli import main
from psirag_kb.people import People, PeopleError, UnknownPerson, token_hash
from psirag_kb.serving.audit import AuditLog
from psirag_kb.serving.auth import PersonLimiter


def files_text(folder: Path) -> str:
    """Every file under a folder, as text."""
    return "".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())


def test_a_token_maps_to_its_person_and_is_stored_only_as_a_hash(tmp_path: Path) -> None:
    people = People(tmp_path)
    token = people.add("ana", "reader", [str(tmp_path / "hr")])
    assert len(token) >= 43  # 32 random bytes, base64
    assert people.access_for(token) == Access("ana", "reader", (str(tmp_path / "hr"),))
    assert people.access_for(token + "x") is None and people.access_for("") is None
    assert token not in files_text(tmp_path)
    assert token_hash(token) in (tmp_path / "people.json").read_text()
    assert stat.S_IMODE(os.stat(tmp_path / "people.json").st_mode) == 0o600
    listed = json.dumps(people.listed())
    assert token not in listed and token_hash(token) not in listed
    assert people.listed()[0]["grants"] == [str(tmp_path / "hr")]


def test_roles_grants_and_names(tmp_path: Path) -> None:
    people = People(tmp_path)
    nobody = people.access_for(people.add("intern"))
    assert nobody is not None and nobody.grants == () and not nobody.may_read("/anything")
    boss = people.access_for(people.add("boss", "admin"))
    assert boss is not None and boss.everything and boss.may_write("/x")
    editor = people.access_for(people.add("ed", "editor", ["/docs/shared"]))
    assert editor is not None and editor.may_write("/docs/shared/a.md")
    assert not editor.may_write("/docs/hr/a.md") and not editor.may_read("/docs/shared-2/a")
    assert not Access("r", "reader", ("/docs",)).may_write("/docs/a.md")
    with pytest.raises(PeopleError, match="role"):
        people.add("x", "root")
    with pytest.raises(PeopleError, match="absolute"):
        people.add("y", "reader", ["relative/folder"])
    with pytest.raises(PeopleError, match="cannot be a name"):
        people.add("owner")
    with pytest.raises(PeopleError, match="exists already"):
        people.add("ed")
    with pytest.raises(UnknownPerson):
        people.revoke("nobody")
    assert OWNER.everything and OWNER.name == "owner"


def test_another_process_sees_grants_revocations_and_rotations_within_seconds(
        tmp_path: Path) -> None:
    served = People(tmp_path)  # the daemon's registry
    managed = People(tmp_path)  # `users ...` on the data directory
    token = managed.add("bo", "reader", ["/docs/a"])
    wait_for(lambda: served.access_for(token) is not None, 5)
    managed.grant("bo", ["/docs/b"])
    wait_for(lambda: served.access_for(token).grants == ("/docs/a", "/docs/b"), 5)
    managed.ungrant("bo", ["/docs/a"])
    wait_for(lambda: served.access_for(token).grants == ("/docs/b",), 5)
    fresh = managed.rotate("bo")
    wait_for(lambda: served.access_for(token) is None, 5)
    assert served.access_for(fresh) is not None
    managed.revoke("bo")
    wait_for(lambda: served.access_for(fresh) is None, 5)


def test_last_use_is_written_down_without_the_token(tmp_path: Path) -> None:
    people = People(tmp_path)
    token = people.add("cy")
    assert people.listed()[0]["last_used"] is None
    people.access_for(token)
    assert people.write_seen(every_s=0.0)
    assert People(tmp_path).listed()[0]["last_used"] is not None
    assert not people.write_seen(every_s=0.0)  # nothing new to write


def test_the_audit_trail_rotates_and_keeps_query_text_only_when_asked(tmp_path: Path) -> None:
    quiet = AuditLog(tmp_path, max_bytes=400, backups=2)
    for number in range(30):
        quiet.record("ana", "query", ["/docs/hr"], number, query="salary of bob")
    quiet.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["audit.1.jsonl", "audit.2.jsonl", "audit.jsonl"]
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert lines and all(line["person"] == "ana" and line["scope"] == ["/docs/hr"]
                         for line in lines)
    assert "salary" not in files_text(tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path / "audit.jsonl").st_mode) == 0o600
    told = AuditLog(tmp_path / "told", queries=True)
    (tmp_path / "told").mkdir()
    told.record("ana", "query", None, 2, query="salary of bob")
    assert json.loads((tmp_path / "told" / "audit.jsonl").read_text())["query"] == \
        "salary of bob"


def test_the_person_limiter_refuses_beyond_the_rate_one_person_at_a_time() -> None:
    limiter = PersonLimiter(per_minute=3)
    assert [limiter.wait("ana") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.wait("ana") > 0
    assert limiter.wait("bo") == 0.0


def test_users_commands_work_on_the_data_directory_without_a_daemon(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    hr = tmp_path / "hr"
    assert main([*data, "users", "add", "ana", "--read", str(hr), "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert set(made) == {"name", "token"} and made["name"] == "ana"
    assert main([*data, "users", "grant", "ana", "--read", str(tmp_path / "fin")]) == 0
    assert main([*data, "users", "list", "--json"]) == 0
    out = capsys.readouterr().out
    assert made["token"] not in out and token_hash(made["token"]) not in out
    listed = json.loads(out.splitlines()[-1])["users"]
    assert listed[0]["grants"] == [str(hr), str(tmp_path / "fin")]
    assert main([*data, "users", "rotate", "ana", "--json"]) == 0
    rotated = json.loads(capsys.readouterr().out)["token"]
    registry = People(tmp_path / "data")
    assert registry.access_for(made["token"]) is None
    assert registry.access_for(rotated).name == "ana"
    assert main([*data, "users", "revoke", "ana"]) == 0
    assert main([*data, "users", "revoke", "ana"]) == 1
    assert "no person named 'ana'" in capsys.readouterr().err
    assert made["token"] not in files_text(tmp_path) and rotated not in files_text(tmp_path)


def test_a_damaged_registry_lets_nobody_in_and_says_so(tmp_path: Path) -> None:
    people = People(tmp_path)
    token = people.add("ana", "reader", ["/docs"])
    (tmp_path / "people.json").write_text('{"people": [{"name": "ana"')
    served = People(tmp_path)  # a daemon starting on it still starts
    assert served.access_for(token) is None
    wait_for(lambda: people.access_for(token) is None, 5)
    with pytest.raises(PeopleError, match="people.json"):
        people.listed()

"""A three-person test: a daemon on the real model with two readers of different
folders and an editor. Through every API route, every MCP tool and the remote CLI nobody sees a
passage, path, abstract or count from outside their grants (marker words per folder would show
it), each gets k results from what they may read, grants and revocations take effect within
seconds, and no token is stored in clear in the data directory.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import AuditTail, api, serving_team, wait_for
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from psirag_kb.cli import main
from psirag_kb.service.daemon import Daemon

MARKERS = {"shared": "heliotrope", "hr": "quillwort", "fin": "saxifrage"}
TOPICS = ["the garden irrigation plan", "the winter heating budget", "the office move to the "
          "harbour", "the new hiring round for engineers", "the supplier contract renewal",
          "the quarterly travel policy"]
K = 5
MODES = ("auto", "hybrid", "tree", "sparse", "dense")
READS = {"ana": ("shared", "hr"), "bo": ("shared", "fin"), "ed": ("shared",)}
ROLES = {"ana": "reader", "bo": "reader", "ed": "editor"}


def note(folder: str, number: int) -> str:
    marker = MARKERS[folder]
    topic = TOPICS[number]
    return (f"# {marker.title()} memo {number}\n\nThe {marker} team wrote this memo about {topic}. "
            f"Everyone in {marker} agreed that {topic} needs a decision before spring, and the "
            f"{marker} lead will report on {topic} at the next meeting.\n")


class Team:
    """The running daemon, its folders, and each person's token."""

    def __init__(self, daemon: Daemon, docs: Path, tokens: dict[str, str]) -> None:
        self.daemon = daemon
        self.docs = docs
        self.tokens = tokens
        self.data_dir = daemon.data_dir

    def foreign(self, person: str) -> list[str]:
        """Words and paths that must never reach `person`."""
        hidden = [f for f in MARKERS if f not in READS[person]]
        return [w for f in hidden for w in (MARKERS[f], str(self.docs / f))]

    def leaks(self, person: str, answer: Any) -> list[str]:
        text = json.dumps(answer).lower()
        return [w for w in self.foreign(person) if w.lower() in text]


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, minilm: Any) -> Iterator[Team]:
    notes = {f"{folder}/memo-{number}.md": note(folder, number)
             for folder in MARKERS for number in range(len(TOPICS))}
    grants = {name: (ROLES[name], list(folders)) for name, folders in READS.items()}
    # every abstract written: only then can a marker show a mixed tree
    with serving_team(tmp_path_factory.mktemp("team-server"), notes, grants,
                      " ".join(MARKERS.values()), minilm, written=True) as (daemon, docs, tokens):
        yield Team(daemon, docs, tokens)


def as_(team: Team, person: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return api(team.daemon, method, path, body, token=team.tokens[person])


def chunk_ids(team: Team, folder: str) -> list[int]:
    _, found = api(team.daemon, "POST", "/api/query", {"text": MARKERS[folder],
                                                       "mode": "sparse", "k": 100})
    return [r["chunk_id"] for r in found["results"]]


def test_no_token_is_stored_in_clear_in_the_data_directory(team: Team) -> None:
    files = [p for p in team.data_dir.rglob("*") if p.is_file()]
    assert any(p.name == "people.json" for p in files)
    for path in files:
        content = path.read_bytes()
        for name, token in team.tokens.items():
            assert token.encode() not in content, f"{name}'s token is in {path}"


def test_a_reader_never_reindexes_and_an_editor_not_outside_their_grants(team: Team) -> None:
    shared, hr = team.docs / "shared" / "memo-0.md", team.docs / "hr" / "memo-0.md"
    assert as_(team, "ana", "POST", "/api/reindex", {"path": str(hr)})[0] == 403
    assert as_(team, "ana", "POST", "/api/reindex", {"path": str(shared)})[0] == 403
    assert as_(team, "ed", "POST", "/api/reindex", {"path": str(hr)})[0] == 403
    assert as_(team, "ed", "POST", "/api/reindex", {"path": str(team.docs)})[0] == 403
    assert as_(team, "ed", "GET", "/api/users")[0] == 403


def test_an_editor_reindexes_inside_their_grants(team: Team) -> None:
    shared = team.docs / "shared" / "memo-0.md"
    status, report = as_(team, "ed", "POST", "/api/reindex", {"path": str(shared)})
    assert status == 200 and "unchanged" in report


@pytest.mark.parametrize("person", sorted(READS))
def test_every_query_mode_gives_k_results_from_the_persons_grants(team: Team,
                                                                  person: str) -> None:
    for mode in MODES:
        for topic in TOPICS[:3]:
            status, found = as_(team, person, "POST", "/api/query",
                                {"text": f"memo about {topic}", "mode": mode, "k": K})
            assert status == 200, found
            assert len(found["results"]) == K, (mode, topic)
            assert not team.leaks(person, found), (mode, topic)
    for extra in ({"summarize": True}, {"mode": "agent"}):
        status, found = as_(team, person, "POST", "/api/query",
                            {"text": "what needs a decision before spring?", "k": K, **extra})
        assert status == 200 and not team.leaks(person, found), extra
    status, found = as_(team, person, "POST", "/api/query", {
        "text": "memo", "mode": "hybrid", "k": K, "in": [str(team.docs)]})
    assert status == 200 and len(found["results"]) == K and not team.leaks(person, found)


def test_asking_for_a_foreign_folder_finds_nothing(team: Team) -> None:
    for mode in MODES:
        status, found = as_(team, "ana", "POST", "/api/query", {
            "text": MARKERS["fin"], "mode": mode, "k": K, "in": [str(team.docs / "fin")]})
        assert status == 200 and found["results"] == [], mode


def test_answer_streams_only_readable_passages(team: Team) -> None:
    request = urllib.request.Request(
        team.daemon.api.url + "/api/answer", method="POST",
        data=json.dumps({"text": "who reports on the heating budget?", "k": K}).encode(),
        headers={"Authorization": f"Bearer {team.tokens['bo']}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        lines = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    assert "answer" in lines[-1], lines[-1]
    assert not team.leaks("bo", lines)


def test_a_foreign_chunk_is_answered_as_a_missing_one(team: Team) -> None:
    def shape(status_body: tuple[int, Any], number: int) -> tuple[int, str]:
        status, body = status_body
        return status, json.dumps(body).replace(str(number), "N")

    missing = 10 ** 12
    for route in ("/api/chunk/{}", "/api/path/{}"):
        expected = shape(as_(team, "ana", "GET", route.format(missing)), missing)
        for number in chunk_ids(team, "fin"):
            assert shape(as_(team, "ana", "GET", route.format(number)), number) == expected
        for number in chunk_ids(team, "hr")[:2]:
            status, body = as_(team, "ana", "GET", route.format(number))
            assert status == 200 and not team.leaks("ana", body)


@pytest.mark.parametrize("person", sorted(READS))
def test_status_and_the_tree_show_only_the_persons_files(team: Team, person: str) -> None:
    status, shown = as_(team, person, "GET", "/api/status")
    assert status == 200 and not team.leaks(person, shown)
    assert shown["files"]["indexed"] == len(READS[person]) * len(TOPICS)
    assert "generation" not in shown  # it counts every write, in others' folders too
    status, root = as_(team, person, "GET", "/api/tree")
    assert status == 200 and not team.leaks(person, root)
    queue, seen, abstracts = [root], 0, []
    while queue and seen < 200:
        node = queue.pop()
        seen += 1
        abstracts.append(node["abstract"].lower())
        for child in node.get("children", []):
            if child["kind"] != "leaf":
                status, below = as_(team, person, "GET", f"/api/tree/{child['id']}")
                assert status == 200 and not team.leaks(person, below), child
                queue.append(below)
    # the abstracts carry their folders' markers, so a mixed one would have shown above
    assert all(any(MARKERS[f] in a for a in abstracts) for f in READS[person]), abstracts


def test_a_foreign_tree_node_is_answered_as_a_missing_one(team: Team) -> None:
    missing = 10 ** 12
    expected = json.dumps(as_(team, "ana", "GET", f"/api/tree/{missing}")).replace(
        str(missing), "N")
    _, root = api(team.daemon, "GET", "/api/tree")
    queue, hidden = [root], []
    while queue:
        node = queue.pop()
        if any(MARKERS["fin"] in a for a in (node["abstract"],)):
            hidden.append(node["id"])
        queue += [api(team.daemon, "GET", f"/api/tree/{c['id']}")[1]
                  for c in node["children"] if c["kind"] != "leaf"]
    assert hidden  # the root and the fin subtree
    for number in hidden:
        answer = as_(team, "ana", "GET", f"/api/tree/{number}")
        assert json.dumps(answer).replace(str(number), "N") == expected


def test_health_shows_the_pid_to_an_admin_or_a_monitor_and_a_path_to_no_person(
        team: Team) -> None:
    for person in READS:  # readers and editors, as strangers: the state word
        status, health = as_(team, person, "GET", "/api/health")
        assert status == 200 and health == {"ok": True, "state": "serving"}
    assert api(team.daemon, "GET", "/api/health", token="")[1] == {"ok": True,
                                                                    "state": "serving"}
    monitor = team.daemon.people.add("mo", "monitor", [])
    try:
        status, health = api(team.daemon, "GET", "/api/health", token=monitor)
        assert status == 200 and "pid" in health
        assert str(team.data_dir) not in json.dumps(health)
    finally:
        team.daemon.people.revoke("mo")
    assert api(team.daemon, "GET", "/api/health")[1]["data_dir"] == str(team.data_dir)


def test_a_wrong_token_is_audited_without_the_token(team: Team) -> None:
    audit = AuditTail(team.data_dir)
    wrong = "wrong-token-9e107d9d372bb6826bd81d3542a419d6"
    assert api(team.daemon, "GET", "/api/status", token=wrong)[0] == 401
    text, refused = audit.text(), audit.lines()
    assert [(r["person"], r["action"], r.get("status")) for r in refused] == [
        (None, "GET /api/status", 401)]
    assert refused[0]["client"] == "127.0.0.1" and wrong not in text


def mcp_calls(team: Team, person: str, foreign_id: int) -> dict[str, Any]:
    async def use() -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {team.tokens[person]}"}
        transport = streamable_http_client(team.daemon.api.url + "/mcp",
                                           http_client=create_mcp_http_client(headers=headers))
        async with Client(transport) as client:
            seen: dict[str, Any] = {}
            for mode in ("hybrid", "tree", "sparse", "dense"):
                seen[mode] = (await client.call_tool("search", {
                    "query": "memo about the office move", "k": K, "mode": mode}
                )).structured_content
            first = seen["hybrid"]["results"][0]["id"]
            seen["fetch"] = (await client.call_tool("fetch", {"id": first, "neighbours": 2}
                                                    )).structured_content
            foreign = await client.call_tool("fetch", {"id": str(foreign_id)})
            missing = await client.call_tool("fetch", {"id": str(10 ** 12)})
            seen["foreign"] = [foreign.is_error, str(foreign.content).replace(
                str(foreign_id), "N")]
            seen["missing"] = [missing.is_error, str(missing.content).replace(
                str(10 ** 12), "N")]
            seen["browse"] = (await client.call_tool("browse", {})).structured_content
            seen["status"] = (await client.call_tool("status", {})).structured_content
            seen["answer"] = (await client.call_tool("answer", {
                "question": "who reports on the office move?"})).structured_content
            return seen

    return asyncio.run(use())


@pytest.mark.parametrize("person", ["ana", "bo"])
def test_every_mcp_tool_keeps_to_the_persons_grants(team: Team, person: str) -> None:
    hidden = "fin" if person == "ana" else "hr"
    seen = mcp_calls(team, person, chunk_ids(team, hidden)[0])
    for mode in ("hybrid", "tree", "sparse", "dense"):
        assert len(seen[mode]["results"]) == K, mode
    assert seen["foreign"] == seen["missing"] and seen["foreign"][0]
    assert not team.leaks(person, seen)


def remote(team: Team, person: str, capsys: pytest.CaptureFixture[str],
           monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setenv("PSIRAG_KB_TOKEN", team.tokens[person])
    code = main(["--data-dir", str(team.data_dir.parent / f"laptop-{person}"),
                 "--server", team.daemon.api.url, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_remote_cli_with_a_persons_token_is_that_person(team, capsys, monkeypatch) -> None:
    code, _, err = remote(team, "ana", capsys, monkeypatch, "users", "list")
    assert code == 1 and "403" in err
    code, out, _ = remote(team, "ed", capsys, monkeypatch, "ingest",
                          str(team.docs / "hr" / "memo-1.md"))
    assert code == 1  # a remote daemon indexes what it watches; never this machine's ingest


@pytest.mark.parametrize("person", sorted(READS))
def test_the_remote_cli_keeps_to_the_persons_grants(team, capsys, monkeypatch,
                                                    person: str) -> None:
    for mode in MODES:
        code, out, err = remote(team, person, capsys, monkeypatch, "query",
                                "memo about the supplier contract", "--mode", mode,
                                "-k", str(K), "--json")
        assert code == 0, err
        assert len(json.loads(out)["results"]) == K and not team.leaks(person, out)
    for argv in (("status", "--json"), ("tree", "--json"), ("status",), ("tree",),
                 ("query", "supplier contract", "--mode", "agent")):
        code, out, err = remote(team, person, capsys, monkeypatch, *argv)
        assert code == 0, (argv, err)
        assert not team.leaks(person, out), argv


def test_a_grant_and_its_removal_take_effect_within_seconds(team, capsys,
                                                            monkeypatch) -> None:
    fin = str(team.docs / "fin")

    def fin_results() -> int:
        status, found = as_(team, "ana", "POST", "/api/query", {
            "text": MARKERS["fin"], "mode": "sparse", "k": 20})
        assert status == 200, found
        return sum(MARKERS["fin"] in r["text"] for r in found["results"])

    assert fin_results() == 0
    monkeypatch.delenv("PSIRAG_KB_TOKEN", raising=False)
    assert main(["--data-dir", str(team.data_dir), "users", "grant", "ana", "--read", fin]) == 0
    try:
        wait_for(lambda: fin_results() == len(TOPICS), 10)
    finally:
        assert main(["--data-dir", str(team.data_dir), "users", "ungrant", "ana", "--read",
                     fin]) == 0
    wait_for(lambda: fin_results() == 0, 10)
    capsys.readouterr()


def test_a_revoked_token_is_refused_within_seconds(team, capsys, monkeypatch) -> None:
    monkeypatch.delenv("PSIRAG_KB_TOKEN", raising=False)
    data = ["--data-dir", str(team.data_dir)]
    assert main([*data, "users", "add", "temp", "--read", str(team.docs / "shared"),
                 "--json"]) == 0  # through the running daemon's API
    token = json.loads(capsys.readouterr().out)["token"]
    assert api(team.daemon, "GET", "/api/health", token=token)[0] == 200
    api(team.daemon, "POST", "/api/query", {"text": "memo about the winter heating budget"},
        token=token)
    assert main([*data, "users", "list", "--json"]) == 0
    listed = capsys.readouterr().out
    assert "temp" in listed and token not in listed
    assert main([*data, "users", "revoke", "temp"]) == 0
    wait_for(lambda: api(team.daemon, "GET", "/api/status", token=token)[0] == 401, 10)
    content = b"".join(p.read_bytes() for p in team.data_dir.rglob("*") if p.is_file())
    assert token.encode() not in content
    audit = (team.data_dir / "audit.jsonl").read_text()
    lines = [json.loads(line) for line in audit.splitlines()]
    assert {"person": "owner", "action": "query", "results": 18} in [
        {k: line.get(k) for k in ("person", "action", "results")} for line in lines]
    assert any(line["person"] == "temp" and line["action"] == "query" for line in lines)
    assert "winter heating" not in audit  # [api] audit_queries is off
    assert any(line["person"] == "owner" and line["action"] == "users add"
               and line.get("scope") == "temp" for line in lines)  # `users add` went by the API


def test_a_new_grant_moves_the_trees_boundaries(team, capsys, monkeypatch) -> None:
    memo = str(team.docs / "shared" / "memo-0.md")  # a file no one was granted alone
    partitions = team.daemon.kb.stores.partitions
    assert memo not in partitions.grants
    monkeypatch.delenv("PSIRAG_KB_TOKEN", raising=False)
    assert main(["--data-dir", str(team.data_dir), "users", "grant", "ed", "--read", memo]) == 0
    try:
        wait_for(lambda: memo in partitions.grants, 15)  # the daemon split the tree at it
    finally:
        assert main(["--data-dir", str(team.data_dir), "users", "ungrant", "ed", "--read",
                     memo]) == 0
    wait_for(lambda: memo not in partitions.grants, 15)
    capsys.readouterr()

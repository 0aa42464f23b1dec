"""The API maps each bearer token to an Access and passes it down on every route, /mcp included;
only admins manage people; a person's rate is limited; a right token never meets the
wrong-token limiter."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import wait_for
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared._httpx_utils import create_mcp_http_client

from psirag_kb.access import OWNER, Access
from psirag_kb.people import People
from psirag_kb.service.api import APIServer
from psirag_kb.service.mcp import build_server, http_access
from psirag_kb.serving.audit import AuditLog

OWNER_TOKEN = "owner-token-" + "o" * 40


class RecordingApp:
    """Answers every route and records the Access each call carried."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Access]] = []

    def _saw(self, what: str, access: Access) -> None:
        self.seen.append((what, access))

    def health(self) -> dict[str, Any]:
        return {"ok": True, "pid": 1}

    def status(self, *, access: Access = OWNER) -> dict[str, Any]:
        self._saw("status", access)
        return {"data_dir": "/d", "files": {"indexed": 0, "skipped": 0, "failed": 0},
                "chunks": 0, "problems": []}

    def query(self, text: str, mode: str | None = None, k: int | None = None,
              summarize: bool = False, within: list[str] | None = None, *,
              access: Access = OWNER) -> dict[str, Any]:
        self._saw("query", access)
        return {"query": text, "mode": mode or "hybrid", "results": []}

    def node(self, node_id: int | None = None, *, access: Access = OWNER) -> dict[str, Any]:
        self._saw("node", access)
        return {"id": node_id or 1, "layer": 1, "abstract": "", "leaves": 0, "dirty": False,
                "children": []}

    def path(self, chunk_id: int, *, access: Access = OWNER) -> dict[str, Any]:
        self._saw("path", access)
        return {"chunk_id": chunk_id, "path": []}

    def chunk(self, chunk_id: int, neighbours: int = 0, *,
              access: Access = OWNER) -> dict[str, Any]:
        self._saw("chunk", access)
        return {"chunk_id": chunk_id, "text": "t", "source": "/docs/a.md", "before": [],
                "after": []}

    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None, *,
               access: Access = OWNER) -> dict[str, Any]:
        self._saw("answer", access)
        return {"query": text, "mode": "agent", "status": "no_llm", "answer": None,
                "message": "m", "citations": [], "steps": [], "hops": 1}

    def reindex(self, path: str, *, access: Access = OWNER) -> dict[str, Any]:
        self._saw("reindex", access)
        return {"path": path}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[APIServer, RecordingApp, People]]:
    app = RecordingApp()
    people = People(tmp_path)
    server = APIServer(app, "127.0.0.1", 0, OWNER_TOKEN, people=people,
                       person_requests_per_minute=1000, audit=AuditLog(tmp_path),
                       mcp_server=build_server(app, http_access))
    server.start()
    try:
        yield server, app, people
    finally:
        server.stop()


def call(server: APIServer, method: str, path: str, token: str, body: Any = None
         ) -> tuple[int, Any, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            raw = response.read().decode()
            lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
            return response.status, lines[-1] if lines else None, response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers


ROUTES = [("GET", "/api/status", None, "status"), ("GET", "/api/tree", None, "node"),
          ("GET", "/api/tree/7", None, "node"), ("GET", "/api/path/3", None, "path"),
          ("GET", "/api/chunk/3", None, "chunk"),
          ("POST", "/api/query", {"text": "x"}, "query"),
          ("POST", "/api/answer", {"text": "x"}, "answer"),
          ("POST", "/api/reindex", {"path": "/docs/a.md"}, "reindex")]


def test_every_route_passes_the_token_holders_access(served) -> None:
    server, app, people = served
    token = people.add("ana", "reader", ["/docs/hr"])
    ana = Access("ana", "reader", ("/docs/hr",))
    for method, path, body, what in ROUTES:
        for given, expected in ((OWNER_TOKEN, OWNER), (token, ana)):
            app.seen.clear()
            status, _, _ = call(server, method, path, given, body)
            assert status == 200, (path, status)
            assert app.seen == [(what, expected)], path
    assert call(server, "GET", "/api/status", "x" * 43)[0] == 401


def test_mcp_over_http_passes_the_persons_access(served) -> None:
    server, app, people = served
    token = people.add("bo", "reader", ["/docs/fin"])

    async def use() -> None:
        transport = streamable_http_client(
            server.url + "/mcp",
            http_client=create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}))
        async with Client(transport) as client:
            await client.call_tool("search", {"query": "q"})
            await client.call_tool("fetch", {"id": "3"})
            await client.call_tool("browse", {})
            await client.call_tool("status", {})
            await client.call_tool("answer", {"question": "why?"})

    asyncio.run(use())
    bo = Access("bo", "reader", ("/docs/fin",))
    assert [what for what, _ in app.seen] == ["query", "chunk", "node", "status", "answer"]
    assert all(access == bo for _, access in app.seen)


def test_an_mcp_call_without_an_accepted_token_is_refused_not_made_the_owner() -> None:
    with pytest.raises(ToolError, match="bearer token"):
        http_access(None)


def test_only_an_admin_manages_people(served) -> None:
    server, _, people = served
    reader = people.add("ana", "reader", ["/docs/hr"])
    editor = people.add("ed", "editor", ["/docs/shared"])
    admin = people.add("boss", "admin")
    for token in (reader, editor):
        assert call(server, "GET", "/api/users", token)[0] == 403
        assert call(server, "POST", "/api/users", token, {"name": "evil", "role": "admin"}
                    )[0] == 403
        assert call(server, "DELETE", "/api/users/boss", token)[0] == 403
    status, made, _ = call(server, "POST", "/api/users", admin,
                           {"name": "cy", "role": "reader", "read": ["/docs/cy"]})
    assert status == 200 and set(made) == {"name", "token"}
    status, changed, _ = call(server, "POST", "/api/users/cy/grant", OWNER_TOKEN,
                              {"read": ["/docs/more"]})
    assert status == 200 and changed["grants"] == ["/docs/cy", "/docs/more"]
    listed = call(server, "GET", "/api/users", OWNER_TOKEN)[1]["users"]
    assert [p["name"] for p in listed] == ["ana", "boss", "cy", "ed"]
    assert made["token"] not in json.dumps(listed)
    assert call(server, "POST", "/api/users/nobody/rotate", OWNER_TOKEN, {})[0] == 404
    assert call(server, "POST", "/api/users", OWNER_TOKEN, {"name": "cy"})[0] == 400
    audit = [json.loads(line) for line in
             (people.data_dir / "audit.jsonl").read_text().splitlines()]
    assert {"person": "boss", "action": "users add", "scope": "cy"} in [
        {k: line.get(k) for k in ("person", "action", "scope")} for line in audit]
    assert {"person": "owner", "action": "users grant", "scope": "cy"} in [
        {k: line.get(k) for k in ("person", "action", "scope")} for line in audit]


def test_a_revoked_or_rotated_token_is_refused_within_seconds(served) -> None:
    server, _, people = served
    token = people.add("ana", "reader", ["/docs/hr"])
    assert call(server, "GET", "/api/status", token)[0] == 200
    status, rotated, _ = call(server, "POST", "/api/users/ana/rotate", OWNER_TOKEN, {})
    assert status == 200
    wait_for(lambda: call(server, "GET", "/api/status", token)[0] == 401, 10)
    assert call(server, "GET", "/api/status", rotated["token"])[0] == 200
    People(people.data_dir).revoke("ana")  # `users revoke` on the data directory
    wait_for(lambda: call(server, "GET", "/api/status", rotated["token"])[0] == 401, 10)


def test_a_persons_rate_is_limited_and_a_right_token_never_meets_the_failure_limit(
        tmp_path: Path) -> None:
    people = People(tmp_path)
    limited, other = people.add("ana"), people.add("bo")
    server = APIServer(RecordingApp(), "127.0.0.1", 0, OWNER_TOKEN, people=people,
                       person_requests_per_minute=5, failures_per_minute=2)
    server.start()
    try:
        statuses = [call(server, "GET", "/api/status", limited)[0] for _ in range(6)]
        assert statuses[:5] == [200] * 5 and statuses[5] == 429
        status, body, headers = call(server, "GET", "/api/status", limited)
        assert status == 429 and int(headers["Retry-After"]) >= 1 and "ana" in body["error"]
        assert call(server, "GET", "/api/status", other)[0] == 200
        assert call(server, "GET", "/api/status", OWNER_TOKEN)[0] == 200
        for _ in range(3):
            call(server, "GET", "/api/status", "w" * 43)
        assert call(server, "GET", "/api/status", "w" * 43)[0] == 429  # wrong tokens limited
        assert call(server, "GET", "/api/status", other)[0] == 200  # a right one never
    finally:
        server.stop()


def test_the_audit_trail_names_the_person_of_a_refused_request(tmp_path: Path) -> None:
    people = People(tmp_path)
    token = people.add("ana")
    server = APIServer(RecordingApp(), "127.0.0.1", 0, OWNER_TOKEN, people=people,
                       person_requests_per_minute=1, audit=AuditLog(tmp_path))
    server.start()
    try:
        assert [call(server, "GET", "/api/status", token)[0] for _ in range(2)] == [200, 429]
    finally:
        server.stop()
    line = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
    assert line["person"] == "ana" and line["status"] == 429

"""The HTTP API layer against a fake application: routing, validation, auth, errors."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from psirag_kb.errors import KBError, NodeNotFound
from psirag_kb.service.api import APIServer, is_loopback


class FakeApp:
    """Records calls; node 7 exists, 'boom' raises a bug, empty text a KBError."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def health(self) -> dict[str, Any]:
        return {"ok": True, "pid": 1}

    def status(self) -> dict[str, Any]:
        return {"files": {}, "daemon": {"pid": 1}}

    def query(self, text: str, mode: str | None, k: int | None, summarize: bool) -> dict:
        self.calls.append(("query", (text, mode, k, summarize)))
        if text == "boom":
            raise RuntimeError("a bug")
        if not text.strip():
            raise KBError("the query is empty")
        return {"query": text, "mode": mode or "hybrid", "results": []}

    def node(self, node_id: int | None) -> dict[str, Any]:
        if node_id not in (None, 7):
            raise NodeNotFound(f"no tree node {node_id}")
        return {"id": node_id or 1, "children": []}

    def reindex(self, path: str) -> dict[str, Any]:
        if ".." in path:
            raise KBError("no traversal")
        return {"path": path}


def serve(token: str = "", max_body: int = 1000) -> tuple[APIServer, FakeApp]:
    app = FakeApp()
    server = APIServer(app, "127.0.0.1", 0, token, max_body)
    server.start()
    return server, app


@pytest.fixture
def api() -> Iterator[tuple[APIServer, FakeApp]]:
    server, app = serve()
    yield server, app
    server.stop()


def call(server: APIServer, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def post(server: APIServer, path: str, payload: Any) -> tuple[int, dict[str, Any]]:
    return call(server, "POST", path, json.dumps(payload).encode(),
                {"Content-Type": "application/json"})


def test_query_passes_fields(api) -> None:
    server, app = api
    status, body = post(server, "/api/query", {"text": "cats", "mode": "sparse", "k": 3})
    assert status == 200 and body["query"] == "cats"
    assert app.calls == [("query", ("cats", "sparse", 3, False))]


@pytest.mark.parametrize("payload, fragment", [
    ({"text": 3}, "type str"),
    ({"text": "x", "k": "5"}, "type int"),
    ({"text": "x", "k": True}, "type int"),
    ({"text": "x", "k": 0}, "between"),
    ({"text": "x", "summarize": "yes"}, "type bool"),
    ({"text": "x", "colour": "red"}, "unknown field"),
    ({"mode": "sparse"}, "missing field"),
    (["text"], "JSON object"),
])
def test_bad_query_bodies_are_400(api, payload: Any, fragment: str) -> None:
    status, body = post(api[0], "/api/query", payload)
    assert status == 400 and fragment in body["error"]


def test_malformed_json_and_missing_length(api) -> None:
    server, _ = api
    status, body = call(server, "POST", "/api/query", b"{not json",
                        {"Content-Type": "application/json"})
    assert status == 400 and "malformed JSON" in body["error"]
    status, body = call(server, "POST", "/api/query", b"\xff\xfe",
                        {"Content-Type": "application/json"})
    assert status == 400


def test_huge_body_is_413(api) -> None:
    status, body = post(api[0], "/api/query", {"text": "x" * 5000})
    assert status == 413 and "limit" in body["error"]


def test_routes_methods_and_nodes(api) -> None:
    server, _ = api
    assert call(server, "GET", "/api/nowhere")[0] == 404
    assert call(server, "DELETE", "/api/status")[0] == 405
    assert call(server, "GET", "/api/query")[0] == 405
    assert call(server, "GET", "/api/tree")[1]["id"] == 1
    assert call(server, "GET", "/api/tree/7")[1]["id"] == 7
    status, body = call(server, "GET", "/api/tree/99")
    assert status == 404 and "99" in body["error"]
    assert call(server, "GET", "/api/tree/../../etc")[0] == 404
    assert call(server, "GET", "/api/tree/abc")[0] == 404


def test_kb_errors_are_400_and_bugs_500_without_killing_the_server(api) -> None:
    server, _ = api
    status, body = post(server, "/api/query", {"text": "  "})
    assert status == 400 and body["error"] == "the query is empty"
    status, body = post(server, "/api/query", {"text": "boom"})
    assert status == 500 and "RuntimeError" in body["error"]
    assert call(server, "GET", "/api/health")[0] == 200


def test_token_required_on_every_request() -> None:
    server, _ = serve(token="s3cret")
    try:
        assert call(server, "GET", "/api/health")[0] == 401
        wrong = {"Authorization": "Bearer nope"}
        assert call(server, "GET", "/api/status", headers=wrong)[0] == 401
        right = {"Authorization": "Bearer s3cret"}
        assert call(server, "GET", "/api/status", headers=right)[0] == 200
        assert call(server, "GET", "/api/nowhere")[0] == 401
    finally:
        server.stop()


def test_non_loopback_needs_a_token() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    with pytest.raises(KBError, match="without a token"):
        APIServer(FakeApp(), "0.0.0.0", 0, "")
    server = APIServer(FakeApp(), "0.0.0.0", 0, "tok")
    server.stop()

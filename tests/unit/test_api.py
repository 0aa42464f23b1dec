"""The HTTP API layer against a fake application: routing, validation, auth, errors."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import ManualClock, wait_until

from psirag_kb.errors import KBError, NodeNotFound
from psirag_kb.service.api import APIServer
from psirag_kb.serving.auth import FailureLimiter, TokenError, check_token, is_loopback


class FakeApp:
    """Records calls; node 7 exists, 'boom' raises a bug, empty text a KBError."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def health(self) -> dict[str, Any]:
        return {"ok": True, "pid": 1}

    def status(self, access: Any = None) -> dict[str, Any]:
        return {"files": {}, "daemon": {"pid": 1}}

    def query(self, text: str, mode: str | None, k: int | None, summarize: bool,
              within: list[str] | None = None, access: Any = None) -> dict:
        self.calls.append(("query", (text, mode, k, summarize, within)))
        if text == "boom":
            raise RuntimeError("a bug")
        if not text.strip():
            raise KBError("the query is empty")
        return {"query": text, "mode": mode or "hybrid", "results": []}

    def node(self, node_id: int | None, access: Any = None) -> dict[str, Any]:
        if node_id not in (None, 7):
            raise NodeNotFound(f"no tree node {node_id}")
        return {"id": node_id or 1, "children": []}

    def chunk(self, chunk_id: int, neighbours: int = 0, access: Any = None) -> dict[str, Any]:
        if chunk_id != 5:
            raise NodeNotFound(f"no chunk {chunk_id}")
        return {"chunk_id": chunk_id, "neighbours": neighbours}

    def reindex(self, path: str, access: Any = None) -> dict[str, Any]:
        if ".." in path:
            raise KBError("no traversal")
        return {"path": path}


TOKEN = "unit-test-token-" + "t" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def serve(token: str = TOKEN, max_body: int = 1000, host: str = "127.0.0.1",
          **options: Any) -> tuple[APIServer, FakeApp]:
    app = FakeApp()
    server = APIServer(app, host, 0, token, max_body, **options)
    server.start()
    return server, app


@pytest.fixture
def api() -> Iterator[tuple[APIServer, FakeApp]]:
    server, app = serve()
    yield server, app
    server.stop()


def call(server: APIServer, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """One request with the token (unless `headers` are given) on a fresh connection."""
    port = server.server_address[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=AUTH if headers is None else headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def post(server: APIServer, path: str, payload: Any) -> tuple[int, dict[str, Any]]:
    return call(server, "POST", path, json.dumps(payload).encode(),
                {"Content-Type": "application/json", **AUTH})


def test_query_passes_fields(api) -> None:
    server, app = api
    status, body = post(server, "/api/query", {"text": "cats", "mode": "sparse", "k": 3})
    assert status == 200 and body["query"] == "cats"
    assert app.calls == [("query", ("cats", "sparse", 3, False, None))]
    status, body = post(server, "/api/query", {"text": "cats", "in": ["/notes", "/a/b.md"]})
    assert status == 200 and app.calls[-1] == ("query", ("cats", None, None, False,
                                                          ["/notes", "/a/b.md"]))


@pytest.mark.parametrize("payload, fragment", [
    ({"text": 3}, "type str"),
    ({"text": "x", "k": "5"}, "type int"),
    ({"text": "x", "k": True}, "type int"),
    ({"text": "x", "k": 0}, "between"),
    ({"text": "x", "summarize": "yes"}, "type bool"),
    ({"text": "x", "colour": "red"}, "unknown field"),
    ({"mode": "sparse"}, "missing field"),
    (["text"], "JSON object"),
    ({"text": "x", "in": "/notes"}, "type list"),
    ({"text": "x", "in": []}, "1 to"),
    ({"text": "x", "in": [3]}, "list of strings"),
    ({"text": "x", "in": ["notes"]}, "absolute"),
    ({"text": "x", "in": ["/a\x00b"]}, "absolute"),
])
def test_bad_query_bodies_are_400(api, payload: Any, fragment: str) -> None:
    status, body = post(api[0], "/api/query", payload)
    assert status == 400 and fragment in body["error"], body


def test_malformed_json_and_missing_length(api) -> None:
    server, _ = api
    status, body = call(server, "POST", "/api/query", b"{not json",
                        {"Content-Type": "application/json", **AUTH})
    assert status == 400 and "malformed JSON" in body["error"]
    status, body = call(server, "POST", "/api/query", b"\xff\xfe",
                        {"Content-Type": "application/json", **AUTH})
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
    assert call(server, "GET", "/api/chunk/5?neighbours=2") == (200, {"chunk_id": 5,
                                                                       "neighbours": 2})
    assert call(server, "GET", "/api/chunk/5")[1]["neighbours"] == 0
    assert call(server, "GET", "/api/chunk/6")[0] == 404
    assert call(server, "GET", "/api/chunk/5?neighbours=x")[0] == 400


def test_kb_errors_are_400_and_bugs_500_without_killing_the_server(api) -> None:
    server, _ = api
    status, body = post(server, "/api/query", {"text": "  "})
    assert status == 400 and body["error"] == "the query is empty"
    status, body = post(server, "/api/query", {"text": "boom"})
    assert status == 500 and "RuntimeError" in body["error"]
    assert call(server, "GET", "/api/health")[0] == 200


def test_token_required_on_every_route_but_health_on_loopback(api) -> None:
    server, _ = api
    assert call(server, "GET", "/api/health", headers={}) == (200, {"ok": True,
                                                                     "state": "serving"})
    assert call(server, "GET", "/api/health")[1] == {"ok": True, "pid": 1}
    for path in ("/api/status", "/api/tree", "/api/nowhere", "/mcp", "/api/chunk/5"):
        status, body = call(server, "GET", path, headers={})
        assert status == 401 and "token" in body["error"], path
    wrong = {"Authorization": "Bearer " + "n" * 48}
    assert call(server, "GET", "/api/status", headers=wrong)[0] == 401
    assert call(server, "GET", "/api/health", headers=wrong)[0] == 401
    assert call(server, "GET", "/api/status")[0] == 200


@pytest.mark.parametrize("host", ["evil.example", "attacker.com:8765", "localhost.evil.com",
                                  "127.0.0.1.nip.io"])
def test_rebinding_hosts_are_refused(api, host: str) -> None:
    status, body = call(api[0], "GET", "/api/status", headers={"Host": host, **AUTH})
    assert status == 403 and "Host" in body["error"]
    status, _ = call(api[0], "GET", "/api/health", headers={"Host": host})
    assert status == 403


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8765", "localhost:8765", "[::1]:1",
                                  "LOCALHOST", "app.localhost"])
def test_own_hosts_are_served(api, host: str) -> None:
    assert call(api[0], "GET", "/api/status", headers={"Host": host, **AUTH})[0] == 200


@pytest.mark.parametrize("origin", ["https://evil.example", "http://attacker.com:8765", "null",
                                    "file://", "chrome-extension://abc"])
def test_cross_origin_browser_requests_are_refused(api, origin: str) -> None:
    status, body = call(api[0], "GET", "/api/status", headers={"Origin": origin, **AUTH})
    assert status == 403 and "cross-origin" in body["error"]
    status, _ = post_with(api[0], {"Origin": origin})
    assert status == 403


def test_same_origin_and_fetch_metadata(api) -> None:
    server = api[0]
    port = server.server_address[1]
    assert post_with(server, {"Origin": f"http://127.0.0.1:{port}"})[0] == 200
    assert post_with(server, {"Origin": f"http://localhost:{port}"})[0] == 200
    assert post_with(server, {"Origin": f"http://[::1]:{port}"})[0] == 200
    assert post_with(server, {"Sec-Fetch-Site": "cross-site"})[0] == 403


def test_origins_on_other_ports_and_addresses_are_refused(api) -> None:
    """A page served by another local program, or by any other address, is not this server."""
    server = api[0]
    port = server.server_address[1]
    other = port + 1 if port < 65535 else port - 1
    for origin in (f"http://127.0.0.1:{other}", f"http://localhost:{other}",
                   f"http://[::1]:{other}", "http://127.0.0.1", "http://localhost",
                   "http://10.0.0.1", f"http://10.0.0.1:{port}", f"http://127.0.0.2:{port}",
                   f"http://app.localhost:{other}", f"http://127.0.0.1:{port}/path"):
        status, body = post_with(server, {"Origin": origin})
        assert status == 403 and "cross-origin" in body["error"], origin


def test_the_origin_the_server_is_reached_under_is_its_own(api) -> None:
    """Behind a TLS proxy the Host it forwards and the browser's https origin agree."""
    server = api[0]
    assert post_with(server, {"Host": "192.0.2.7:8443", "Origin": "https://192.0.2.7:8443"})[0] \
        == 200
    assert post_with(server, {"Host": "192.0.2.7", "Origin": "https://192.0.2.7"})[0] == 200
    assert post_with(server, {"Host": "192.0.2.7:8443", "Origin": "https://192.0.2.7"})[0] == 403
    assert post_with(server, {"Host": "192.0.2.7", "Origin": "https://192.0.2.8"})[0] == 403


def test_allowed_hosts_origins() -> None:
    server, _ = serve(allowed_hosts=("kb.example.org", "wiki.example.org:8443", "localhost:3000"))
    try:
        assert post_with(server, {"Origin": "https://kb.example.org"})[0] == 200
        assert post_with(server, {"Origin": "http://localhost:3000"})[0] == 200
        assert post_with(server, {"Origin": "http://localhost:3001"})[0] == 403
        assert post_with(server, {"Origin": "https://wiki.example.org:8443"})[0] == 200
        for origin in ("https://kb.example.org:444", "https://wiki.example.org",
                       "https://evil.example.org", "http://10.0.0.1"):
            assert post_with(server, {"Origin": origin})[0] == 403, origin
    finally:
        server.stop()


def post_with(server: APIServer, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    return call(server, "POST", "/api/query", json.dumps({"text": "cats"}).encode(),
                {"Content-Type": "application/json", **AUTH, **headers})


def test_allowed_hosts_and_machine_names_off_loopback() -> None:
    server, _ = serve(host="0.0.0.0", allowed_hosts=("kb.example.org",))
    try:
        assert call(server, "GET", "/api/status", headers={"Host": "kb.example.org", **AUTH})[0] \
            == 200
        own = socket.gethostname()
        assert call(server, "GET", "/api/status", headers={"Host": own, **AUTH})[0] == 200
        assert call(server, "GET", "/api/status", headers={"Host": "evil.example", **AUTH})[0] \
            == 403
    finally:
        server.stop()


def test_wrong_tokens_are_rate_limited_per_address() -> None:
    server, _ = serve(failures_per_minute=3)
    try:
        wrong = {"Authorization": "Bearer " + "w" * 40}
        assert [call(server, "GET", "/api/status", headers=wrong)[0] for _ in range(3)] == \
            [401] * 3
        status, body = call(server, "GET", "/api/status", headers=wrong)
        assert status == 429 and "retry in" in body["error"]
        assert call(server, "GET", "/api/status", headers={})[0] == 429  # no token: limited too
        assert call(server, "GET", "/api/health", headers={})[0] == 200  # liveness stays open
    finally:
        server.stop()


def test_wrong_tokens_never_lock_out_the_right_token() -> None:
    """On loopback every client is 127.0.0.1: another process's wrong tokens must not lock out
    the user's own CLI, TUI and MCP, which send the right one."""
    server, _ = serve(failures_per_minute=3)
    try:
        wrong = {"Authorization": "Bearer " + "w" * 40}
        codes = [call(server, "GET", "/api/status", headers=wrong)[0] for _ in range(30)]
        assert codes == [401] * 3 + [429] * 27
        assert call(server, "GET", "/api/status")[0] == 200
        assert post(server, "/api/query", {"text": "cats"})[0] == 200
        assert call(server, "GET", "/api/health")[1] == {"ok": True, "pid": 1}
        assert call(server, "GET", "/api/status", headers=wrong)[0] == 429  # still limited
    finally:
        server.stop()


def test_failure_limiter_forgets_after_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()  # the limiter's window runs on this clock, moved by hand
    monkeypatch.setattr(f"{FailureLimiter.__module__}.time", clock)
    limiter = FailureLimiter(limit=2, window_s=0.2)
    limiter.failed("a")
    clock.now += 0.05
    limiter.failed("a")
    assert limiter.retry_after("a") == pytest.approx(0.15) and limiter.retry_after("b") == 0
    clock.now += 0.1  # the first failure is 0.15 s old: still inside the window
    assert limiter.retry_after("a") == pytest.approx(0.05)
    clock.now += 0.06  # now it is out of the window, and one failure is under the limit
    assert limiter.retry_after("a") == 0
    limiter.failed("a")  # two inside the window again: the older one, 0.16 s old, counts
    assert limiter.retry_after("a") == pytest.approx(0.04)


def test_keep_alive_serves_many_requests_on_one_connection(api) -> None:
    server = api[0]
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    try:
        for _ in range(5):
            connection.request("GET", "/api/status", headers=AUTH)
            response = connection.getresponse()
            assert response.status == 200 and json.loads(response.read())["files"] == {}
        assert connection.sock is not None  # the same socket all along
    finally:
        connection.close()


def refused(answer: tuple[int, Any]) -> tuple[int, Any] | None:
    """A (status, body) answer when it is a 503, else None (to wait for one)."""
    return answer if answer[0] == 503 else None


def test_connections_beyond_the_limit_are_refused() -> None:
    server, _ = serve(max_connections=2)
    held = []
    try:
        for _ in range(2):
            held.append(socket.create_connection(("127.0.0.1", server.server_address[1])))
        # the server counts a connection once it has accepted it: wait for that, not a while
        status, body = wait_until(lambda: refused(call(server, "GET", "/api/health", headers={})),
                                  message="a third connection refused")
        assert status == 503 and "connections" in body["error"]
        for sock in held:
            sock.close()
        held.clear()
        wait_until(lambda: call(server, "GET", "/api/health", headers={})[0] == 200,
                   message="a connection served again once the held ones closed")
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_tokens_must_be_long_enough() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    with pytest.raises(KBError, match="token"):
        APIServer(FakeApp(), "0.0.0.0", 0, "")
    with pytest.raises(TokenError, match="at least 32"):
        check_token("s3cret", "[api] token")
    assert check_token(" " + "x" * 32 + "\n", "x") == "x" * 32

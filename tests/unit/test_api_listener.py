"""The API's listener before the real application: health 200 with the state, ready
and every route 503 with the reason (the /v1 routes in OpenAI's shape), a foreign Host refused;
then the same port serves the real application."""

from __future__ import annotations

import http.client
import json
from typing import Any

from psirag_kb.service.api import APIServer, Listener
from psirag_kb.service.starting import Starting
from tests.unit.test_api import AUTH, TOKEN, FakeApp


def request(port: int, method: str, path: str,
            headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=b"{}" if method == "POST" else None,
                           headers=headers if headers is not None else AUTH)
        response = connection.getresponse()
        return response.status, response, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def test_the_listener_answers_from_the_starting_state_then_hands_over() -> None:
    starting = Starting()
    listener = Listener("127.0.0.1", 0, starting)
    listener.start()
    port = listener.server_address[1]
    try:
        starting.set("migrating", "upgrading the database schema from version 4 to 8")
        status, _, health = request(port, "GET", "/api/health", {})
        assert status == 200 and health == {"ok": True, "state": "migrating", "reason":
                                            "upgrading the database schema from version 4 to 8"}
        status, response, ready = request(port, "GET", "/api/ready", {})
        assert status == 503 and response.getheader("Retry-After") == "5"
        assert ready == {"ready": False, "state": "migrating",
                         "reasons": ["upgrading the database schema from version 4 to 8"]}
        for method, path in (("GET", "/api/status"), ("POST", "/api/query"),
                             ("GET", "/api/nowhere"), ("POST", "/mcp")):
            status, response, refused = request(port, method, path)
            assert status == 503 and refused["state"] == "migrating", (path, refused)
            assert "not serving yet (migrating: upgrading" in refused["error"]
            assert response.getheader("Connection") == "close"
        status, _, refused = request(port, "GET", "/v1/models")
        assert status == 503 and refused["error"]["type"] == "server_error"
        assert "version 4 to 8" in refused["error"]["message"]
        status, _, refused = request(port, "GET", "/api/ready", {"Host": "evil.example"})
        assert status == 403
        server = APIServer(FakeApp(), "127.0.0.1", 0, TOKEN, listener=listener)
        server.start()
        assert server.server_address[1] == port  # the same socket, never closed
        status, _, health = request(port, "GET", "/api/health", {})
        assert status == 200 and health == {"ok": True}  # the real app: no state without a token
        assert starting.get()[0] == "serving"
        status, _, shown = request(port, "GET", "/api/status")
        assert status == 200 and shown["daemon"] == {"pid": 1}
    finally:
        listener.stop()


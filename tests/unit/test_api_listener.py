"""The API's listener before the real application: health 200 with the state, ready
and every route 503 with the reason (the /v1 routes in OpenAI's shape), a foreign Host refused;
then the same port serves the real application."""

from __future__ import annotations

import http.client
import json
from typing import Any

from psirag_kb.access import OWNER, Access
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


MONITOR = "monitor-token-" + "m" * 32
READER = "reader-token-" + "r" * 32
REASON = "upgrading the database schema from version 4 to 8"


def door(given: str) -> Access | None:
    """The admin token, a monitor's and a reader's (as the daemon's EarlyDoor finds them)."""
    return {f"Bearer {TOKEN}": OWNER, f"Bearer {MONITOR}": Access("mo", role="monitor"),
            f"Bearer {READER}": Access("ro", role="reader")}.get(given)


def test_the_listener_answers_from_the_starting_state_then_hands_over() -> None:
    starting = Starting()
    listener = Listener("127.0.0.1", 0, starting, door=door, failures_per_minute=2)
    listener.start()
    port = listener.server_address[1]
    try:
        starting.set("migrating", REASON)
        for token in (TOKEN, MONITOR):  # the reason for the admin token and a monitor
            bearer = {"Authorization": f"Bearer {token}"}
            status, response, health = request(port, "GET", "/api/health", bearer)
            assert status == 200 and health == {"ok": True, "state": "migrating",
                                                "reason": REASON}
            assert response.getheader("Retry-After") == "5"
            status, response, ready = request(port, "GET", "/api/ready", bearer)
            assert status == 503 and response.getheader("Retry-After") == "5"
            assert ready == {"ready": False, "state": "migrating", "reasons": [REASON]}
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
        assert status == 200 and health == {"ok": True, "state": "serving"}  # the real app
        assert starting.get()[0] == "serving"
        status, _, shown = request(port, "GET", "/api/status")
        assert status == 200 and shown["daemon"] == {"pid": 1}
    finally:
        listener.stop()


def test_a_stranger_learns_only_the_state_word_in_every_starting_state() -> None:
    starting = Starting()
    listener = Listener("127.0.0.1", 0, starting, door=door, failures_per_minute=2)
    listener.start()
    port = listener.server_address[1]
    try:
        for state in ("starting", "waiting", "restoring", "migrating"):
            starting.set(state, f"{REASON} (pid 4242, /srv/data)")
            for caller in ({}, {"Authorization": f"Bearer {READER}"}):
                status, response, health = request(port, "GET", "/api/health", caller)
                assert status == 200 and health == {"ok": True, "state": state}
                assert response.getheader("Retry-After") == "5"
                status, response, ready = request(port, "GET", "/api/ready", caller)
                assert status == 503 and ready == {"ready": False, "state": state}
                assert response.getheader("Retry-After") == "5"
            # the reader's token is known: 503 with the state word, never the reason
            status, _, refused = request(port, "GET", "/api/status",
                                         {"Authorization": f"Bearer {READER}"})
            assert status == 503 and "4242" not in refused["error"], refused
            # a stranger gets 401 on every other route, in OpenAI's shape on /v1
            for method, path in (("GET", "/api/status"), ("POST", "/api/query"),
                                 ("GET", "/api/nowhere"), ("POST", "/mcp"),
                                 ("OPTIONS", "/api/health"), ("POST", "/api/health")):
                status, response, refused = request(port, method, path, {})
                assert status == 401 and "bearer token" in refused["error"], (path, refused)
                assert response.getheader("WWW-Authenticate") == "Bearer"
                assert "4242" not in json.dumps(refused) and state not in json.dumps(refused)
            status, _, refused = request(port, "GET", "/v1/models", {})
            assert status == 401 and refused["error"]["type"] == "authentication_error"
            assert refused["error"]["code"] == "invalid_api_key"
        # a wrong token: 401 in the same words, then the limiter
        wrong = {"Authorization": "Bearer " + "w" * 43}
        codes = [request(port, "GET", "/api/health", wrong)[0] for _ in range(3)]
        assert codes == [401, 401, 429]
        assert request(port, "GET", "/api/health", AUTH)[0] == 200  # never the right one
    finally:
        listener.stop()

"""/api/me/tokens on the page's origin answers as the API does (serving.mytokens): the table's
methods, its body model's messages, the same statuses and audit lines."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.testclient import TestClient

from psirag_kb.people import People
from psirag_kb.serving.audit import AuditLog
from psirag_kb.serving.auth import FailureLimiter, HostPolicy
from psirag_kb.web.app import build_web_app
from psirag_kb.web.site import Web


def page(tmp_path: Path) -> tuple[TestClient, People, str]:
    people = People(tmp_path)
    web = Web(None, "o" * 43, people, FailureLimiter(), HostPolicy("127.0.0.1"), 60,
              audit=AuditLog(tmp_path))
    hand = people.add("dee", "reader", ["/srv/eng"])
    return TestClient(build_web_app(web), base_url="http://127.0.0.1"), people, hand


def test_the_pages_token_api_answers_as_the_apis(tmp_path: Path) -> None:
    client, _, hand = page(tmp_path)
    bearer = {"Authorization": f"Bearer {hand}"}
    put = client.put("/api/me/tokens", headers=bearer)
    assert put.status_code == 405
    assert put.json() == {"error": "PUT is not allowed on /api/me/tokens; use GET, POST"}
    assert client.get("/api/me/tokens/ci", headers=bearer).json() == {
        "error": "GET is not allowed on /api/me/tokens/ci; use DELETE"}
    assert client.get("/api/me/tokens").status_code == 401
    made = client.post("/api/me/tokens", json={"name": "ci"}, headers=bearer)
    assert made.status_code == 200 and made.json()["name"] == "ci"
    assert client.post("/api/me/tokens", json={"name": "ci"}, headers=bearer).status_code == 400
    unknown = client.post("/api/me/tokens", json={"nom": "x"}, headers=bearer)
    assert unknown.status_code == 400
    assert unknown.json() == {"error": "unknown field(s) nom; known: name"}
    typed = client.post("/api/me/tokens", json={"name": 3}, headers=bearer)
    assert typed.json() == {"error": "field 'name' must be of type str"}
    assert client.post("/api/me/tokens", content=b"{", headers=bearer).status_code == 400
    big = client.post("/api/me/tokens", json={"name": "x" * 5000}, headers=bearer)
    assert big.status_code == 413
    listed = client.get("/api/me/tokens", headers=bearer).json()
    assert [t["name"] for t in listed["tokens"]] == ["ci"]
    assert client.delete("/api/me/tokens/ci", headers=bearer).json() == {"revoked": "ci"}
    assert client.delete("/api/me/tokens/ci", headers=bearer).status_code == 404
    owner = client.post("/api/me/tokens", json={"name": "x"},
                        headers={"Authorization": "Bearer " + "o" * 43})
    assert owner.status_code == 401  # the owner is no person here
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    changes = [(line["person"], line["action"], line.get("scope")) for line in lines
               if line["action"].startswith("token")]
    assert changes[0] == ("dee", "token make", "ci")
    assert ("dee", "token revoke", "ci") in changes


def test_a_method_a_page_path_does_not_serve_is_405_naming_those_it_does(
        tmp_path: Path) -> None:
    client, _, _ = page(tmp_path)
    served = {"/": "GET, HEAD", "/signin": "GET, HEAD, POST", "/tokens": "GET, HEAD, POST",
              "/chat": "GET, HEAD, POST", "/chat/c1": "GET, HEAD, POST", "/signout": "POST",
              "/api/me/tokens": "GET, POST", "/api/me/tokens/ci": "DELETE"}
    for path, allowed in served.items():
        for method in ("OPTIONS", "TRACE", "FOO", "PUT"):
            refused = client.request(method, path)
            assert refused.status_code == 405, (method, path)
            named = set(refused.headers["allow"].split(", "))
            assert named == set(allowed.split(", ")), (method, path)

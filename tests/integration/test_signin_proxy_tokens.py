"""A trusted sign-in proxy's headers (believed from 127.0.0.1, ignored from 127.0.0.2, over real
sockets) on the API and the page; personal tokens through /api/me/tokens with a Bearer token or
the page's session and its CSRF token."""

from __future__ import annotations

import dataclasses
import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from daemon_helpers import AuditTail, serving_notes

from psirag_kb.config import parse_config

NOTES = {"eng/apples.md": "# Apples\napples in the orchard\n",
         "ops/bananas.md": "# Bananas\nbanana crates on Mondays\n"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A daemon behind a sign-in proxy at 127.0.0.1, with groups eng and ops."""
    base = tmp_path_factory.mktemp("proxied")

    def configure(config: Any, docs: Path) -> Any:
        auth = parse_config({"auth": {
            "proxy": {"trusted": ["127.0.0.1/32"], "groups_header": "X-Forwarded-Groups"},
            "groups": {"eng": {"read": [str(docs / "eng")]},
                       "ops": {"role": "editor", "read": [str(docs / "ops")]},
                       "lobby": {}}}}, Path("/")).auth
        return dataclasses.replace(config, auth=auth)

    with serving_notes(base, NOTES, "apples banana", configure) as (daemon, docs):
        yield {"daemon": daemon, "docs": docs, "api": daemon.api.url,
               "web": daemon.web.url.rstrip("/")}


def call(url: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None
         = None, source: str = "127.0.0.1") -> tuple[int, Any, http.client.HTTPResponse]:
    """One request from the source address `source` (a real socket bound to it)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30,
                                            source_address=(source, 0))
    data = body if isinstance(body, bytes | str) or body is None else json.dumps(body)
    sent = dict(headers or {})
    if data is not None and "Content-Type" not in sent:
        sent["Content-Type"] = "application/json"
    connection.request(method, path, body=data, headers=sent)
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    try:
        decoded: Any = json.loads(raw)
    except ValueError:
        decoded = raw.decode("utf-8", "replace")
    return response.status, decoded, response


def files(answer: dict[str, Any]) -> list[str]:
    return sorted(Path(r["source"]).name for r in answer["results"])


QUERY = {"text": "apples banana", "mode": "sparse"}


def test_proxy_headers_are_believed_only_from_the_trusted_address(
        served: dict[str, Any]) -> None:
    ana = {"X-Forwarded-User": "ana", "X-Forwarded-Groups": "eng, nobody-knows"}
    status, answer, _ = call(served["api"], "POST", "/api/query", QUERY, ana)
    assert status == 200 and files(answer) == ["apples.md"]
    bo = {"X-Forwarded-User": "bo", "X-Forwarded-Groups": "ops"}
    assert files(call(served["api"], "POST", "/api/query", QUERY, bo)[1]) == ["bananas.md"]
    # the same headers from 127.0.0.2 are ignored: signed out
    status, answer, _ = call(served["api"], "POST", "/api/query", QUERY, bo, source="127.0.0.2")
    assert status == 401 and "bearer token" in answer["error"]
    status, page, response = call(served["web"], "GET", "/", headers=bo, source="127.0.0.2")
    assert status == 303 and response.headers["Location"].startswith("/signin")
    status, page, _ = call(served["web"], "GET", "/?q=banana&mode=sparse", headers=bo)
    assert status == 200 and 'class="who">bo<' in page and "bananas.md" in page
    assert "apples.md" not in call(served["web"], "GET", "/?q=apples&mode=sparse",
                                   headers=bo)[1]
    people = {p["name"]: p for p in served["daemon"].people.listed()}
    assert people["bo"]["source"] == "proxy" and people["bo"]["role"] == "editor"
    assert people["ana"]["groups"] == ["eng", "nobody-knows"]
    # a group change at the proxy is seen at the next request
    moved = {"X-Forwarded-User": "ana", "X-Forwarded-Groups": "ops"}
    assert files(call(served["api"], "POST", "/api/query", QUERY, moved)[1]) == ["bananas.md"]


def test_a_proxied_person_in_no_granting_group_is_refused(served: dict[str, Any]) -> None:
    audit = AuditTail(served["daemon"].data_dir)
    cy = {"X-Forwarded-User": "cy", "X-Forwarded-Groups": "lobby"}
    status, answer, _ = call(served["api"], "POST", "/api/query", QUERY, cy)
    assert status == 403 and "no group that grants" in answer["error"]
    status, page, _ = call(served["web"], "GET", "/", headers=cy)
    assert status == 403 and "no group that grants" in page
    assert [line["status"] for line in audit.lines()] == [403, 403]


def test_personal_tokens_over_the_api_with_a_bearer_token(served: dict[str, Any]) -> None:
    daemon = served["daemon"]
    hand = daemon.people.add("dee", "reader", [str(served["docs"] / "eng")])
    bearer = {"Authorization": f"Bearer {hand}"}
    status, made, _ = call(served["api"], "POST", "/api/me/tokens", {"name": "ci"}, bearer)
    assert status == 200 and made["name"] == "ci" and len(made["token"]) >= 43
    mine = {"Authorization": f"Bearer {made['token']}"}
    assert files(call(served["api"], "POST", "/api/query", QUERY, mine)[1]) == ["apples.md"]
    status, listed, _ = call(served["api"], "GET", "/api/me/tokens", headers=mine)
    assert status == 200 and [t["name"] for t in listed["tokens"]] == ["ci"]
    assert listed["tokens"][0]["last_used"] is not None and made["token"] not in json.dumps(
        listed)
    # the owner's grants of now: a new grant shows through the token at once
    daemon.people.grant("dee", [str(served["docs"] / "ops")])
    assert files(call(served["api"], "POST", "/api/query", QUERY, mine)[1]) == [
        "apples.md", "bananas.md"]
    assert call(served["api"], "POST", "/api/me/tokens", {"name": "ci"}, bearer)[0] == 400
    assert call(served["api"], "POST", "/api/me/tokens", {"nom": "x"}, bearer)[0] == 400
    status, answer, _ = call(served["api"], "POST", "/api/me/tokens", {"name": "x"}, {
        "Authorization": f"Bearer {daemon.api.token}"})
    assert status == 400 and "owner" in answer["error"]
    assert call(served["api"], "DELETE", "/api/me/tokens/ci", headers=mine)[0] == 200
    assert call(served["api"], "POST", "/api/query", QUERY, mine)[0] == 401
    assert call(served["api"], "DELETE", "/api/me/tokens/ci", headers=bearer)[0] == 404
    assert call(served["api"], "GET", "/api/me/tokens")[0] == 401


class Page:
    """A cookie-keeping client of the page (one cookie each: enough here)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cookies: dict[str, str] = {}

    def send(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
        sent = dict(headers or {})
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        status, answer, response = call(self.url, method, path, body, sent)
        for raw in response.headers.get_all("Set-Cookie") or []:
            name, value = raw.split(";", 1)[0].split("=", 1)
            self.cookies[name] = value.strip('"')
        return status, answer, response

    def sign_in(self, token: str) -> None:
        form = self.send("GET", "/signin")[1]
        csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
        status, _, _ = self.send("POST", "/signin", urlencode({"token": token, "csrf": csrf}),
                                 {"Content-Type": "application/x-www-form-urlencoded"})
        assert status == 303


def test_personal_tokens_from_the_page_session_need_its_csrf_token(
        served: dict[str, Any]) -> None:
    daemon = served["daemon"]
    hand = daemon.people.add("eve", "reader", [str(served["docs"] / "ops")])
    page = Page(served["web"])
    page.sign_in(hand)
    html = page.send("GET", "/")[1]
    csrf = re.search(r'<meta name="csrf-token" content="([^"]+)">', html).group(1)
    status, answer, _ = page.send("POST", "/api/me/tokens", {"name": "laptop"})
    assert status == 401  # the session alone is not enough
    status, answer, _ = page.send("POST", "/api/me/tokens", {"name": "laptop"},
                                  {"X-CSRF-Token": "wrong" + csrf})
    assert status == 401
    status, answer, _ = page.send("POST", "/api/me/tokens", {"name": "laptop"},
                                  {"X-CSRF-Token": csrf, "Origin": "http://evil.example"})
    assert status == 403
    status, made, _ = page.send("POST", "/api/me/tokens", {"name": "laptop"},
                                {"X-CSRF-Token": csrf, "Origin": served["web"]})
    assert status == 200 and made["name"] == "laptop"
    status, listed, _ = page.send("GET", "/api/me/tokens", headers={"X-CSRF-Token": csrf})
    assert [t["name"] for t in listed["tokens"]] == ["laptop"]
    mine = {"Authorization": f"Bearer {made['token']}"}
    assert files(call(served["api"], "POST", "/api/query", QUERY, mine)[1]) == ["bananas.md"]
    tokens_page = page.send("GET", "/tokens")[1]
    assert 'data-token="laptop"' in tokens_page and made["token"] not in tokens_page
    status, _, _ = page.send("DELETE", "/api/me/tokens/laptop", headers={"X-CSRF-Token": csrf})
    assert status == 200
    assert call(served["api"], "POST", "/api/query", QUERY, mine)[0] == 401


def test_a_proxied_persons_token_keeps_to_their_groups_in_every_mode_and_mcp_tool(
        served: dict[str, Any]) -> None:
    import asyncio

    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    fay = {"X-Forwarded-User": "fay", "X-Forwarded-Groups": "lobby|eng"}  # Authentik's "|"
    status, made, _ = call(served["api"], "POST", "/api/me/tokens", {"name": "mcp"}, fay)
    assert status == 200
    mine = {"Authorization": f"Bearer {made['token']}"}
    for mode in ("hybrid", "tree", "sparse", "dense"):
        answer = call(served["api"], "POST", "/api/query", dict(QUERY, mode=mode, k=5), mine)[1]
        assert files(answer) == ["apples.md"], mode

    async def use() -> dict[str, Any]:
        transport = streamable_http_client(served["api"] + "/mcp",
                                           http_client=create_mcp_http_client(headers=mine))
        async with Client(transport) as client:
            seen = {mode: (await client.call_tool("search", {
                "query": "apples banana", "k": 5, "mode": mode})).structured_content
                for mode in ("hybrid", "tree", "sparse", "dense")}
            seen["browse"] = (await client.call_tool("browse", {})).structured_content
            return seen

    seen = asyncio.run(use())
    for mode in ("hybrid", "tree", "sparse", "dense"):
        assert {Path(r["source"]).name for r in seen[mode]["results"]} == {"apples.md"}, mode
    assert "bananas.md" not in json.dumps(seen) and "/ops" not in json.dumps(seen)

"""The MCP server the daemon mounts at /mcp (Streamable HTTP), behind the API's token and checks."""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import serving_notes
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from psirag_kb.service.daemon import Daemon

NOTES = {
    "zebra.md": "Zebras graze on the savanna at dawn.\n",
    "okapi.md": "Okapis hide in the Ituri rainforest.\n",
}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"}}}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with serving_notes(tmp_path_factory.mktemp("mcp-http"), NOTES, "zebras okapis") as served:
        yield served[0]


def session(daemon: Daemon, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = streamable_http_client(daemon.api.url + "/mcp",
                                       http_client=create_mcp_http_client(headers=headers))
    return Client(transport)


async def _use(daemon: Daemon, token: str | None) -> dict[str, Any]:
    async with session(daemon, token) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        found = (await client.call_tool("search", {"query": "okapis rainforest",
                                                   "mode": "sparse"})).structured_content
        first = found["results"][0]
        fetched = (await client.call_tool("fetch", {"id": first["id"]})).structured_content
        root = (await client.call_tool("browse", {})).structured_content
        return {"tools": tools, "first": first, "fetched": fetched, "root": root}


def test_an_sdk_client_with_the_token_searches_fetches_and_browses(daemon: Daemon) -> None:
    used = asyncio.run(_use(daemon, daemon.api.token))
    assert {"search", "fetch", "answer", "browse", "status"} <= set(used["tools"])
    docs = Path(daemon.folders[0])
    assert used["first"]["source"] == str(docs / "okapi.md")
    assert "Ituri rainforest" in used["fetched"]["text"]
    assert used["root"]["leaves"] == len(NOTES) and used["root"]["children"]


def raw_post(daemon: Daemon, headers: dict[str, str]) -> tuple[int, str]:
    port = daemon.api.server_address[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.request("POST", "/mcp", json.dumps(INITIALIZE).encode(), {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", **headers})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_without_the_token_the_mcp_endpoint_is_refused(daemon: Daemon) -> None:
    status, body = raw_post(daemon, {})
    assert status == 401 and "token" in body
    status, body = raw_post(daemon, {"Authorization": "Bearer " + "x" * 43})
    assert status == 401
    with pytest.raises(BaseException):  # noqa: B017 - the SDK wraps the 401 in a task group
        asyncio.run(_use(daemon, None))
    status, body = raw_post(daemon, {"Authorization": f"Bearer {daemon.api.token}"})
    assert status == 200 and "serverInfo" in body


@pytest.mark.parametrize("headers, fragment", [
    ({"Host": "evil.example:8765"}, "Host"),
    ({"Origin": "https://evil.example"}, "cross-origin"),
])
def test_rebinding_host_and_foreign_origin_are_refused(daemon: Daemon, headers: dict[str, str],
                                                       fragment: str) -> None:
    status, body = raw_post(daemon, {"Authorization": f"Bearer {daemon.api.token}", **headers})
    assert status == 403 and fragment in json.loads(body)["error"]

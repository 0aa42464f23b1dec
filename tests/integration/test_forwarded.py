"""Forwarded headers change who a request is only from the peers the operator lists, judged on
the socket's address, on the API's port and the page's (real sockets bound to 127.0.0.x): the
sign-in proxy at 127.0.0.2, a reverse proxy allowed to forward at 127.0.0.3, anyone else at
127.0.0.1 or 127.0.0.4; the wrong-token limiter counts per real peer."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from daemon_helpers import AuditTail, serving_notes
from test_signin_proxy_tokens import QUERY, call, files

from psirag_kb.config import parse_config

NOTES = {"eng/apples.md": "# Apples\napples in the orchard\n",
         "ops/bananas.md": "# Bananas\nbanana crates on Mondays\n"}
SIGN_IN_PROXY, REVERSE_PROXY, STRANGER = "127.0.0.2", "127.0.0.3", "127.0.0.1"
ALICE = {"X-Forwarded-User": "alice", "X-Forwarded-Groups": "eng"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A daemon trusting a sign-in proxy at 127.0.0.2 and forwarded headers from 127.0.0.3 and
    the sign-in proxy (which then names the browser's address), three wrong tokens a minute per
    client."""
    base = tmp_path_factory.mktemp("forwarded")

    def configure(config: Any, docs: Path) -> Any:
        parsed = parse_config({
            "api": {"forwarded_allow": [REVERSE_PROXY, SIGN_IN_PROXY],
                    "auth_failures_per_minute": 3},
            "auth": {"proxy": {"trusted": [SIGN_IN_PROXY]},
                     "groups": {"eng": {"read": [str(docs / "eng")]}}}}, Path("/"))
        api = dataclasses.replace(config.api, forwarded_allow=parsed.api.forwarded_allow,
                                  auth_failures_per_minute=3)
        return dataclasses.replace(config, auth=parsed.auth, api=api)

    with serving_notes(base, NOTES, "apples banana", configure) as (daemon, docs):
        yield {"daemon": daemon, "api": daemon.api.url, "web": daemon.web.url.rstrip("/")}


def signed_in_page(served: dict[str, Any], source: str, headers: dict[str, str]) -> bool:
    """Whether the page shows its search to this request (else it sends it to sign in)."""
    status, page, response = call(served["web"], "GET", "/", headers=headers, source=source)
    assert status in (200, 303), (status, page)
    return status == 200 and 'class="who">alice<' in page


def test_forwarded_headers_from_a_local_client_sign_nobody_in(served: dict[str, Any]) -> None:
    # the attack: a local client claims to be the sign-in proxy in X-Forwarded-For
    claimed = {**ALICE, "X-Forwarded-For": SIGN_IN_PROXY}
    status, answer, _ = call(served["api"], "POST", "/api/query", QUERY, claimed,
                             source=STRANGER)
    assert status == 401 and "bearer token" in answer["error"]
    assert not signed_in_page(served, STRANGER, claimed)
    # an allowed reverse proxy forwarding for the sign-in proxy's address is not that proxy
    for port in ("api", "web"):
        assert call(served[port], "POST" if port == "api" else "GET",
                    "/api/query" if port == "api" else "/", QUERY if port == "api" else None,
                    claimed, source=REVERSE_PROXY)[0] in (401, 303), port
    assert not signed_in_page(served, REVERSE_PROXY, claimed)
    # the sign-in proxy's socket is believed, whatever client it forwards for (its forwarded
    # address replaces the client's, never the socket's that the proxy check judges)
    forwarding = {**ALICE, "X-Forwarded-For": "10.9.9.9"}
    status, answer, _ = call(served["api"], "POST", "/api/query", QUERY, forwarding,
                             source=SIGN_IN_PROXY)
    assert status == 200 and files(answer) == ["apples.md"]
    assert signed_in_page(served, SIGN_IN_PROXY, forwarding)


def test_the_client_address_is_forwarded_only_by_an_allowed_proxy(
        served: dict[str, Any]) -> None:
    audit = AuditTail(served["daemon"].data_dir)
    wrong = {"Authorization": "Bearer " + "w" * 43, "X-Forwarded-For": "10.1.2.3"}
    assert call(served["api"], "GET", "/api/status", headers=wrong, source=STRANGER)[0] == 401
    assert call(served["api"], "GET", "/api/status", headers=wrong,
                source=REVERSE_PROXY)[0] == 401
    assert [line["client"] for line in audit.lines()] == [STRANGER, "10.1.2.3"]
    # the page: X-Forwarded-Proto https from the allowed proxy makes the cookies Secure
    https = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "10.1.2.4"}
    for source, secure in ((STRANGER, False), (REVERSE_PROXY, True)):
        _, _, response = call(served["web"], "GET", "/signin", headers=https, source=source)
        cookie = response.headers["Set-Cookie"]
        assert ("secure" in cookie.lower()) is secure, (source, cookie)


def wrong_sign_in(served: dict[str, Any], source: str, forwarded_for: str) -> int:
    """The status of a page sign-in with a wrong token (the form's CSRF token right)."""
    headers = {"X-Forwarded-For": forwarded_for}
    _, form, response = call(served["web"], "GET", "/signin", headers=headers, source=source)
    csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
    cookie = response.headers["Set-Cookie"].split(";", 1)[0]
    status, _, _ = call(served["web"], "POST", "/signin",
                        urlencode({"token": "w" * 43, "csrf": csrf}),
                        {**headers, "Cookie": cookie,
                         "Content-Type": "application/x-www-form-urlencoded"}, source=source)
    return status


def test_the_wrong_token_limiter_counts_the_real_peer_under_rotating_forwarded_for(
        served: dict[str, Any]) -> None:
    def wrong(source: str, forwarded_for: str) -> int:
        return call(served["api"], "GET", "/api/status", headers={
            "Authorization": "Bearer " + "x" * 43, "X-Forwarded-For": forwarded_for},
            source=source)[0]

    # from a peer nobody allows to forward: one bucket, whatever X-Forwarded-For says
    statuses = [wrong("127.0.0.4", f"10.0.0.{n}") for n in range(5)]
    assert statuses == [401, 401, 401, 429, 429]
    assert wrong_sign_in(served, "127.0.0.4", "10.0.1.1") == 429  # the page shares it
    statuses = [wrong_sign_in(served, "127.0.0.5", f"10.0.2.{n}") for n in range(4)]
    assert statuses == [401, 401, 401, 429]
    # behind the allowed reverse proxy each forwarded client has its own bucket
    assert [wrong(REVERSE_PROXY, f"10.0.3.{n}") for n in range(5)] == [401] * 5
    assert [wrong(REVERSE_PROXY, "10.0.4.1") for _ in range(4)] == [401, 401, 401, 429]
    assert wrong(REVERSE_PROXY, "10.0.4.2") == 401

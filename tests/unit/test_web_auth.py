"""The page's sessions under [auth]: bounded by session_hours, provider sessions following the
person's record, the proxy trusting only its addresses."""

from __future__ import annotations

from pathlib import Path

from psirag_kb.config import AuthConfig, GroupConfig, ProxyConfig
from psirag_kb.people import People
from psirag_kb.serving.auth import FailureLimiter, HostPolicy
from psirag_kb.serving.proxy import Proxy
from psirag_kb.web.site import Web

GROUPS = (GroupConfig("eng", "reader", ("/srv/eng",)),)


def web(tmp_path: Path, minutes: int, hours: int, proxy: Proxy | None = None) -> Web:
    return Web(None, "o" * 43, People(tmp_path), FailureLimiter(), HostPolicy("127.0.0.1"),
               minutes, auth=AuthConfig(session_hours=hours, groups=GROUPS), proxy=proxy)


def test_sessions_end_after_the_shorter_of_session_hours_and_minutes(tmp_path: Path) -> None:
    assert web(tmp_path, 480, 2).sessions.lifetime_s == 2 * 3600
    assert web(tmp_path, 60, 12).sessions.lifetime_s == 3600
    assert web(tmp_path, 24 * 60, 12).sessions.lifetime_s == 12 * 3600


def test_a_provider_session_follows_the_persons_record(tmp_path: Path) -> None:
    page = web(tmp_path, 480, 12)
    page.people.sign_in("ana", "oidc", ["eng"], GROUPS)
    _, session = page.sessions.open("ana", None, "oidc")
    assert not session.owner
    assert page.access_of(session).grants == ("/srv/eng",)
    page.people.revoke("ana")
    assert page.access_of(session) is None
    _, owner = page.sessions.open("owner", None)
    assert owner.owner and page.access_of(owner).everything


def test_proxy_headers_count_only_from_trusted_addresses_and_networks(
        tmp_path: Path) -> None:
    people = People(tmp_path)
    proxy = Proxy(ProxyConfig(trusted=("10.0.0.0/8", "::1")), GROUPS, people)
    assert proxy.trusted("10.1.2.3") and proxy.trusted("::ffff:10.1.2.3")
    assert proxy.trusted("::1") and not proxy.trusted("127.0.0.1")
    assert not proxy.trusted("garbage") and not proxy.trusted(None)
    headers = {"x-forwarded-user": "bo", "x-forwarded-groups": "eng"}
    assert proxy.access("127.0.0.1", headers) is None
    assert proxy.access("10.0.0.1", {"x-forwarded-groups": "eng"}) is None
    assert proxy.access("10.0.0.1", headers).grants == ("/srv/eng",)

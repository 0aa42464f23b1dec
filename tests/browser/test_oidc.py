"""Sign-in through a real OpenID provider (npm's oidc-provider on 127.0.0.2, another site than
the page on 127.0.0.1) in headless Chromium: each person sees only their groups' folders, a
group change at the provider shows at the next sign-in (through their tokens too), forged and
replayed callbacks sign nobody in, and a dead provider leaves everything else working."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from daemon_helpers import AuditTail, api, serving_notes
from oidc_provider import Provider, installed

from psirag_kb.cli import main

NOTES = {
    "eng/apples.md": "# Orchards\nApples grow in orchards; apple trees flower in spring.\n",
    "ops/bananas.md": "# Bananas\nBanana crates leave the warehouse on Mondays.\n",
}
GROUPS = {"eng": ["ana"], "ops": ["bo"]}


@pytest.fixture(scope="module")
def realm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The provider (ana in eng, bo in ops, cy in a group granting nothing) and a daemon whose
    page signs in with it."""
    installed()  # skips, saying why, without npm's registry
    base = tmp_path_factory.mktemp("realm")
    provider = Provider(base)
    provider.set_groups({"ana": ["eng"], "bo": ["ops"], "cy": ["lobby"]})

    def configure(config: Any, docs: Path) -> Any:
        groups = {"eng": {"role": "reader", "read": [str(docs / "eng")]},
                  "ops": {"role": "reader", "read": [str(docs / "ops")]},
                  "lobby": {"role": "reader", "read": []}}
        return dataclasses.replace(config, auth=provider.auth_config(groups))

    with serving_notes(base, NOTES, "apples banana", configure) as (daemon, docs):
        url = daemon.web.url.rstrip("/")
        provider.start(url + "/auth/callback")
        try:
            yield {"daemon": daemon, "url": url, "docs": docs, "provider": provider,
                   "base": base}
        finally:
            provider.stop()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies), recording the URLs it asks for."""
    opened = browser.new_context()
    opened.asked = []
    opened.on("request", lambda request: opened.asked.append(request.url))
    yield opened
    opened.close()


def provider_sign_in(page: Any, realm: dict[str, Any], login: str,
                     refused: bool = False) -> None:
    """Click the page's button, log in on the provider's development page, consent."""
    page.goto(realm["url"] + "/")
    assert urlsplit(page.url).path == "/signin"
    page.click("a.provider-signin")
    # the provider asks for a login, unless it remembers this browser's session there
    page.wait_for_url(lambda url: url.startswith(realm["provider"].issuer) or (
        url.startswith(realm["url"]) and "/signin" not in url))
    page.wait_for_load_state()
    if page.url.startswith(realm["provider"].issuer) and \
            page.locator("input[name=login]").count():
        page.fill("input[name=login]", login)
        page.fill("input[name=password]", "any password")
        page.click("button[type=submit]")
    page.wait_for_load_state()
    if page.url.startswith(realm["provider"].issuer) and \
            page.locator("button:has-text('Continue')").count():
        page.click("button:has-text('Continue')")
    if refused:  # the callback answers with the refusal
        page.wait_for_url(realm["url"] + "/auth/callback**")
    else:  # the callback's page goes on to /auth/finish, which opens the session
        page.wait_for_url(lambda url: url.startswith(realm["url"]) and "/auth/" not in url)
    page.wait_for_load_state()


def found(page: Any, realm: dict[str, Any], words: str) -> list[str]:
    """The file names a sparse search on the page finds."""
    page.goto(realm["url"] + "/?" + f"q={words}&mode=sparse")
    return [a.inner_text() for a in page.locator("li.result a.file").all()]


def test_two_people_sign_in_and_see_only_their_groups_folders(
        context: Any, browser: Any, realm: dict[str, Any]) -> None:
    audit = AuditTail(realm["daemon"].data_dir)
    page = context.new_page()
    provider_sign_in(page, realm, "ana")
    assert page.url == realm["url"] + "/", page.inner_text("body")  # landed signed in
    assert page.locator(".who").inner_text() == "ana"
    cookie = next(c for c in context.cookies() if c["name"] == "psirag_session")
    assert cookie["sameSite"] == "Strict" and cookie["httpOnly"]
    assert not [c for c in context.cookies() if c["name"] == "psirag_oidc"]  # used once
    assert found(page, realm, "apples") == ["apples.md"]
    assert found(page, realm, "banana") == []
    other = browser.new_context()
    try:
        second = other.new_page()
        provider_sign_in(second, realm, "bo")
        assert second.locator(".who").inner_text() == "bo"
        assert found(second, realm, "banana") == ["bananas.md"]
        assert found(second, realm, "apples") == []
    finally:
        other.close()
    people = {p["name"]: p for p in realm["daemon"].people.listed()}
    assert people["ana"]["source"] == "oidc" and people["ana"]["groups"] == ["eng"]
    assert people["bo"]["groups"] == ["ops"] and people["bo"]["last_sign_in"]
    signins = [line for line in audit.lines() if line["action"] == "signin oidc"]
    assert {line["person"] for line in signins} == {"ana", "bo"}


def test_a_group_change_shows_at_the_next_sign_in_through_tokens_too(
        browser: Any, realm: dict[str, Any], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    provider = realm["provider"]
    context = browser.new_context()
    try:
        page = context.new_page()
        provider_sign_in(page, realm, "ana")
        page.click("a[href='/tokens']")
        page.wait_for_url(realm["url"] + "/tokens")
        page.fill("input[name=name]", "laptop")
        page.click("form.make-token button[type=submit]")
        token = page.locator("code.new-token").inner_text().strip()
        assert len(token) >= 43
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        cli = ["--server", realm["daemon"].api.url, "--token-file", str(token_file), "query",
               "apples banana", "--mode", "sparse", "--json"]

        def cli_files() -> list[str]:
            capsys.readouterr()
            assert main(cli) == 0
            return sorted(Path(r["source"]).name for r in json.loads(
                capsys.readouterr().out)["results"])

        assert cli_files() == ["apples.md"]
        page.reload()
        assert page.locator("tr[data-token=laptop]").count() == 1
        assert "never" not in page.locator("tr[data-token=laptop] td").nth(2).inner_text()
        # ana moves from eng to ops at the provider: nothing changes until she signs in again
        provider.set_groups({"ana": ["ops"], "bo": ["ops"], "cy": ["lobby"]})
        assert cli_files() == ["apples.md"]
        page.click("form.signout button[type=submit]")
        page.wait_for_url(realm["url"] + "/signin")
        provider_sign_in(page, realm, "ana")
        assert found(page, realm, "banana") == ["bananas.md"]
        assert found(page, realm, "apples") == []
        assert cli_files() == ["bananas.md"]
        # revoking on the page works at once
        page.goto(realm["url"] + "/tokens")
        page.click("tr[data-token=laptop] button[type=submit]")
        page.wait_for_url(realm["url"] + "/tokens")
        assert page.locator("tr[data-token=laptop]").count() == 0
        status, body = api(realm["daemon"], "POST", "/api/query",
                           {"text": "banana", "mode": "sparse"}, token=token)
        assert status == 401
    finally:
        provider.set_groups({"ana": ["eng"], "bo": ["ops"], "cy": ["lobby"]})
        context.close()


def test_forged_and_replayed_callbacks_sign_nobody_in(
        browser: Any, realm: dict[str, Any]) -> None:
    audit = AuditTail(realm["daemon"].data_dir)
    context = browser.new_context()
    try:
        page = context.new_page()
        callbacks: list[str] = []
        page.on("request", lambda r: callbacks.append(r.url) if "/auth/callback" in r.url
                else None)
        provider_sign_in(page, realm, "bo")
        assert page.locator(".who").inner_text() == "bo"
        (callback,) = callbacks
        code = dict(p.split("=", 1) for p in urlsplit(callback).query.split("&"))["code"]
    finally:
        context.close()
    for attempt in (callback,  # replayed: its state was used
                    realm["url"] + "/auth/callback?state=forged&code=" + code):
        fresh = browser.new_context()
        try:
            page = fresh.new_page()
            response = page.goto(attempt)
            assert response.status == 403
            assert "Sign-in refused" in page.inner_text("h1")
            assert "unknown or expired" in page.inner_text(".problem")
            assert not [c for c in fresh.cookies() if c["name"] == "psirag_session"]
            page.goto(realm["url"] + "/")
            assert urlsplit(page.url).path == "/signin"
        finally:
            fresh.close()
    refused = [line for line in audit.lines() if "refused" in line["action"]]
    assert len(refused) == 2 and all(line["status"] == 403 for line in refused)
    assert code not in audit.text()


def test_a_flow_started_elsewhere_and_a_person_without_grants_are_refused(
        browser: Any, realm: dict[str, Any]) -> None:
    audit = AuditTail(realm["daemon"].data_dir)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(realm["url"] + "/signin")
        page.click("a.provider-signin")
        page.wait_for_url(realm["provider"].issuer + "/**")
        context.clear_cookies(name="psirag_oidc")  # as if another browser came back
        page.fill("input[name=login]", "ana")
        page.fill("input[name=password]", "x")
        page.click("button[type=submit]")
        if page.locator("button:has-text('Continue')").count():
            page.click("button:has-text('Continue')")
        page.wait_for_url(realm["url"] + "/**")
        assert "another browser" in page.inner_text(".problem")
        assert not [c for c in context.cookies() if c["name"] == "psirag_session"]
    finally:
        context.close()
    context = browser.new_context()
    try:
        page = context.new_page()
        provider_sign_in(page, realm, "cy", refused=True)
        assert "Sign-in refused" in page.inner_text("h1")
        assert "no group that grants" in page.inner_text(".problem")
        assert not [c for c in context.cookies() if c["name"] == "psirag_session"]
    finally:
        context.close()
    actions = [line["action"] for line in audit.lines()]
    assert any("another browser" in a for a in actions)
    assert any("no group" in a for a in actions)


def test_tokens_on_page_off_hides_the_form(browser: Any, realm: dict[str, Any]) -> None:
    web = realm["daemon"].web.web
    saved = web.auth
    web.auth = dataclasses.replace(saved, tokens_on_page=False)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(realm["url"] + "/signin")
        assert page.locator("a.provider-signin").inner_text() == "Sign in with Test ID"
        assert page.locator("input[name=token]").count() == 0
    finally:
        web.auth = saved
        context.close()
    page = browser.new_page()
    try:
        page.goto(realm["url"] + "/signin")
        assert page.locator("a.provider-signin").count() == 1
        assert page.locator("input[name=token]").count() == 1  # beside the button
    finally:
        page.close()


def test_a_dead_provider_shows_a_clear_page_and_nothing_else_breaks(
        browser: Any, realm: dict[str, Any]) -> None:
    """Last in the module: stops the provider."""
    daemon = realm["daemon"]
    realm["provider"].stop()
    daemon.web.web.oidc._metadata = None  # as after the hour discovery is kept
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(realm["url"] + "/signin")
        response = page.goto(realm["url"] + "/auth/login")
        assert response.status == 503
        assert "cannot be reached" in page.inner_text(".problem")
        # the token form, the API and the owner keep working
        page.goto(realm["url"] + "/signin")
        page.fill("input[name=token]", daemon.api.token)
        page.click("form.signin button[type=submit]")
        page.wait_for_url(realm["url"] + "/")
        assert sorted(found(page, realm, "apples banana")) == ["apples.md", "bananas.md"]
    finally:
        context.close()
    assert api(daemon, "GET", "/api/status")[0] == 200

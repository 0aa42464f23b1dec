"""The page's sessions over real sockets: a new session id at every sign-in (a planted or
earlier cookie never becomes the session), signing out ends the session on the server (its
cookie no longer works), and a form's CSRF token works only with its own session."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from daemon_helpers import serving_notes
from test_signin_proxy_tokens import call

COOKIE = "psirag_session"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("sessions")
    with serving_notes(base, {"apples.md": "# Apples\napples in the orchard\n"},
                       "apples") as (daemon, docs):
        yield {"daemon": daemon, "web": daemon.web.url.rstrip("/"), "docs": docs}


class Browser:
    """A cookie jar on the page (what a browser keeps)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cookies: dict[str, str] = {}

    def send(self, method: str, path: str, body: str | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
        sent = dict(headers or {})
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        status, page, response = call(self.url, method, path, body, sent)
        for raw in response.headers.get_all("Set-Cookie") or []:
            pair, attributes = (raw.split(";", 1) + [""])[:2]
            name, value = pair.split("=", 1)
            if "max-age=0" in attributes.lower() or value.strip('"') == "":
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value.strip('"')
        return status, page, response

    def sign_in(self, token: str) -> str:
        """Sign in with the form (sent with the session cookie the browser holds, if any: a
        form opened in another tab); the new session cookie's value."""
        held = self.cookies.pop(COOKIE, None)
        form = self.send("GET", "/signin")[1]
        csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
        if held is not None:
            self.cookies[COOKIE] = held
        status, _, _ = self.send("POST", "/signin", urlencode({"token": token, "csrf": csrf}),
                                 FORM)
        assert status == 303
        return self.cookies[COOKIE]

    def csrf(self) -> str:
        """The signed-in page's form token."""
        status, page, _ = self.send("GET", "/")
        assert status == 200, page
        return re.search(r'<meta name="csrf-token" content="([^"]+)">', page).group(1)

    def signed_in(self) -> bool:
        return self.send("GET", "/")[0] == 200


def person(served: dict[str, Any], name: str) -> str:
    """A reader of the docs folder: their token."""
    return served["daemon"].people.add(name, "reader", [str(served["docs"])])


def test_every_sign_in_gets_a_new_session_id(served: dict[str, Any]) -> None:
    browser = Browser(served["web"])
    browser.cookies[COOKIE] = "planted-by-someone-else-" + "p" * 20  # fixation attempt
    assert not browser.signed_in()
    session = browser.sign_in(person(served, "ana"))
    assert session != "planted-by-someone-else-" + "p" * 20 and browser.signed_in()
    planted = Browser(served["web"])
    planted.cookies[COOKIE] = "planted-by-someone-else-" + "p" * 20
    assert not planted.signed_in()
    # signing in again (another person's token) from the same browser: a new id, the old one ends
    again = browser.sign_in(person(served, "bob"))
    assert again != session and browser.signed_in()
    earlier = Browser(served["web"])
    earlier.cookies[COOKIE] = session
    assert not earlier.signed_in()


def test_signing_out_ends_the_session_on_the_server(served: dict[str, Any]) -> None:
    browser = Browser(served["web"])
    session = browser.sign_in(person(served, "cy"))
    csrf = browser.csrf()
    copy = Browser(served["web"])  # the same cookie, kept elsewhere (a copied cookie)
    copy.cookies[COOKIE] = session
    assert copy.signed_in()
    status, _, response = browser.send("POST", "/signout", urlencode({"csrf": csrf}), FORM)
    assert status == 303 and response.headers["Location"] == "/signin"
    assert COOKIE not in browser.cookies
    status, _, response = copy.send("GET", "/")
    assert status == 303 and response.headers["Location"].startswith("/signin")
    # the old cookie and its form token do nothing any more
    status, _, response = copy.send("POST", "/signout", urlencode({"csrf": csrf}), FORM)
    assert status == 303 and response.headers["Location"] == "/signin"
    assert copy.send("GET", "/tokens")[0] == 303


def test_a_csrf_token_of_another_session_is_refused(served: dict[str, Any]) -> None:
    dee, eve = Browser(served["web"]), Browser(served["web"])
    dee.sign_in(person(served, "dee"))
    eve.sign_in(person(served, "eve"))
    theirs = eve.csrf()
    assert theirs != dee.csrf()
    status, page, _ = dee.send("POST", "/tokens", urlencode({"name": "laptop",
                                                             "csrf": theirs}), FORM)
    assert status == 403 and "laptop" not in page
    status, _, _ = dee.send("POST", "/signout", urlencode({"csrf": theirs}), FORM)
    assert status == 403 and dee.signed_in()  # not signed out by another session's token
    status, _, _ = dee.send("POST", "/api/me/tokens", '{"name": "ci"}',
                            {"X-CSRF-Token": theirs, "Content-Type": "application/json"})
    assert status == 401
    assert served["daemon"].people.tokens_of("dee") == []
    status, _, _ = dee.send("POST", "/signout", urlencode({"csrf": dee.csrf()}), FORM)
    assert status == 303 and not dee.signed_in()
    assert eve.signed_in()  # her session is hers


def test_the_session_cookie_is_httponly_strict_and_scoped(served: dict[str, Any]) -> None:
    browser = Browser(served["web"])
    form = browser.send("GET", "/signin")[1]
    csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
    _, _, response = browser.send("POST", "/signin", urlencode({
        "token": served["daemon"].api.token, "csrf": csrf}), FORM)
    cookie = next(c for c in response.headers.get_all("Set-Cookie")
                  if c.startswith(COOKIE + "="))
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert "path=/" in cookie.lower()

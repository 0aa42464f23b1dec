"""The team's web page in a real browser: sign-in, search, sources, answers, tree, status, and
what a reader must never see or run."""

from __future__ import annotations

import http.server
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from daemon_helpers import AuditTail, api, serving_notes

EVIL = ("# Payload\npwned payload <script>window.__pwned = 1; alert('x')</script>\n"
        "<img src=x onerror=\"window.__pwned = 2; alert('y')\">\n"
        "<a href=\"javascript:alert(1)\">click</a> <iframe src=\"https://example.com/\">"
        "</iframe><style>body{display:none}</style>\n")
NOTES = {
    "team-a/apples.md": "# Orchards\nApples grow in orchards; apple trees flower in spring.\n",
    "team-a/pears.md": "# Pears\nPears ripen after picking, unlike apples on the tree.\n",
    "team-a/evil.txt": EVIL,
    "team-b/secret.md": "# Bananas\nBanana secret plans: the merger closes in March.\n",
    "team-b/ledger.md": "# Ledger\nBanana crates, counted.\n"  # one long sentence: one passage
                        + "the ledger lists each crate and its weight, " * 16
                        + "and only the kumquat column is new.\n",
}


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A daemon with two folders, alice reading team-a only and the owner reading both."""
    saved = os.environ.pop("PSIRAG_KB_TOKEN", None)
    base = tmp_path_factory.mktemp("team")
    with serving_notes(base, NOTES, "apples pears pwned banana") as (daemon, docs):
        alice = daemon.people.add("alice", "reader", [str(docs / "team-a")])
        secret = api(daemon, "POST", "/api/query", {"text": "banana merger", "mode": "sparse",
                                                    "k": 1})[1]["results"][0]["chunk_id"]
        evil = api(daemon, "POST", "/api/query", {"text": "pwned payload", "mode": "sparse",
                                                  "k": 1})[1]["results"][0]["chunk_id"]
        yield {"daemon": daemon, "url": daemon.web.url.rstrip("/"), "docs": docs,
               "alice": alice, "owner": daemon.api.token, "secret": secret, "evil": evil}
    if saved is not None:
        os.environ["PSIRAG_KB_TOKEN"] = saved


@pytest.fixture
def page(browser: Any, team: dict[str, Any]) -> Iterator[Any]:
    """A fresh browser context (no cookies) whose every request is recorded in `requests`."""
    context = browser.new_context(accept_downloads=True)
    opened = context.new_page()
    opened.requests = []
    opened.on("request", lambda request: opened.requests.append(request.url))
    opened.dialogs = []

    def dismiss(dialog: Any) -> None:
        opened.dialogs.append(dialog.message)
        dialog.dismiss()

    opened.on("dialog", dismiss)
    yield opened
    context.close()


def boosted_page_settled(page: Any) -> None:
    """Wait until htmx has swapped in the page a boosted link asked for."""
    page.wait_for_function(
        "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")


def sign_in(page: Any, team: dict[str, Any], token: str) -> None:
    page.goto(team["url"] + "/")
    assert page.url.endswith("/signin")
    assert page.locator("input[type=password][name=token]").count() == 1
    page.fill("input[name=token]", token)
    page.click("form.signin button[type=submit]")
    page.wait_for_url(team["url"] + "/")


def only_own_origin(page: Any, team: dict[str, Any]) -> None:
    own = urlsplit(team["url"]).netloc
    foreign = [u for u in page.requests if urlsplit(u).netloc != own]
    assert page.requests and not foreign, foreign


def test_sign_in_search_filter_source_download_sign_out(page: Any,
                                                        team: dict[str, Any]) -> None:
    sign_in(page, team, team["alice"])
    assert team["alice"] not in page.url
    page.fill("input[type=search][name=q]", "apples orchards")
    page.select_option("select[name=mode]", "sparse")
    page.select_option("select[name=in]", str(team["docs"] / "team-a"))
    page.click("form.search button[type=submit]")
    page.wait_for_selector("li.result")
    assert "q=apples" in page.url and "mode=sparse" in page.url and "in=" in page.url
    first = page.locator("li.result").first
    assert first.locator("a.file").inner_text() == "apples.md"
    assert "lines" in first.locator(".where").inner_text()
    assert first.locator("mark").first.inner_text().lower() in ("apples", "orchards")
    # a bookmarked URL gives the same page
    page.goto(page.url)
    assert page.locator("li.result a.file").first.inner_text() == "apples.md"
    page.locator("li.result a.file").first.click()
    page.wait_for_selector("#passage")
    assert "Apples grow in orchards" in page.inner_text("#passage")
    with page.expect_download() as download:
        page.click("a.download")
    saved = download.value.path()
    assert Path(saved).read_text().startswith("# Orchards")
    page.click("form.signout button[type=submit]")
    page.wait_for_url(team["url"] + "/signin")
    page.goto(team["url"] + "/?q=apples")
    assert urlsplit(page.url).path == "/signin"
    assert all(team["alice"] not in u for u in page.requests)
    only_own_origin(page, team)


def test_download_is_an_attachment_with_a_safe_type(page: Any, team: dict[str, Any]) -> None:
    sign_in(page, team, team["alice"])
    response = page.request.get(f"{team['url']}/download/{team['evil']}")
    assert response.status == 200
    assert response.headers["content-disposition"].startswith("attachment")
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["x-content-type-options"] == "nosniff"


def test_pages_send_strict_headers(page: Any, team: dict[str, Any]) -> None:
    response = page.goto(team["url"] + "/signin")
    headers = response.headers
    assert "default-src 'self'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    sign_in(page, team, team["alice"])
    cookie = next(c for c in page.context.cookies() if c["name"] == "psirag_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["expires"] > 0


def test_wrong_token_is_refused(page: Any, team: dict[str, Any]) -> None:
    page.goto(team["url"] + "/signin")
    page.fill("input[name=token]", "not-a-token-of-anyone-at-all-0123456789")
    page.click("form.signin button[type=submit]")
    page.wait_for_selector(".problem")
    assert "not accepted" in page.inner_text(".problem")
    assert not any(c["name"] == "psirag_session" for c in page.context.cookies())


def test_reader_never_sees_another_folder(page: Any, team: dict[str, Any]) -> None:
    sign_in(page, team, team["alice"])
    options = page.locator("select[name=in] option").all_inner_texts()
    assert not any("team-b" in o for o in options)
    page.goto(team["url"] + "/?q=banana+merger+secret&mode=sparse")
    assert page.locator("li.result").count() == 0
    page.goto(f"{team['url']}/?q=banana&in={team['docs'] / 'team-b'}")
    assert "Banana" not in page.content()
    for path in (f"/source/{team['secret']}", f"/download/{team['secret']}"):
        response = page.goto(team["url"] + path)
        assert response.status == 404
        assert "merger" not in page.content() and "secret.md" not in page.content()
    page.goto(team["url"] + "/tree")
    assert "secret" not in page.content() and "Banana" not in page.content()
    page.goto(team["url"] + "/status")
    assert "team-b" not in page.content()
    page.goto(team["url"] + "/answer?q=banana+merger")
    assert "merger" not in page.locator("main").inner_text().replace("banana merger", "")
    # the owner does see it, so the absence above is the grant, not an empty index
    page.click("form.signout button[type=submit]")
    sign_in(page, team, team["owner"])
    page.goto(f"{team['url']}/source/{team['secret']}")
    assert "merger closes in March" in page.inner_text("#passage")


def test_a_document_full_of_script_never_runs(page: Any, team: dict[str, Any]) -> None:
    sign_in(page, team, team["alice"])
    page.goto(team["url"] + "/?q=pwned+payload&mode=sparse")
    page.wait_for_selector("li.result")
    assert "<script>" in page.locator("li.result .passage").first.inner_text()
    page.goto(f"{team['url']}/source/{team['evil']}")
    assert "onerror" in page.inner_text("#passage")
    page.goto(team["url"] + "/answer?q=pwned+payload")
    page.goto(team["url"] + "/tree")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.dialogs == []
    assert page.locator("main script, main img, main iframe").count() == 0
    only_own_origin(page, team)


def test_answer_streams_steps_and_links_passages(page: Any, team: dict[str, Any]) -> None:
    sign_in(page, team, team["alice"])
    page.click("nav a[href='/answer']")
    page.wait_for_selector("form.ask")
    page.fill("form.ask input[name=q]", "When do apple trees flower?")
    page.click("form.ask button[type=submit]")
    page.wait_for_selector("#answer-body")
    assert "js=1" in page.url  # the streaming page, not the plain form's
    assert page.locator("#steps li").count() >= 1
    assert "no LLM is configured" in page.inner_text("#answer-body")
    stream = page.request.get(team["url"] + "/answer/stream?q=apples")
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert stream.headers["x-accel-buffering"] == "no"  # a proxy passes each step at once
    page.locator("#answer-body a[href^='/source/']").first.click()
    page.wait_for_selector("#passage")
    only_own_origin(page, team)


def test_answer_without_javascript(browser: Any, team: dict[str, Any]) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    try:
        sign_in(page, team, team["alice"])
        page.fill("input[name=q]", "apples")
        page.click("form.search button[type=submit]")
        page.wait_for_selector("li.result")
        page.goto(team["url"] + "/answer")
        page.fill("form.ask input[name=q]", "When do apple trees flower?")
        page.click("form.ask button[type=submit]")
        page.wait_for_selector("#answer-body")
        assert "js=0" in page.url
        assert page.locator("#steps li").count() >= 1
    finally:
        context.close()


def test_tree_drills_down_to_passages_and_status(page: Any, team: dict[str, Any]) -> None:
    sign_in(page, team, team["alice"])
    page.click("nav a[href='/tree']")
    page.wait_for_selector("ul.children")
    assert "passages" in page.inner_text("p.size")
    for _ in range(10):  # down through abstract nodes to a passage
        if page.locator("li.leaf a").count():
            break
        link = page.locator("li.node a").first
        target = link.get_attribute("href")
        link.click()
        page.wait_for_url(f"**{target}")
        boosted_page_settled(page)
        page.wait_for_selector("ul.children")
    page.locator("li.leaf a").first.click()
    page.wait_for_selector("#passage")
    page.click("nav a[href='/status']")
    page.wait_for_selector("table.counts")
    text = page.inner_text("main")
    assert "indexed" in text and "3" in text  # alice's three files
    assert "team-b" not in page.content()


def test_cross_site_post_is_refused(page: Any, team: dict[str, Any], tmp_path: Path) -> None:
    sign_in(page, team, team["alice"])
    csrf = page.locator("form.signout input[name=csrf]").get_attribute("value")
    (tmp_path / "index.html").write_text(
        f'<form id="f" method="post" action="{team["url"]}/signout">'
        f'<input name="csrf" value="{csrf}"></form>')
    handler = type("Quiet", (http.server.SimpleHTTPRequestHandler,), {
        "log_message": lambda *a: None,
        "__init__": lambda self, *a, **k: http.server.SimpleHTTPRequestHandler.__init__(
            self, *a, directory=str(tmp_path), **k)})
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        page.goto(f"http://127.0.0.1:{other.server_address[1]}/index.html")
        with page.expect_response(lambda r: r.url.endswith("/signout")) as answered:
            page.evaluate("document.getElementById('f').submit()")
        assert answered.value.status == 403
        page.wait_for_url(team["url"] + "/signout")  # its refusal shown: no navigation pending
    finally:
        other.shutdown()
    page.goto(team["url"] + "/")
    assert not page.url.endswith("/signin")  # still signed in: the forged sign-out failed


def test_post_without_the_csrf_token_is_refused(page: Any, team: dict[str, Any]) -> None:
    sign_in(page, team, team["alice"])
    response = page.request.post(team["url"] + "/signout", form={"csrf": "forged"})
    assert response.status == 403
    page.goto(team["url"] + "/")
    assert not page.url.endswith("/signin")


def cite_the_orchard(body: dict[str, Any]) -> dict[str, Any]:
    """An answer citing apples.md by the number it has in the prompt (the rank may vary)."""
    number = int(re.search(r"\[(\d+)\] \([^)]*apples\.md", body["messages"][-1]["content"])[1])
    return {"action": "answer", "text": f"In spring [{number}].", "cited": [number]}


def test_a_cited_answer_with_an_llm(page: Any, team: dict[str, Any], fake_ollama: Any) -> None:
    kb = team["daemon"].kb
    before = kb.config
    kb.config = before.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=10.0)
    fake_ollama.script(cite_the_orchard)
    try:
        sign_in(page, team, team["alice"])
        page.goto(team["url"] + "/answer")
        page.fill("form.ask input[name=q]", "When do apple trees flower?")
        page.click("form.ask button[type=submit]")
        page.wait_for_selector("#answer-body")
    finally:
        kb.config = before
    assert "In spring" in page.inner_text(".answer-text")
    assert page.locator("#steps li").count() == 1
    cited = page.locator("ol.citations li a").first
    name = cited.inner_text()
    assert page.get_attribute(".answer-text a.cite", "href") == cited.get_attribute("href")
    page.click(".answer-text a.cite")
    page.wait_for_selector("#passage")
    assert page.inner_text("h1.file").startswith(name)
    only_own_origin(page, team)


def test_a_bookmarked_search_opens_after_signing_in(page: Any, team: dict[str, Any]) -> None:
    bookmark = (f"{team['url']}/?q=apples+orchards&mode=sparse&"
                f"{urlencode({'in': str(team['docs'] / 'team-a')})}")
    page.goto(bookmark)
    assert urlsplit(page.url).path == "/signin"
    page.fill("input[name=token]", "a-wrong-token-first-0123456789abcdef")
    page.click("form.signin button[type=submit]")
    page.wait_for_selector(".problem")  # a wrong token keeps the way back
    page.fill("input[name=token]", team["alice"])
    page.click("form.signin button[type=submit]")
    page.wait_for_url(bookmark)
    assert page.locator("li.result a.file").first.inner_text() == "apples.md"
    assert page.locator("select[name=mode]").input_value() == "sparse"
    assert team["alice"] not in page.url


@pytest.mark.parametrize("target", ["https://example.com/", "//example.com/x",
                                    "/\\example.com/x", "/\t/example.com", "javascript:alert(1)"])
def test_sign_in_never_sends_a_person_to_another_site(page: Any, team: dict[str, Any],
                                                       target: str) -> None:
    page.goto(f"{team['url']}/signin?{urlencode({'next': target})}")
    page.fill("input[name=token]", team["alice"])
    page.click("form.signin button[type=submit]")
    page.wait_for_url(team["url"] + "/")
    assert page.dialogs == []
    only_own_origin(page, team)


def test_sign_ins_are_audited_without_the_token(page: Any, team: dict[str, Any]) -> None:
    audit = AuditTail(team["daemon"].data_dir)
    wrong = "wrong-token-d41d8cd98f00b204e9800998ecf8427e"
    page.goto(team["url"] + "/signin")
    page.fill("input[name=token]", wrong)
    page.click("form.signin button[type=submit]")
    page.wait_for_selector(".problem")
    page.fill("input[name=token]", team["alice"])
    page.click("form.signin button[type=submit]")
    page.wait_for_url(team["url"] + "/")
    text, lines = audit.text(), audit.lines()
    signins = [line for line in lines if line["action"] == "signin"]
    assert [(s.get("person"), s.get("status")) for s in signins] == [(None, 401),
                                                                    ("alice", None)]
    assert signins[0]["client"] == "127.0.0.1"
    assert wrong not in text and team["alice"] not in text


def test_a_term_deep_in_a_long_passage_is_shown(page: Any, team: dict[str, Any]) -> None:
    sign_in(page, team, team["owner"])
    page.goto(team["url"] + "/?q=kumquat&mode=sparse")
    page.wait_for_selector("li.result")
    first = page.locator("li.result").first
    assert first.locator("a.file").inner_text() == "ledger.md"
    marks = first.locator(".passage mark")
    assert marks.count() >= 1 and marks.first.inner_text() == "kumquat"
    assert first.locator(".passage").inner_text().startswith("…")


def test_an_answer_that_stops_arriving_says_so(page: Any, team: dict[str, Any]) -> None:
    sign_in(page, team, team["alice"])
    page.route("**/answer/stream?*", lambda route: route.abort())
    page.goto(team["url"] + "/answer")
    page.fill("form.ask input[name=q]", "When do apple trees flower?")
    page.click("form.ask button[type=submit]")
    page.wait_for_selector("#working.problem", timeout=10_000)
    assert "reload the page" in page.inner_text("#working")


def test_a_revoked_or_rotated_token_ends_the_session(page: Any, team: dict[str, Any]) -> None:
    people = team["daemon"].people
    docs = str(team["docs"] / "team-a")
    for change in (people.rotate, people.revoke):
        sign_in(page, team, people.add("carol", "reader", [docs]))
        change("carol")
        page.goto(f"{team['url']}/?q=apples")
        assert urlsplit(page.url).path == "/signin"
        if change == people.rotate:
            people.revoke("carol")  # the name is used again in the next round

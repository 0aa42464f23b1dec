"""The web page's chat view in a real browser: a question, a follow-up resolved against it
("searched: ..."), numbered citations opening the source view, the conversation's own URL
surviving a reload, and another person getting "not found" for its id."""

from __future__ import annotations

import re
from typing import Any

from test_web import cite_the_orchard, page, sign_in, team  # noqa: F401 - fixtures, reused

__all__ = ["page", "team"]


def ask(page: Any, question: str) -> None:  # noqa: F811
    """Type a question in the chat box and wait for the conversation page it leads to."""
    turns = page.locator("article.turn").count()
    page.fill("form.ask input[name=q]", question)
    page.click("form.ask button[type=submit]")
    page.wait_for_function(f"() => document.querySelectorAll('article.turn').length > {turns}")


def test_a_conversation_continues_across_a_reload_and_is_private(
        page: Any, team: dict[str, Any], browser: Any) -> None:  # noqa: F811
    sign_in(page, team, team["alice"])
    page.goto(team["url"] + "/chat")
    assert page.locator("form.ask input[name=q]").count() == 1
    ask(page, "Where do apples grow?")
    assert re.search(r"/chat/[A-Za-z0-9_-]+", page.url)
    address = page.url.split("#")[0]
    first = page.locator("article.turn").first
    assert first.locator(".question").inner_text() == "Where do apples grow?"
    assert first.locator("ol.citations li a").first.inner_text().startswith("[1] ")
    assert "apples.md" in first.locator("ol.citations").inner_text()
    ask(page, "When do they flower?")
    second = page.locator("article.turn").nth(1)
    searched = second.locator(".searched").inner_text()
    assert searched.startswith("searched: ") and "apple" in searched.lower()
    assert "apples.md" in second.locator("ol.citations").inner_text()
    # the conversation is listed, and its own address shows both turns after a reload
    assert page.locator("#conversations li").count() == 1
    page.goto(address)
    assert page.locator("article.turn").count() == 2
    assert page.locator("article.turn .question").all_inner_texts() == [
        "Where do apples grow?", "When do they flower?"]
    # a numbered citation opens the source view
    page.locator("article.turn").nth(1).locator("ol.citations li a").first.click()
    page.wait_for_selector("#passage")
    assert "/source/" in page.url
    # a third turn continues from the reopened address
    page.goto(address)
    ask(page, "And pears?")
    assert page.locator("article.turn").count() == 3
    # someone else gets the answer an id that never existed gets
    bob = team["daemon"].people.add("bob", "reader", [str(team["docs"] / "team-a")])
    other = browser.new_context()
    try:
        theirs = other.new_page()
        sign_in(theirs, team, bob)
        response = theirs.goto(address)
        assert response.status == 404 and "does not exist" in theirs.inner_text("main")
        assert "apples" not in theirs.inner_text("main").lower()
        missing = theirs.goto(team["url"] + "/chat/" + "A" * 22)
        assert missing.status == 404
        assert theirs.goto(team["url"] + "/chat").status == 200
        assert theirs.locator("#conversations li").count() == 0
    finally:
        other.close()


def test_a_chat_turn_with_an_llm_links_its_citations(page: Any, team: dict[str, Any],  # noqa: F811
                                                    fake_ollama: Any) -> None:
    kb = team["daemon"].kb
    before = kb.config
    kb.config = before.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=10.0)
    fake_ollama.script(cite_the_orchard)
    try:
        sign_in(page, team, team["alice"])
        page.goto(team["url"] + "/chat")
        ask(page, "When do apple trees flower?")
    finally:
        kb.config = before
    turn = page.locator("article.turn").first
    assert turn.get_attribute("id") == "turn-1"  # the turn's number, not its citation's
    assert "In spring" in turn.locator(".answer-text").inner_text()
    link = turn.locator(".answer-text a.cite").first
    number = link.inner_text().strip("[]")
    cited = turn.locator(f"#turn-1-cite-{number} a[href^='/source/']")  # not "on the map"
    assert link.get_attribute("href") == cited.get_attribute("href")
    assert "apples.md" in cited.inner_text()
    on_map = turn.locator(f"#turn-1-cite-{number} a.on-map").get_attribute("href")
    assert on_map == "/map?chunk=" + cited.get_attribute("href").rsplit("/", 1)[1]
    page.goto(page.url.split("#")[0])  # the stored answer, reopened (LLM off by now)
    assert "In spring" in page.locator("article.turn .answer-text").first.inner_text()
    page.locator("article.turn .answer-text a.cite").first.click()
    page.wait_for_selector("#passage")
    assert "Apples grow in orchards" in page.inner_text("#passage")


def test_a_document_full_of_script_stays_text_in_a_chat_turn(page: Any,  # noqa: F811
                                                             team: dict[str, Any]) -> None:
    sign_in(page, team, team["alice"])
    page.goto(team["url"] + "/chat")
    ask(page, "pwned payload")
    shown = page.locator("article.turn ol.citations").inner_text()
    assert "<script>" in shown and "onerror" in shown  # shown as text
    assert page.evaluate("() => window.__pwned") is None and page.dialogs == []
    assert page.locator("article.turn iframe, article.turn img, article.turn style").count() == 0


def test_a_question_without_the_csrf_token_is_refused(page: Any,  # noqa: F811
                                                      team: dict[str, Any]) -> None:
    sign_in(page, team, team["alice"])
    before = len(team["daemon"].conversations(
        access=team["daemon"].people.access_for(team["alice"]))["conversations"])
    for address in ("/chat", "/chat/" + "A" * 22):
        response = page.request.post(team["url"] + address, form={"q": "apples",
                                                                  "csrf": "forged"})
        assert response.status == 403
    after = team["daemon"].conversations(access=team["daemon"].people.access_for(team["alice"]))
    assert len(after["conversations"]) == before  # nothing was asked or stored

"""The web page's chat view in a real browser: a question, a follow-up resolved against it
("searched: ..."), numbered citations opening the source view, the conversation's own URL
surviving a reload, and another person getting "not found" for its id."""

from __future__ import annotations

import re
from typing import Any

from test_web import page, sign_in, team  # noqa: F401 - the module's fixtures, reused

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

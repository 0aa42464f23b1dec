"""The page's escaping, highlighting and sessions (pure logic)."""

from __future__ import annotations

import pytest

from psirag_kb.web.render import distinct_names, excerpt, highlight, title, where
from psirag_kb.web.sessions import Sessions, same_token
from psirag_kb.web.site import safe_next


def test_highlight_escapes_the_document_and_marks_terms() -> None:
    text = "<script>alert(1)</script> apples &amp; <img src=x onerror=alert(2)> Apples"
    html = str(highlight(text, "apples amp script"))
    assert "<script>" not in html and "<img" not in html
    assert "&lt;<mark>script</mark>&gt;" in html
    assert html.count("<mark>") == 5
    assert "&amp;<mark>amp</mark>;" in html  # the document's own "&amp;", not an entity


def test_a_term_never_breaks_an_entity() -> None:
    assert str(highlight("a < b", "lt")) == "a &lt; b"


def test_locations_people_read() -> None:
    assert where({"location": {"page": 4}}) == "p. 4"
    assert where({"location": {"sheet": "Q1", "rows": [2, 41]}}) == "sheet Q1 rows 2-41"
    assert where({"lines": [12, 18]}) == "lines 12-18"
    assert where({"location": {"lines": [3, 3]}}) == "line 3"
    assert where({}) == ""


def test_sessions_keep_only_a_hash_and_end() -> None:
    sessions = Sessions(lifetime_s=60)
    session_id, session = sessions.open("alice", "f" * 64)
    assert session_id not in str(sessions._by_hash)
    assert sessions.get(session_id) == session
    assert same_token(session.csrf, session.csrf) and not same_token("x", session.csrf)
    sessions.close(session_id)
    assert sessions.get(session_id) is None
    expired = Sessions(lifetime_s=-1)
    old, _ = expired.open("bob", None)
    assert expired.get(old) is None


def test_a_topic_shows_its_label_else_its_abstract() -> None:
    assert title({"label": "orchards, spring", "abstract": "apples pears"}) == "orchards, spring"
    assert title({"label": "", "abstract": "apples pears"}) == "apples pears"


def test_a_result_shows_the_part_of_a_long_passage_its_terms_are_in() -> None:
    text = "Banana crates. " + "the ledger lists each crate, " * 40 + "and the kumquat column."
    shown = excerpt(text, "kumquat")
    assert shown.startswith("…") and "kumquat" in shown and len(shown) <= 602
    assert excerpt(text, "banana").startswith("Banana") and excerpt(text, "").endswith("…")
    assert excerpt("short  text\n here", "zebra") == "short text here"


@pytest.mark.parametrize("asked", ["/", "/?q=apples&mode=sparse", "/source/12?q=a%20b",
                                   "/tree/-3", "/download/4"])
def test_sign_in_goes_back_to_a_page_of_this_site(asked: str) -> None:
    assert safe_next(asked) == asked


@pytest.mark.parametrize("asked", [None, "", "https://evil.example/", "//evil.example/",
                                   "/\\evil.example", "/\t/evil.example", "javascript:alert(1)",
                                   "evil.example/x", "/signin?next=/", "/signout",
                                   "/?q=" + "a" * 5000, "/\x7f/x"])
def test_sign_in_never_goes_to_another_site(asked: str | None) -> None:
    assert safe_next(asked) == "/"


def test_files_of_one_name_are_told_apart_by_their_folders() -> None:
    """The map's "largest files" of an area: three changelogs of three packages must not all
    read "changelog.gz"; a name no other file has stays short."""
    assert distinct_names(["/d/findutils/changelog.gz", "/d/bash/changelog.gz",
                           "/d/bash/CHANGES.gz"]) == [
        "findutils/changelog.gz", "bash/changelog.gz", "CHANGES.gz"]
    assert distinct_names(["/d/a/x/NEWS", "/d/b/x/NEWS"]) == ["a/x/NEWS", "b/x/NEWS"]
    assert distinct_names(["2wiki:12", "2wiki:13"]) == ["2wiki:12", "2wiki:13"]
    assert distinct_names([]) == []

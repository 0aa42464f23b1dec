"""The page's escaping, highlighting and sessions (pure logic)."""

from __future__ import annotations

from psirag_kb.web.render import highlight, title, where
from psirag_kb.web.sessions import Sessions, same_token


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

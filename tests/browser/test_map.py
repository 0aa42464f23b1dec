"""The topic map in a real browser: a click goes down, the breadcrumbs come back, and the
keyboard's focus on an area shows its abstract beside the map."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import api, serving_notes
from test_web import boosted_page_settled, sign_in
from waiting import wait_until

TOPICS = ("apples orchard blossom", "pears ripen picking", "plums jam stones")
# each note's every run of four words names its own batch, so no two are copies of each other
NOTES = {f"team-a/{name.split()[0]}-{n}.md": f"# {name} batch{n}\n" + f"{name} batch{n} " * 3
         for name in TOPICS for n in range(3)}


def small_tree(config: Any, docs: Path) -> Any:
    """Three children at most per node: nine notes make a tree of three layers."""
    return config.replace("tree", max_children=3)


@pytest.fixture(scope="module")
def mapped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A daemon over nine notes whose every abstract is written."""
    saved = os.environ.pop("PSIRAG_KB_TOKEN", None)
    base = tmp_path_factory.mktemp("map")
    words = "apples pears plums"
    notes = dict(list(NOTES.items())[:9])
    with serving_notes(base, notes, words, small_tree) as (daemon, _):
        # the tree first: before the first ingest has built it, an empty tree is not dirty
        wait_until(lambda: api(daemon, "GET", "/api/tree")[1].get("leaves") == len(notes), 120)
        wait_until(lambda: api(daemon, "GET", "/api/status")[1]["tree"].get("dirty") == 0, 120)
        yield {"daemon": daemon, "url": daemon.web.url.rstrip("/"), "owner": daemon.api.token}
    if saved is not None:
        os.environ["PSIRAG_KB_TOKEN"] = saved


def test_the_map_goes_down_and_back_and_describes_the_focused_area(
        browser: Any, mapped: dict[str, Any]) -> None:
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        sign_in(page, mapped, mapped["owner"])
        page.click("nav a[href='/map']")
        page.wait_for_selector("svg.topic-map a.area")
        boosted_page_settled(page)
        first = page.locator("svg.topic-map a.area").first
        target = first.get_attribute("href")
        assert target.startswith("/map?node=")
        first.click(position={"x": 20, "y": 6})  # its label strip, above its inner areas
        page.wait_for_url(f"**{target}")
        boosted_page_settled(page)
        assert page.locator("nav.crumbs [aria-current=page]").count() == 1
        page.click("nav.crumbs a[href='/map']")
        page.wait_for_url(mapped["url"] + "/map")
        boosted_page_settled(page)
        assert page.locator("nav.crumbs [aria-current=page]").count() == 0

        for _ in range(40):  # the keyboard reaches the map's areas
            page.keyboard.press("Tab")
            if page.evaluate("() => !!document.activeElement.closest('svg.topic-map')"):
                break
        node = page.evaluate("() => document.activeElement.getAttribute('data-node')")
        assert node
        shown = page.inner_text("#map-detail")
        listed = page.inner_text(f"#detail-{node}")
        assert shown == listed and "passages" in shown
        abstract = page.inner_text(f"#detail-{node} .abstract")
        assert abstract and abstract in shown
        page.keyboard.press("Tab")
        again = page.evaluate("() => document.activeElement.getAttribute('data-node')")
        assert again != node and page.inner_text("#map-detail") == page.inner_text(
            f"#detail-{again}")
        page.keyboard.press("Enter")  # a focused area is a link: Enter goes down
        page.wait_for_url(f"**/map?node={again}")
        assert not [e for e in errors if "Content Security Policy" in e]
    finally:
        context.close()

"""The topic map page over a real daemon: areas sized by passages, links one layer down, the
breadcrumbs back, a passage's path marked, and only what the person may read."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path
from typing import Any

from daemon_helpers import api, serving_notes, wait_for
from test_web_daemon import Browser

from psirag_kb.errors import KBError, TreeEmpty

TOPICS = ("apples orchard", "pears ripen", "plums jam")
# each note's every run of words names its own batch, so no two are copies of each other
NOTES = {f"team-a/{name.split()[0]}-{n}.md": f"# {name} batch{n}\n" + f"{name} batch{n} " * 3
         for name in TOPICS for n in range(2)}
NOTES |= {f"team-b/secret-{n}.md": f"# Bananas\nbanana merger plans {n}\n" for n in range(3)}
NOTES["team-a/evil.md"] = "# <script>alert(1)</script>\n<b onmouseover=x>apples</b> & pears\n"


def small_tree(config: Any, docs: Path) -> Any:
    """Three children at most per node, so a few notes make a tree of several layers."""
    return config.replace("tree", max_children=3)


def tree_leaves(daemon: Any) -> int:
    """Passages under the root (0 until the first tree is built)."""
    try:
        return int(daemon.kb.node()["leaves"])
    except KBError:
        return 0


def areas(svg: str) -> list[dict[str, Any]]:
    """The areas of a drawn map: link, node, passages and rectangle."""
    found = []
    for match in re.finditer(r'<a href="([^"]+)" class="area[^"]*" data-node="([^"]+)" '
                             r'aria-label="[^"]*— (\d+) passages?">.*?<rect x="([\d.]+)" '
                             r'y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"', svg):
        href, node, count, *box = match.groups()
        found.append({"href": unescape(href), "node": node, "leaves": int(count),
                      "area": float(box[2]) * float(box[3])})
    return found


def test_the_map_draws_what_each_person_may_read(tmp_path: Path) -> None:
    with serving_notes(tmp_path, NOTES, "apples pears plums banana",
                       small_tree) as (daemon, docs):
        # a first ingest builds the tree once at its end, after the notes are searchable
        wait_for(lambda: tree_leaves(daemon) == len(NOTES), what="the tree holds every note")
        owner = Browser(daemon.web.url)
        assert owner.sign_in(daemon.api.token) == 303
        status, html, headers = owner.get("/map")
        assert status == 200, html
        assert "<script" not in html.split("<svg", 1)[1].split("</svg>")[0]
        assert "<script>alert" not in html and "onmouseover=x>" not in html
        svg = html.split("<svg", 1)[1].split("</svg>", 1)[0]
        drawn = areas(svg)
        top = [a for a in drawn if "node=" in a["href"]]
        assert top, svg[:2000]
        root_total = daemon.kb.node()["leaves"]
        assert root_total == len(NOTES)
        first = daemon.kb.topic_map()
        children = {str(c["id"]): c["leaves"] for c in first["children"]}
        widths = {a["node"]: a for a in drawn if a["node"] in children}
        assert set(widths) == set(children)
        whole = 720 * 460
        for node, leaves in children.items():  # each child's area in proportion to passages
            assert abs(widths[node]["area"] / whole - leaves / root_total) < 0.01
        for child in first["children"]:  # labels fitted in the areas they name
            assert f'data-node="{child["id"]}"' in svg
        down = widths[str(first["children"][0]["id"])]["href"]
        assert down == f"/map?node={first['children'][0]['id']}"
        status, html, _ = owner.get(down)
        assert status == 200 and 'href="/map">All topics</a>' in html
        assert 'aria-current="page"' in html
        assert "team-b" in owner.get("/map")[1]  # the owner's map holds both folders

        alice = Browser(daemon.web.url)
        assert alice.sign_in(daemon.people.add("alice", "reader", [str(docs / "team-a")])) == 303
        status, html, _ = alice.get("/map")
        assert status == 200
        assert "team-b" not in html and "secret-" not in html and "banana" not in html.lower()
        secret = daemon.query("banana merger", "sparse", 1)["results"][0]["chunk_id"]
        hidden = next(n["id"] for n in daemon.kb.path_of(secret)[1:])
        status, html, _ = alice.get(f"/map?node={hidden}")
        assert status == 404 and "banana" not in html.lower()
        status, html, _ = alice.get(f"/map?chunk={secret}")
        assert "banana" not in html.lower() and "not in the topic tree" in html

        apple = daemon.query("apples orchard", "sparse", 1)["results"][0]["chunk_id"]
        found = owner.get("/?q=apples+orchard&mode=sparse")[1]
        assert f'href="/map?chunk={apple}">on the map</a>' in found
        status, html, _ = owner.get(f"/map?chunk={apple}")
        path = [n["id"] for n in daemon.kb.path_of(apple)]
        marked = re.findall(r'class="area on-path" data-node="(\d+)"', html)
        assert marked and set(map(int, marked)) <= set(path)
        assert "The passage sits in:" in html
        assert owner.get("/map?colour=changed")[0] == 200
        assert "the last hour" in owner.get("/map?colour=changed")[1]
        assert owner.get("/map?colour=purple")[0] == 400


def test_the_status_page_draws_the_daemons_hour(tmp_path: Path) -> None:
    with serving_notes(tmp_path, NOTES, "apples pears plums banana") as (daemon, docs):
        daemon.activity.sample()
        owner = Browser(daemon.web.url)
        assert owner.sign_in(daemon.api.token) == 303
        for _ in range(3):
            assert owner.get("/?q=apples&mode=sparse")[0] == 200
        api(daemon, "POST", "/api/query", {"text": "apples", "mode": "sparse", "k": 3})
        daemon.activity.sample()
        status, html, _ = owner.get("/status")
        assert status == 200
        assert html.count('<svg class="chart"') == 4
        assert "Running now" in html and "/api/query" in html
        assert re.search(r'aria-label="Ingest, last hour\. Peak [\d.,]+ chunks/s', html)
        with daemon.activity.running("backup"):
            assert "<progress" in owner.get("/status")[1]
        alice = Browser(daemon.web.url)
        assert alice.sign_in(daemon.people.add("alice", "reader", [str(docs / "team-a")])) == 303
        status, html, _ = alice.get("/status")
        assert status == 200 and '<svg class="chart"' not in html


def test_before_the_first_tree_the_map_and_topics_say_why(tmp_path: Path, monkeypatch) -> None:
    """The first ingest of a folder builds the tree once, at its end: meanwhile the map and
    the topics say so, with the scan's progress for the owner, instead of an error page."""
    with serving_notes(tmp_path, NOTES, "apples pears plums banana") as (daemon, docs):

        def not_yet(*args: Any, **kwargs: Any) -> Any:
            raise TreeEmpty("there is no topic tree yet")

        monkeypatch.setattr(daemon, "topic_map", not_yet)
        monkeypatch.setattr(daemon, "node", not_yet)
        owner, alice = Browser(daemon.web.url), Browser(daemon.web.url)
        assert owner.sign_in(daemon.api.token) == 303
        assert alice.sign_in(daemon.people.add("alice", "reader", [str(docs / "team-a")])) == 303
        # a job of its own name: the watcher's scans of the new folders come and go meanwhile
        with daemon.activity.tracking("first scan", lambda *_: None) as report:
            report(5, 40, "a note")
            for page in ("/map", "/tree", "/map?node=3&colour=changed"):
                status, html, _ = owner.get(page)
                assert status == 200 and "Something went wrong" not in html
                assert "when the first indexing of these documents ends" in html
                assert "5 of 40" in html and 'value="5" max="40"' in html
                status, html, _ = alice.get(page)
                assert status == 200 and "when the first indexing" in html
                assert "5 of 40" not in html  # the daemon's work is the owner's and admins'
        indexed = daemon.status()
        monkeypatch.setattr(daemon, "status", lambda **kw: indexed | {"chunks": 0})
        assert "Nothing is indexed yet" in owner.get("/map")[1]
        monkeypatch.setattr(daemon, "status", lambda **kw: indexed | {"tree": {
            "state": "rebuilding", "reason": "a new embedding model"}})
        html = owner.get("/tree")[1]
        assert "being rebuilt (a new embedding model)" in html

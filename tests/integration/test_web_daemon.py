"""The daemon's web page over plain HTTP (no browser): where it is served, sign-in limits,
sessions that end with the token, and downloads decided by the engine."""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder
from daemon_helpers import serving_notes

from psirag_kb.access import Access
from psirag_kb.config import Config
from psirag_kb.errors import AccessDenied, ChunkNotFound, NodeNotFound
from psirag_kb.service.daemon import Daemon

NOTES = {"a/apples.md": "# Apples\napples in the orchard\n",
         "b/secret.md": "# Bananas\nbanana merger plans\n"}


class Browser:
    """Cookies and the sign-in form, as a browser without JavaScript would do it."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), NoRedirect())

    def get(self, path: str) -> tuple[int, str, Any]:
        try:
            with self.opener.open(self.url + path, timeout=30) as response:
                return response.status, response.read().decode(), response.headers
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), exc.headers

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, str, Any]:
        data = urllib.parse.urlencode(fields).encode()
        try:
            with self.opener.open(self.url + path, data=data, timeout=30) as response:
                return response.status, response.read().decode(), response.headers
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), exc.headers

    def sign_in(self, token: str) -> int:
        _, form, _ = self.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
        return self.post("/signin", {"token": token, "csrf": csrf})[0]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


def test_daemon_json_records_the_page_and_signs_in_the_owner(tmp_path: Path) -> None:
    with serving_notes(tmp_path, NOTES, "apples banana") as (daemon, _):
        info = json.loads((tmp_path / "data" / "daemon.json").read_text())
        assert info["web"] == daemon.web.url and info["web"] != info["url"] + "/"
        browser = Browser(info["web"])
        assert browser.get("/")[0] == 303  # to the sign-in page
        assert browser.sign_in(daemon.api.token) == 303
        status, html, _ = browser.get("/?q=apples")
        assert status == 200 and "apples.md" in html and daemon.api.token not in html


def test_the_wrong_token_limit_never_refuses_the_right_token(tmp_path: Path) -> None:
    with serving_notes(tmp_path, NOTES, "apples banana") as (daemon, _):
        browser = Browser(daemon.web.url)
        codes = [browser.sign_in("wrong-token-" + "x" * 30) for _ in range(12)]
        assert codes[0] == 401 and codes[-1] == 429
        assert browser.sign_in(daemon.api.token) == 303
        status, _, _ = browser.get("/status")
        assert status == 200


def test_a_session_ends_when_the_token_is_revoked(tmp_path: Path) -> None:
    with serving_notes(tmp_path, NOTES, "apples banana") as (daemon, docs):
        token = daemon.people.add("alice", "reader", [str(docs / "a")])
        browser = Browser(daemon.web.url)
        assert browser.sign_in(token) == 303
        assert browser.get("/status")[0] == 200
        daemon.people.revoke("alice")
        assert browser.get("/status")[0] == 303


def test_the_engine_decides_who_may_download(tmp_path: Path) -> None:
    with serving_notes(tmp_path, NOTES, "apples banana") as (daemon, docs):
        reader = Access("alice", "reader", (str(docs / "a"),))
        found = {Path(r["source"]).name: r["chunk_id"] for r in daemon.query(
            "apples banana", "sparse", 10)["results"]}
        assert daemon.original(found["apples.md"], access=reader)["path"].endswith("apples.md")
        with pytest.raises(ChunkNotFound):
            daemon.kb.original(found["secret.md"], access=reader)


def test_web_disabled_serves_no_page(tmp_path: Path) -> None:
    config = Config().with_data_dir(tmp_path / "data").replace("api", port=0)
    daemon = Daemon(config.replace("web", enabled=False), embedder=FakeEmbedder())
    daemon.start()
    try:
        assert daemon.web is None
        assert json.loads((tmp_path / "data" / "daemon.json").read_text())["web"] is None
    finally:
        daemon.stop()


def test_a_file_swapped_for_a_link_outside_is_not_downloaded(tmp_path: Path) -> None:
    with serving_notes(tmp_path, NOTES, "apples banana") as (daemon, docs):
        found = {Path(r["source"]).name: r["chunk_id"] for r in daemon.query(
            "apples banana", "sparse", 10)["results"]}
        daemon.watcher.stop()  # the swap stays unseen, as between an event and its reindex
        outside = tmp_path / "private.txt"
        outside.write_text("not for the team")
        (docs / "a" / "apples.md").unlink()
        (docs / "a" / "apples.md").symlink_to(outside)
        with pytest.raises(AccessDenied):
            daemon.original(found["apples.md"])


def test_results_outside_the_tree_still_show(tmp_path: Path) -> None:
    with serving_notes(tmp_path, NOTES, "apples banana") as (daemon, _):
        browser = Browser(daemon.web.url)
        assert browser.sign_in(daemon.api.token) == 303

        def missing(chunk_id: int, **_: Any) -> dict[str, Any]:
            raise NodeNotFound(f"chunk {chunk_id} is not in the tree; run the query again")

        daemon.path = missing  # a passage indexed a moment ago, its tree update pending
        status, html, _ = browser.get("/?q=apples&mode=sparse")
        assert status == 200 and "apples.md" in html
        chunk = re.search(r"/source/(\d+)", html).group(1)
        status, html, _ = browser.get(f"/source/{chunk}")
        assert status == 200 and "apples in the orchard" in html

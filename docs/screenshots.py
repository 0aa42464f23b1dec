"""Screenshots of the page for the README: docs/web-search.png, docs/web-answer.png and
docs/web-map.png.

    PYTHONPATH=.:tests python docs/screenshots.py

Serves the bundled examples/docs with the fake embedder, signs in with the owner's token in
headless Chromium (Debian's `chromium`) and captures the search, answer and topic map pages.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from browser_plugin import ARGS, chromium_path
from conftest import FakeEmbedder
from daemon_helpers import wait_for
from playwright.sync_api import sync_playwright

from psirag_kb.config import Config
from psirag_kb.service.daemon import Daemon

HERE = Path(__file__).parent


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="psirag-shots-"))
    docs = base / "docs"
    shutil.copytree(HERE.parent / "examples" / "docs", docs)
    config = Config().with_data_dir(base / "data").replace("api", port=0)
    config = config.replace("watch", folders=[str(docs)], quiet_period_s=0.2)
    daemon = Daemon(config, embedder=FakeEmbedder())
    daemon.start()
    try:
        wait_for(lambda: daemon.status()["files"].get("indexed", 0) >= 10
                 and not daemon.status()["daemon"]["queue"], timeout=120)
        daemon.kb.regenerate_abstracts(offline=True)  # the topic path above each result
        shoot(daemon)
    finally:
        daemon.stop()
        shutil.rmtree(base, ignore_errors=True)


def shoot(daemon: Daemon) -> None:
    """Sign in and capture the pages."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 900, "height": 560})
        url = daemon.web.url.rstrip("/")
        page.goto(url + "/signin")
        page.fill("input[name=token]", daemon.api.token)
        page.click("form.signin button[type=submit]")
        page.wait_for_url(url + "/")
        page.goto(url + "/?q=python+memory+management&mode=hybrid")
        page.wait_for_selector("li.result")
        page.screenshot(path=str(HERE / "web-search.png"))
        page.goto(url + "/answer")
        page.fill("form.ask input[name=q]", "How does Python manage memory for objects?")
        page.click("form.ask button[type=submit]")
        page.wait_for_selector("#answer-body")
        page.screenshot(path=str(HERE / "web-answer.png"))
        page.set_viewport_size({"width": 1100, "height": 760})
        page.goto(url + "/map")
        page.wait_for_selector("svg.topic-map a.area")
        page.focus("svg.topic-map a.area >> nth=1")  # its abstract and files beside the map
        page.screenshot(path=str(HERE / "web-map.png"))
        browser.close()
    small(HERE / "web-search.png", HERE / "web-answer.png", HERE / "web-map.png")


def small(*paths: Path) -> None:
    """64-colour PNGs (a third of the size; Pillow comes with the embedding stack)."""
    from PIL import Image

    for path in paths:
        Image.open(path).convert("RGB").quantize(colors=64).save(path, optimize=True)


if __name__ == "__main__":
    sys.exit(main())

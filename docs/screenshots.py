"""Screenshots for the site and the README, written into docs/images/.

    PYTHONPATH=.:tests python docs/screenshots.py

Serves the bundled examples/docs with the fake embedder (fast, no model download), signs in with
the owner's token in headless Chromium (Debian's `chromium`) and captures the search, answer,
chat, topic map and status pages; then draws the terminal UI on
the same knowledge base with Textual's own screenshot (an SVG).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from browser_plugin import ARGS, chromium_path
from conftest import FakeEmbedder
from daemon_helpers import wait_for
from playwright.sync_api import Page, sync_playwright

from psirag_kb.config import Config
from psirag_kb.service.client import HTTPClient
from psirag_kb.service.daemon import Daemon
from tui.app import PsiragApp

HERE = Path(__file__).parent
IMAGES = HERE / "images"
QUESTION = "How does Python manage memory for objects?"


def main() -> int:
    """Serve the sample folder, shoot every page and the TUI, stop."""
    IMAGES.mkdir(exist_ok=True)
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
        written = shoot_pages(daemon, str(base))
        written.append(shoot_tui(HTTPClient(daemon.api.url, daemon.api.token), str(base)))
    finally:
        daemon.stop()
        shutil.rmtree(base, ignore_errors=True)
    small(*(path for path in written if path.suffix == ".png"))
    for path in written:
        print(path)
    return 0


def shoot_pages(daemon: Daemon, scratch: str) -> list[Path]:
    """Sign in and capture the search, answer, chat, map and status pages."""
    written = []
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
        written.append(capture(page, "web-search.png", scratch))
        page.goto(url + "/answer")
        page.fill("form.ask input[name=q]", QUESTION)
        page.click("form.ask button[type=submit]")
        page.wait_for_selector("#answer-body")
        written.append(capture(page, "web-answer.png", scratch))
        written.append(shoot_chat(page, url, scratch))
        page.set_viewport_size({"width": 1100, "height": 760})
        page.goto(url + "/map")
        page.wait_for_selector("svg.topic-map a.area")
        page.focus("svg.topic-map a.area >> nth=1")  # its abstract and files beside the map
        written.append(capture(page, "web-map.png", scratch))
        page.set_viewport_size({"width": 900, "height": 560})
        page.goto(url + "/status")
        written.append(capture(page, "web-status.png", scratch))
        browser.close()
    return written


def shoot_chat(page: Page, url: str, scratch: str) -> Path:
    """A conversation of two turns, the second a follow-up searched with the first's subject."""
    page.goto(url + "/chat")
    page.fill("form.ask input[name=q]", "What is reference counting?")
    page.click("form.ask button[type=submit]")
    page.wait_for_selector("article.turn")
    page.fill("form.ask input[name=q]", "and how does the garbage collector help it?")
    page.click("form.ask button[type=submit]")
    page.wait_for_selector("#turn-2")
    page.evaluate("document.querySelector('#turn-2').scrollIntoView()")
    page.evaluate("window.scrollBy(0, -120)")
    return capture(page, "web-chat.png", scratch)


def capture(page: Page, name: str, scratch: str) -> Path:
    """The visible part of the page as docs/images/NAME, the scratch folder written `~`."""
    page.evaluate("""scratch => { const walk = document.createTreeWalker(document.body, 4);
        while (walk.nextNode()) walk.currentNode.nodeValue =
            walk.currentNode.nodeValue.replaceAll(scratch, "~"); }""", scratch)
    path = IMAGES / name
    page.screenshot(path=str(path))
    return path


def shoot_tui(client: HTTPClient, scratch: str) -> Path:
    """The TUI's Query screen after a question, drawn by Textual as an SVG (the scratch
    folder's name written `~`)."""
    path = IMAGES / "tui.svg"

    async def run() -> None:
        app = PsiragApp(client)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.click("#query")
            for key in QUESTION:
                await pilot.press("space" if key == " " else key)
            await pilot.press("enter")
            for _ in range(600):  # the results arrive from the daemon
                await pilot.pause(0.05)
                if app.screen.query("#results") and app.screen.query_one("#results").option_count:
                    break
            await pilot.pause(0.5)
            app.save_screenshot(filename=path.name, path=str(path.parent))

    asyncio.run(run())
    path.write_text(path.read_text().replace(scratch, "~"))
    return path


def small(*paths: Path) -> None:
    """64-colour PNGs (a third of the size; Pillow comes with the embedding stack)."""
    from PIL import Image

    for path in paths:
        Image.open(path).convert("RGB").quantize(colors=64).save(path, optimize=True)


if __name__ == "__main__":
    sys.exit(main())

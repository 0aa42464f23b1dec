"""Browser tests (tests/browser): Playwright driving Debian's Chromium; skipped, and said so at the
end of the run, without one."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from skipped import reasons

SKIPPED = "browser tests skipped: install Chromium with `apt-get install chromium`"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str | None:
    """Debian's Chromium (or the one PSIRAG_KB_CHROMIUM names), when it and Playwright are
    installed."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None
    chosen = os.environ.get("PSIRAG_KB_CHROMIUM")  # set: only that one (tests the skip)
    candidates = [chosen] if chosen is not None else [
        "/usr/bin/chromium", shutil.which("chromium") or "", shutil.which("chromium-browser") or ""]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this folder's tests, with the reason, when no Chromium is found."""
    if chromium_path() is not None:
        return
    here = Path(__file__).parent / "browser"
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.skip(reason=SKIPPED))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say plainly at the end of the run that the browser tests did not run, and why."""
    skipped = reasons(terminalreporter, SKIPPED)
    if skipped:
        terminalreporter.write_sep("=", f"{len(skipped)} {SKIPPED}", yellow=True, bold=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium for one test module: Playwright's sync API keeps an event loop
    running in this thread while it is open, which later asyncio tests cannot share."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                              args=ARGS)
        yield launched
        launched.close()

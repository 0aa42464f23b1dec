"""The reasons a run skipped tests for, read from its reports (those of pytest-xdist's workers
too), for the plugins that say at the end of a run what did not run."""

from __future__ import annotations

from typing import Any


def reasons(terminalreporter: Any, prefix: str) -> list[str]:
    """This run's skip reasons that begin with `prefix`, one per skipped test."""
    found = []
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            reason = str(longrepr[2]).removeprefix("Skipped: ")
            if reason.startswith(prefix):
                found.append(reason)
    return found

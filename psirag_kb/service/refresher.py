"""The daemon's abstract refresher: stale abstracts rewritten a few seconds after writes stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

POLL_S = 0.5
"""How often the refresher looks at the queues and the dirty count."""


class AbstractRefresher:
    """Writes abstracts once the watcher and writer queues have been empty for `quiet_s`:
    offline keywords for nodes without any first, then (with an LLM) the LLM's, giving way
    as soon as files arrive again. Queries never wait for it; it runs on its own thread."""

    def __init__(self, kb: Any, busy: Callable[[], bool], quiet_s: float,
                 arriving: Callable[[], bool] | None = None) -> None:
        self.kb = kb
        self.busy = busy
        self.arriving = arriving or busy
        self.quiet_s = quiet_s
        self.runs = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="psirag-abstracts", daemon=True)
        self._quiet_since = time.monotonic()
        self._offline_view: Any = None
        self._relabel_view: Any = None
        self.last_run: dict[str, float] = {}
        """Wall-clock times of the last run: since when the queues were quiet, start, end."""

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the node in progress (call `AbstractJob.stop` first for a slow LLM)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def status(self) -> dict[str, Any]:
        """Runs so far, the quiet period and the last error, for `status`."""
        return {"runs": self.runs, "quiet_s": self.quiet_s, "last_error": self.last_error,
                "last_run": self.last_run}

    def _interim(self) -> bool:
        """An interim tree of a first ingest, when due (`FirstIngest.interim_due`)."""
        report = self.kb.abstract_job.interim()
        if report is not None:
            log.info("an interim tree over the %d passages indexed so far, labelled in %.1f s; "
                     "the whole tree is built when the ingest ends", report["leaves"],
                     report["seconds"])
        return report is not None

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - a failed run is recorded, the loop goes on
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("abstract refresh failed")

    def tick(self) -> bool:
        """One look: refresh when there is something to do after a quiet period, or draw a
        first ingest's interim tree when due; True if it ran."""
        now = time.monotonic()
        if self.busy():
            self._quiet_since = now
            return self._interim()
        if now - self._quiet_since < self.quiet_s:
            return False
        view = self.kb.tree_view()
        job = self.kb.abstract_job
        stale = job.labels_stale()
        if not view.dirty and not stale:
            return False
        ran = False
        started = time.time()
        if view.dirty and view is not self._offline_view:  # written since the last pass
            self._offline_view = view  # a pass that failed is tried again after a change
            report = job.run(offline=True)
            self._offline_view = self.kb.tree_view()
            ran = True
            if report.get("regenerated"):
                log.info("offline abstracts for %d nodes in %.1f s", report["regenerated"],
                         report["seconds"])
        if stale and view is not self._relabel_view and not self._stop.is_set():
            self._relabel_view = view  # a pass that failed is tried again after a change
            report = job.relabel()  # an upgrade, or another offline_labels
            ran = True
            log.info("labelled %d nodes again (%s) in %.1f s", report["relabelled"],
                     report["labeller"], report["seconds"])
        if job.llm_due() and not self._stop.is_set():
            report = job.run(yield_to=lambda: self._stop.is_set() or self.arriving(),
                             skip_backed_off=True)
            ran = True
            if report.get("regenerated"):
                log.info("LLM abstracts for %d nodes in %.1f s", report["regenerated"],
                         report["seconds"])
        if ran:
            self.runs += 1
            self.last_run = {"quiet_since": started - (now - self._quiet_since),
                             "started": started, "finished": time.time()}
        return ran

"""A long-lived session's client (`mcp`, `tui`): in-process until a daemon asks for the data
directory, then through the daemon's API, without the session noticing more than a pause."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.service.client import (
    DAEMON_START_WAIT_S,
    KBClient,
    LocalClient,
    connect,
    open_local,
    running_daemon,
)
from psirag_kb.storage.datadir import TAKEOVER_FILE, holder, takeover_requested

log = logging.getLogger(__name__)

T = TypeVar("T")

POLL_S = 0.25
"""How often an in-process session looks for a daemon's takeover request."""
DRAIN_S = 5.0
"""How long a handover waits for calls in flight before it closes the stores under them (a
running write stops after its committed batch)."""
UNCLAIMED_S = 5.0
"""A takeover request whose daemon has not taken the freed lock after this long is stale."""


class Unavailable:
    """Stands in while neither the daemon nor the in-process knowledge base can be reached."""

    url = None

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def fail(*_args: Any, **_kwargs: Any) -> Any:
            raise KBError(self.reason)
        return fail

    def close(self) -> None:
        """Nothing to release."""


class HandoverClient:
    """A KBClient that holds the knowledge base in-process until a daemon asks for it, then
    closes its stores, frees the data directory and goes on through the daemon's API."""

    def __init__(self, config: Config, local: LocalClient, session: str,
                 embedder: Any = None) -> None:
        self.config = config
        self.data_dir = Path(config.data_dir)
        self.session = session
        self.embedder = embedder
        self.inner: Any = local
        self.remote = False
        self._cond = threading.Condition()
        self._active = 0
        self._handing = False
        self._closed = threading.Event()
        self._watch = threading.Thread(target=self._poll, name="psirag-handover", daemon=True)
        self._watch.start()

    # -- where it goes ----------------------------------------------------------------------

    @property
    def url(self) -> str | None:
        """The daemon's URL once handed over, None while in-process."""
        return getattr(self.inner, "url", None)

    @property
    def in_process(self) -> bool:
        """Whether the knowledge base is open in this process."""
        return isinstance(self.inner, LocalClient)

    def _call(self, request: Callable[[Any], T]) -> T:
        """`request(client)` on the current client; waits while a handover runs, and reopens
        the knowledge base (in-process or through a new daemon) once when the daemon is gone."""
        with self._cond:
            while self._handing:
                self._cond.wait()
            self._active += 1
            client = self.inner
        try:
            try:
                return request(client)
            except Exception as exc:
                if isinstance(client, LocalClient):
                    if not self._replaced(client):  # not cut short by a handover
                        raise
                elif not isinstance(exc, KBError) or not self._reattach_if_gone(client):
                    raise
            with self._cond:
                client = self.inner
            return request(client)
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def _replaced(self, client: Any) -> bool:
        """Whether a handover (finished now) replaced `client`: a call it cut short (its
        write cancelled, its stores closed after DRAIN_S) is then asked again of the new one."""
        with self._cond:
            while self._handing:
                self._cond.wait()
            return self.inner is not client

    # -- the handover -----------------------------------------------------------------------

    def _poll(self) -> None:
        """Watch for a daemon's takeover request while the knowledge base is in-process."""
        while not self._closed.wait(POLL_S):
            if not self.in_process or takeover_requested(self.data_dir) is None:
                continue
            try:
                self.hand_over()
            except Exception:  # noqa: BLE001 - the session goes on; its calls say what failed
                log.exception("handing %s over to the daemon failed", self.data_dir)

    def hand_over(self) -> None:
        """Let calls in flight finish (up to DRAIN_S), close the stores, free the data
        directory and switch to the daemon's API (or reopen in-process if it never comes)."""
        with self._cond:
            if self._handing or not self.in_process or self._closed.is_set():
                return
            self._handing = True
            deadline = time.monotonic() + DRAIN_S
            while self._active and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            local = self.inner
        log.info("a daemon asked for %s: psirag-kb %s closes its stores and goes on through "
                 "the daemon's API", self.data_dir, self.session)
        try:
            local.close()
        except Exception:  # noqa: BLE001 - the lock is released by close's finally
            log.exception("closing the in-process knowledge base failed")
        client = self._attach(time.monotonic() + DAEMON_START_WAIT_S)
        self._install(client)
        log.info("psirag-kb %s now uses %s", self.session,
                 getattr(client, "url", None) or "the knowledge base in-process")

    def _attach(self, deadline: float) -> Any:
        """The daemon's API once it answers; the knowledge base in-process again when no daemon
        wants it any more; Unavailable after the deadline."""
        free_since: float | None = None
        while True:
            try:
                client = running_daemon(self.config, wait_s=max(0.0, deadline - time.monotonic()),
                                        quiet=True)
            except KBError as exc:
                client, last = None, str(exc)
            else:
                last = f"no daemon answers for {self.data_dir}"
            if client is not None:
                return client
            free = holder(self.data_dir) is None
            free_since = (free_since or time.monotonic()) if free else None
            # free_since is set whenever free is
            if free and free_since is not None and time.monotonic() - free_since > UNCLAIMED_S:
                # a waiting daemon takes a free lock within 0.1 s: this request is stale (its
                # pid reused by another process)
                (self.data_dir / TAKEOVER_FILE).unlink(missing_ok=True)
            if free and takeover_requested(self.data_dir) is None:
                try:
                    local = open_local(self.config, self.embedder, self.session)
                except KBError as exc:
                    last = str(exc)
                else:
                    if local is not None:
                        return local
            if time.monotonic() >= deadline:
                return Unavailable(f"{last}; start the daemon (`psirag-kb daemon`) or restart "
                                   f"psirag-kb {self.session}")
            time.sleep(0.1)

    def _reattach_if_gone(self, client: Any) -> bool:
        """After a failed call through the daemon: whether a new client replaced `client`
        because the daemon went away (a new daemon's API, or in-process again)."""
        health = getattr(client, "health", None)
        if health is not None:
            try:
                health()
                return False  # the daemon is there: the error was the call's own
            except KBError:
                pass
        with self._cond:
            if self.inner is not client:
                return True
            if self._handing:
                return False
            self._handing = True
        replacement = self._attach(time.monotonic() + 2.0)
        self._install(replacement)
        return not isinstance(replacement, Unavailable)

    def _install(self, client: Any) -> None:
        """Make `client` the current one and let waiting calls go on (closed at once when the
        session closed meanwhile)."""
        with self._cond:
            self.inner = client
            self._handing = False
            self._cond.notify_all()
        if self._closed.is_set():
            client.close()

    # -- KBClient ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """The daemon's health once handed over; {} while in-process."""
        client = self.inner
        return {} if isinstance(client, LocalClient) else client.health()

    def __getattr__(self, name: str) -> Any:
        """Any other client method (query, ask, the conversations...), called on the current
        client through `_call`, so it follows a handover."""
        if name.startswith("_") or name in ("inner", "config", "data_dir", "session"):
            raise AttributeError(name)
        getattr(self.inner, name)  # AttributeError when the client has no such method

        def forwarded(*args: Any, **kwargs: Any) -> Any:
            return self._call(lambda client: getattr(client, name)(*args, **kwargs))

        forwarded.__name__ = name
        return forwarded

    def close(self) -> None:
        """Stop watching and close the current client (freeing the data directory)."""
        self._closed.set()  # no handover starts now
        with self._cond:
            if self._handing:  # the one running closes what it attaches
                return
            client = self.inner
        client.close()

    def __enter__(self) -> HandoverClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_session(config: Config, session: str, embedder: Any = None) -> KBClient:
    """`connect` for a long-lived session ("mcp", "tui"): opened in-process, it is a
    HandoverClient, which hands the data directory to a daemon that starts later and goes on
    through its API."""
    # cast: HandoverClient forwards every method of the client it holds
    return connect(config, embedder, session, wrap=lambda local: cast(
        KBClient, HandoverClient(config, local, session, embedder)))

"""The TUI's client and how it notices a daemon that went away and reconnects (no Textual here)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from psirag_kb.errors import KBError

log = logging.getLogger(__name__)

T = TypeVar("T")
Reconnect = Callable[[], Any]
"""Returns a fresh client once the daemon answers again, None (or raises KBError) until then."""


class DaemonGone(KBError):
    """The daemon the TUI talked to stopped answering."""


class Connection:
    """One current client; calls made through `request` detect a daemon that went away."""

    def __init__(self, client: Any, reconnect: Reconnect | None = None) -> None:
        self.client = client
        self.reconnect_with = reconnect
        self.lost = False
        self._mutex = threading.Lock()

    @property
    def where(self) -> str:
        """The daemon's URL, or "in-process"."""
        return getattr(self.client, "url", None) or "in-process"

    def alive(self, client: Any) -> bool:
        """Whether a client still answers (always true for one without a health check)."""
        health = getattr(client, "health", None)
        if health is None:
            return True
        try:
            health()
        except Exception:  # noqa: BLE001 - any failure of the health check means gone
            return False
        return True

    def request(self, call: Callable[[Any], T]) -> T:
        """`call(client)`; a KBError from a client that no longer answers becomes DaemonGone."""
        client = self.client
        if self.lost:
            raise DaemonGone(f"the daemon at {self.where} is not answering; reconnecting")
        try:
            return call(client)
        except KBError as exc:
            if self.reconnect_with is not None and not self.alive(client):
                self.lost = True
                raise DaemonGone(f"the daemon at {self.where} went away ({exc}); "
                                 "reconnecting when it is back") from None
            raise

    def reconnect(self) -> bool:
        """Try once to get a client again; True when the daemon answers."""
        if self.reconnect_with is None:
            return False
        try:
            client = self.reconnect_with()
        except KBError as exc:
            log.debug("reconnect failed: %s", exc)
            return False
        if client is None:
            return False
        with self._mutex:
            old, self.client, self.lost = self.client, client, False
        if old is not client:
            try:
                old.close()
            except Exception:  # noqa: BLE001 - the old client is of no further use
                log.debug("closing the old client failed", exc_info=True)
        return True

    def close(self) -> None:
        """Close the current client."""
        self.client.close()

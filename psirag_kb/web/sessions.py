"""Browser sessions: a random id in an HttpOnly cookie, only its hash kept, with a CSRF token."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

MAX_SESSIONS = 10_000
"""Beyond this many live sessions, the oldest are dropped (their browsers sign in again)."""


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class Session:
    """Who signed in (a person's name and token hash, or the owner) and the form token."""

    name: str
    token_sha256: str | None
    """The person's token hash when signed in (None: the owner's api.token)."""
    csrf: str
    expires: float
    kind: str = "token"
    """"token" (a person's token, or the owner's api.token when token_sha256 is None), "oidc"
    (signed in at the provider: their Access is looked up by name) or "proxy"."""

    @property
    def owner(self) -> bool:
        """Whether the machine's owner signed in (with api.token)."""
        return self.kind == "token" and self.token_sha256 is None


class Sessions:
    """Live sessions by the SHA-256 of their id, each ending `lifetime_s` after sign-in."""

    def __init__(self, lifetime_s: float) -> None:
        self.lifetime_s = lifetime_s
        self._by_hash: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, name: str, token_sha256: str | None,
             kind: str = "token") -> tuple[str, Session]:
        """A new session: (the id for the cookie, the session)."""
        session_id = secrets.token_urlsafe(32)
        session = Session(name, token_sha256, secrets.token_urlsafe(32),
                          time.monotonic() + self.lifetime_s, kind)
        with self._lock:
            self._expire()
            if len(self._by_hash) >= MAX_SESSIONS:
                for old in list(self._by_hash)[: MAX_SESSIONS // 10]:
                    del self._by_hash[old]
            self._by_hash[_digest(session_id)] = session
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of a cookie value, or None."""
        if not session_id:
            return None
        digest = _digest(session_id)
        with self._lock:
            session = self._by_hash.get(digest)
            if session is not None and session.expires <= time.monotonic():
                del self._by_hash[digest]
                return None
            return session

    def close(self, session_id: str | None) -> None:
        """Sign out: forget the session."""
        if session_id:
            with self._lock:
                self._by_hash.pop(_digest(session_id), None)

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, s in self._by_hash.items() if s.expires <= now][:1000]:
            del self._by_hash[key]


def same_token(given: str | None, expected: str) -> bool:
    """Constant-time comparison of a form's CSRF token with the session's."""
    return bool(given) and hmac.compare_digest(str(given).encode("utf-8", "surrogateescape"),
                                               expected.encode())

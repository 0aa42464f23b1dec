"""Who may talk to the daemon: the API token, allowed Host and Origin names, failure limits."""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from psirag_kb.errors import KBError

TOKEN_FILE = "api.token"
"""In the data directory: the token the daemon generated at its first start (mode 0600)."""
MIN_TOKEN_CHARS = 32
LOOPBACK_NAMES = ("localhost",)


class TokenError(KBError):
    """A token that cannot be used (too short, unreadable file)."""


def check_token(token: str, origin: str) -> str:
    """A hand-set token, refused when shorter than 32 characters or holding odd characters."""
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(
            f"the API token from {origin} has {len(token)} characters; use at least "
            f"{MIN_TOKEN_CHARS} (for example `python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`), or unset it to use the generated one"
        )
    if not token.isascii() or not token.isprintable() or " " in token:
        raise TokenError(f"the API token from {origin} must be printable ASCII without spaces")
    return token


def read_token_file(path: Path) -> str:
    """The token in a token file ("" when there is none)."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenError(f"cannot read the API token file {path}: {exc}") from exc


def ensure_token_file(data_dir: Path) -> str:
    """The data directory's generated token, created (0600) on first use."""
    path = Path(data_dir) / TOKEN_FILE
    existing = read_token_file(path)
    if existing:
        return check_token(existing, str(path))
    token = secrets.token_urlsafe(32)
    temporary = path.with_suffix(".tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    descriptor = os.open(temporary, flags, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
    return token


def configured_token(hand_set: str, token_file: str, origin: str) -> str:
    """A token set by hand: PSIRAG_KB_TOKEN, then [api] token, then [api] token_file."""
    env = os.environ.get("PSIRAG_KB_TOKEN", "")
    if env:
        return check_token(env, "PSIRAG_KB_TOKEN")
    if hand_set:
        return check_token(hand_set, f"[api] token in {origin}")
    if token_file:
        path = Path(token_file).expanduser()
        found = read_token_file(path)
        if not found:
            raise TokenError(f"the API token file {path} ([api] token_file) is missing or empty")
        return check_token(found, str(path))
    return ""


def host_name(value: str) -> str:
    """The host part of a Host header value ("[::1]:8765" -> "::1"), lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def is_ip(name: str) -> bool:
    """Whether a host name is an IP literal."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts local connections."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HostPolicy:
    """Which Host and Origin names a request may carry (DNS rebinding needs a foreign name).

    An IP literal is always accepted: a rebinding page reaches the daemon under its own domain
    name, never under an address. Names are "localhost" and, when the daemon listens beyond
    loopback, this machine's names plus `[api] allowed_hosts` ("*" accepts any).
    """

    def __init__(self, bind: str, extra: Iterable[str] = ()) -> None:
        names = {"localhost"}
        if not is_loopback(bind):
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
            if not is_ip(bind) and bind:
                names.add(bind.lower())
        self.any = False
        for name in extra:
            if name.strip() == "*":
                self.any = True
            elif name.strip():
                names.add(host_name(name))
        self.names = frozenset(names)

    def host_allowed(self, header: str | None) -> bool:
        """Whether a Host header names this daemon (a missing one is HTTP/1.0: allowed)."""
        if header is None or self.any:
            return True
        name = host_name(header)
        return is_ip(name) or name in self.names or name.endswith(".localhost")

    def origin_allowed(self, origin: str | None) -> bool:
        """Whether a browser's Origin header is one of ours (no header: not a browser page)."""
        if origin is None:
            return True
        if self.any:
            return origin != "null"
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        return self.host_allowed(parts.netloc)


class FailureLimiter:
    """Failed token checks per client address: after `limit` within `window_s`, refuse it."""

    def __init__(self, limit: int = 10, window_s: float = 60.0, clients: int = 10_000) -> None:
        self.limit = limit
        self.window_s = window_s
        self.clients = clients
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self._failures.get(client)
        if times is None:
            return deque()
        while times and now - times[0] > self.window_s:
            times.popleft()
        if not times:
            del self._failures[client]
        return times

    def retry_after(self, client: str) -> float:
        """Seconds until the client may try again (0 when it may now)."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(client, now)
            if len(times) < self.limit:
                return 0.0
            return max(0.0, self.window_s - (now - times[0]))

    def failed(self, client: str) -> None:
        """Count one failed check."""
        now = time.monotonic()
        with self._lock:
            if client not in self._failures and len(self._failures) >= self.clients:
                for old in list(self._failures)[: self.clients // 10 or 1]:
                    del self._failures[old]
            times = self._recent(client, now)
            times.append(now)
            self._failures[client] = times


def token_matches(given: str, token: str) -> bool:
    """Constant-time comparison of an Authorization header with the token."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"),
                               f"Bearer {token}".encode())

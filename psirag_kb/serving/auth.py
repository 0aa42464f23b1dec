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

from psirag_kb.config import Config
from psirag_kb.errors import KBError

TOKEN_FILE = "api.token"
"""In the data directory: the token the daemon generated at its first start (mode 0600)."""
MIN_TOKEN_CHARS = 32
LOOPBACK_NAMES = ("localhost",)
DEFAULT_PORTS = {"http": 80, "https": 443}
WILDCARDS = ("", "0.0.0.0", "::")


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
    return host_and_port(value)[0]


def host_and_port(value: str) -> tuple[str, int | None]:
    """A Host header value or `[api] allowed_hosts` entry as (lower-case name, port or None);
    a port that is not a number is -1, which matches no origin."""
    value = value.strip().lower()
    name, port = value, ""
    if value.startswith("["):
        if "]" in value:
            name, rest = value[1:value.find("]")], value[value.find("]") + 1:]
            port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        name, port = value.split(":", 1)
    if not port:
        return name, None
    return name, int(port) if port.isdigit() and len(port) <= 5 else -1


def origin_parts(origin: str) -> tuple[str, str, int] | None:
    """An Origin header as (scheme, lower-case host, port with the scheme's default), or None
    when it is not an http(s) origin."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc \
            or parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    return parts.scheme, parts.hostname.lower(), DEFAULT_PORTS[parts.scheme] if port is None \
        else port


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

    Host: an IP literal is always accepted, as a rebinding page reaches the daemon under its own
    domain name, never under an address. Names are "localhost" and, when the daemon listens
    beyond loopback, this machine's names plus `[api] allowed_hosts` ("*" accepts any).
    Origin: only the server's own origin (its Host as reached, or one of its names on the port
    it listens on) or an allowed host's origin; a page on any other port or address is foreign.
    """

    def __init__(self, bind: str, extra: Iterable[str] = (), port: int = 0) -> None:
        names = {"localhost"}
        local = is_loopback(bind) or bind in WILDCARDS
        own = {"localhost", "127.0.0.1", "::1"} if local else set()
        if not is_loopback(bind):
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
            if not is_ip(bind) and bind:
                names.add(bind.lower())
            own |= names - {"localhost"}
        if bind and bind not in WILDCARDS:
            own.add(host_name(bind))
        self.any = False
        allowed: set[tuple[str, int | None]] = set()
        for name in extra:
            if name.strip() == "*":
                self.any = True
            elif name.strip():
                names.add(host_name(name))
                allowed.add(host_and_port(name))
        self.names = frozenset(names)
        self.own = frozenset(own)
        self.port = port
        self.allowed = frozenset(allowed)

    def host_allowed(self, header: str | None) -> bool:
        """Whether a Host header names this daemon (a missing one is HTTP/1.0: allowed)."""
        if header is None or self.any:
            return True
        name = host_name(header)
        return is_ip(name) or name in self.names or name.endswith(".localhost")

    def origin_allowed(self, origin: str | None, host: str | None = None) -> bool:
        """Whether a browser's Origin header is this server's own (no header: not a browser
        page); `host` is the request's Host header, already found to name this daemon."""
        if origin is None:
            return True
        if self.any:
            return origin != "null"
        parts = origin_parts(origin)
        if parts is None:
            return False
        scheme, name, port = parts
        if host is not None and _same(name, port, host_and_port(host), scheme):
            return True
        if scheme == "http" and port == self.port and self.port and (
                name in self.own or (name.endswith(".localhost") and "localhost" in self.own)):
            return True
        return any(_same(name, port, entry, scheme) for entry in self.allowed)


def _same(name: str, port: int, host: tuple[str, int | None], scheme: str) -> bool:
    """Whether an origin's host and port are those of a Host value (no port: the scheme's)."""
    return name == host[0] and port == (DEFAULT_PORTS[scheme] if host[1] is None else host[1])


class FailureLimiter:
    """Wrong tokens per client address: after `limit` within `window_s`, its wrong tokens are
    refused (429) before being counted; the right token is checked first and never limited."""

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


class PersonLimiter:
    """Requests per person per minute (a token bucket each); 0 means no limit."""

    def __init__(self, per_minute: int, people: int = 10_000) -> None:
        self.per_minute = per_minute
        self.people = people
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def wait(self, person: str) -> float:
        """Take one request from the person's bucket: 0 when it may go, else seconds to wait."""
        if self.per_minute <= 0:
            return 0.0
        rate = self.per_minute / 60.0
        now = time.monotonic()
        with self._lock:
            tokens, then = self._buckets.get(person, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - then) * rate)
            if tokens < 1.0:
                self._buckets[person] = (tokens, now)
                return (1.0 - tokens) / rate
            if person not in self._buckets and len(self._buckets) >= self.people:
                self._buckets.clear()
            self._buckets[person] = (tokens - 1.0, now)
            return 0.0


def bearer(header: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header ("" when there is none)."""
    if not header or not header.startswith("Bearer "):
        return ""
    return header[len("Bearer "):].strip()


def api_token(config: Config) -> str:
    """The API token a client sends: PSIRAG_KB_TOKEN, [api] token or token_file, else the
    token the local daemon generated in the data directory ("" when there is none)."""
    return (configured_token(config.api.token, config.api.token_file, "the config")
            or read_token_file(config.data_dir / TOKEN_FILE))

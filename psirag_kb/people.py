"""The people of a team server: names, roles, folder grants and hashed tokens in people.json.

A small JSON file beside the stores, not a DuckDB table: `users ...` must work on the data
directory while no daemon runs and DuckDB admits one process, and a running daemon notices a
change by the file's modification time within a second, without a restart. Writes hold an
exclusive flock on people.lock and replace the file atomically (mode 0600). Tokens are
`secrets.token_urlsafe(32)` (256 random bits) and only their SHA-256 is stored: a random token
needs no salt, and the hash is the key of the lookup, so a request costs one dict access.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from psirag_kb.access import Access
from psirag_kb.errors import KBError

log = logging.getLogger(__name__)

ROLES = ("reader", "editor", "admin", "monitor")
"""reader: reads what their grants cover; editor: also reindexes inside them; admin: everything,
including people; monitor: the server's metrics and health only (never a document)."""
PEOPLE_FILE = "people.json"
LOCK_FILE = "people.lock"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
RESERVED = ("owner",)
RELOAD_EVERY_S = 0.5
"""How often a reader looks at the file's modification time."""
SEEN_EVERY_S = 60.0
"""How often the daemon writes down when people last used their tokens."""


class PeopleError(KBError):
    """A people command that cannot be done (bad name, role or grant)."""


class UnknownPerson(PeopleError):
    """No person has that name."""


def token_hash(token: str) -> str:
    """The stored form of a token: SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def grant_path(raw: str) -> str:
    """A grant as stored: absolute, '~' expanded, normalised like the watched folders."""
    text = str(raw).strip()
    if not text or "\x00" in text:
        raise PeopleError("a grant is an absolute path to a folder or file")
    expanded = os.path.expanduser(text)
    if not os.path.isabs(expanded):
        raise PeopleError(f"grant {raw!r} must be an absolute path")
    return os.path.normpath(expanded)


@dataclass(frozen=True)
class Person:
    """One person: role, grants, the hash of their token, and when it was made and used."""

    name: str
    role: str
    grants: tuple[str, ...]
    token_sha256: str
    created: float
    last_used: float | None = None
    rotated: float | None = None

    @property
    def access(self) -> Access:
        """What the person may read (an admin reads everything)."""
        grants = None if self.role == "admin" else () if self.role == "monitor" else self.grants
        return Access(name=self.name, role=self.role, grants=grants)

    def shown(self) -> dict[str, Any]:
        """The person as listed: never the token nor its hash."""
        return {"name": self.name, "role": self.role, "grants": list(self.grants),
                "created": self.created, "rotated": self.rotated, "last_used": self.last_used}

    def stored(self) -> dict[str, Any]:
        """The person as written in people.json."""
        return self.shown() | {"token_sha256": self.token_sha256}


def _person(raw: dict[str, Any]) -> Person:
    return Person(name=str(raw["name"]), role=str(raw["role"]),
                  grants=tuple(str(g) for g in raw.get("grants", ())),
                  token_sha256=str(raw["token_sha256"]), created=float(raw["created"]),
                  last_used=raw.get("last_used"), rotated=raw.get("rotated"))


@dataclass
class _Snapshot:
    people: dict[str, Person] = field(default_factory=dict)
    by_hash: dict[str, str] = field(default_factory=dict)
    stamp: tuple[int, int, int] | None = None


class People:
    """The registry in one data directory; thread-safe, reloaded when the file changes."""

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / PEOPLE_FILE
        self._lock = threading.Lock()
        self._snapshot = _Snapshot()
        self._checked = 0.0
        self._seen: dict[str, float] = {}
        self._seen_dirty = False
        self._seen_written = time.monotonic()
        self._reload(force=True, strict=False)

    # -- reading ----------------------------------------------------------------------------

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        return info.st_mtime_ns, info.st_size, info.st_ino

    def _read(self) -> dict[str, Person]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise PeopleError(f"cannot read {self.path}: {exc}") from exc
        try:
            people = [_person(raw) for raw in data.get("people", [])]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PeopleError(f"{self.path} is malformed ({exc!r})") from exc
        return {p.name: p for p in people}

    def _reload(self, force: bool = False, strict: bool = True) -> _Snapshot:
        """The registry as the file now says; a file that cannot be read lets nobody in
        (`strict`: raises, for the `users` commands)."""
        now = time.monotonic()
        if not force and now - self._checked < RELOAD_EVERY_S:
            return self._snapshot
        with self._lock:
            self._checked = now
            stamp = self._stamp()
            if not force and stamp == self._snapshot.stamp:
                return self._snapshot
            try:
                people = self._read()
            except PeopleError:
                if strict:
                    raise
                log.error("no person's token is accepted until %s is fixed", self.path,
                          exc_info=True)
                people = {}
            self._snapshot = _Snapshot(people, {p.token_sha256: p.name for p in people.values()},
                                       stamp)
            return self._snapshot

    def grant_paths(self) -> list[str]:
        """Every path granted to anyone, once each: the boundaries the tree is partitioned at."""
        people = self._reload(strict=False).people.values()
        return sorted({grant for person in people for grant in person.grants})

    def access_for(self, token: str) -> Access | None:
        """The Access of the person holding `token`, or None for no such (or a revoked) token."""
        return self.access_by_hash(token_hash(token))

    def access_by_hash(self, digest: str) -> Access | None:
        """The Access of the person whose token has this SHA-256 (a web session keeps only the
        hash), or None once that token is revoked or rotated."""
        snapshot = self._reload(strict=False)
        name = snapshot.by_hash.get(digest)
        person = snapshot.people.get(name) if name is not None else None
        if person is None or not hmac.compare_digest(person.token_sha256, digest):
            return None
        self._used(person.name)
        return person.access

    def listed(self) -> list[dict[str, Any]]:
        """Everyone, by name, as shown to an admin (no token, no hash)."""
        people = self._reload(force=True).people
        return [self._with_seen(p).shown() for _, p in sorted(people.items())]

    def get(self, name: str) -> Person:
        """One person, or UnknownPerson naming who exists."""
        return _known(self._reload(force=True).people, name)

    def _with_seen(self, person: Person) -> Person:
        seen = self._seen.get(person.name)
        if seen is not None and (person.last_used or 0) < seen:
            return replace(person, last_used=seen)
        return person

    def _used(self, name: str) -> None:
        self._seen[name] = time.time()
        self._seen_dirty = True

    # -- writing ----------------------------------------------------------------------------

    @contextmanager
    def _editing(self) -> Iterator[dict[str, Person]]:
        """The registry to change under an exclusive flock, written back atomically."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            people = self._read()
            for name, seen in self._seen.copy().items():  # request threads add to it
                if name in people and (people[name].last_used or 0) < seen:
                    people[name] = replace(people[name], last_used=seen)
            yield people
            self._write(people)
            self._seen_written = time.monotonic()
            self._seen_dirty = False
        finally:
            os.close(descriptor)  # releases the flock
        self._reload(force=True)

    def _write(self, people: dict[str, Person]) -> None:
        data = {"version": 1, "people": [p.stored() for _, p in sorted(people.items())]}
        temporary = self.path.with_suffix(".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, self.path)

    def add(self, name: str, role: str = "reader", grants: Sequence[str] = ()) -> str:
        """Create a person; returns their token (shown once, never stored)."""
        _check_name(name)
        _check_role(role)
        if role == "monitor" and grants:
            raise PeopleError("a monitor reads metrics and health only: give no folders")
        paths = tuple(dict.fromkeys(grant_path(g) for g in grants))
        token = secrets.token_urlsafe(32)
        with self._editing() as people:
            if name in people:
                raise PeopleError(f"{name!r} exists already; `users rotate {name}` gives them "
                                  "a new token, `users grant` more folders")
            people[name] = Person(name, role, paths, token_hash(token), time.time())
        return token

    def grant(self, name: str, grants: Sequence[str]) -> Person:
        """Add folders or files a person may read."""
        paths = [grant_path(g) for g in grants]
        with self._editing() as people:
            person = _known(people, name)
            person = replace(person, grants=tuple(dict.fromkeys([*person.grants, *paths])))
            people[name] = person
        return person

    def ungrant(self, name: str, grants: Sequence[str]) -> Person:
        """Take grants away (each must be one the person has)."""
        paths = [grant_path(g) for g in grants]
        with self._editing() as people:
            person = _known(people, name)
            missing = [p for p in paths if p not in person.grants]
            if missing:
                raise PeopleError(f"{name} has no grant {', '.join(missing)} (grants: "
                                  f"{', '.join(person.grants) or 'none'})")
            person = replace(person, grants=tuple(g for g in person.grants if g not in paths))
            people[name] = person
        return person

    def revoke(self, name: str) -> None:
        """Remove a person: their token stops working within a second."""
        with self._editing() as people:
            _known(people, name)
            del people[name]
        self._seen.pop(name, None)

    def rotate(self, name: str) -> str:
        """A new token for a person; the old one stops working. Returns the new token."""
        token = secrets.token_urlsafe(32)
        with self._editing() as people:
            people[name] = replace(_known(people, name), token_sha256=token_hash(token),
                                   rotated=time.time())
        return token

    def write_seen(self, every_s: float = SEEN_EVERY_S) -> bool:
        """Write down when people last used their tokens, at most every `every_s` seconds."""
        if not self._seen_dirty or time.monotonic() - self._seen_written < every_s:
            return False
        with self._editing():
            pass
        return True


def _known(people: dict[str, Person], name: str) -> Person:
    if name not in people:
        known = ", ".join(sorted(people)) or "nobody yet"
        raise UnknownPerson(f"no person named {name!r} (known: {known})")
    return people[name]


def _check_name(name: str) -> None:
    if not NAME.fullmatch(name) or name.lower() in RESERVED:
        raise PeopleError(f"{name!r} cannot be a name: use 1-64 letters, digits, '.', '_' or "
                          f"'-' (not {', '.join(RESERVED)})")


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise PeopleError(f"unknown role {role!r}; choose {', '.join(ROLES)}")


class Users:
    """The `users` commands as JSON-ready answers, the same on the data directory and over
    the daemon's API."""

    def __init__(self, people: People) -> None:
        self.people = people

    def list(self) -> dict[str, Any]:
        """{"users": [...]}: names, roles, grants, created, last used; never a token."""
        return {"users": self.people.listed()}

    def add(self, name: str, role: str = "reader", read: Sequence[str] = ()) -> dict[str, Any]:
        """{"name", "token"}: the new person's token, shown this once."""
        return {"name": name, "token": self.people.add(name, role, read)}

    def grant(self, name: str, read: Sequence[str]) -> dict[str, Any]:
        """The person with more grants."""
        return self.people.grant(name, read).shown()

    def ungrant(self, name: str, read: Sequence[str]) -> dict[str, Any]:
        """The person with fewer grants."""
        return self.people.ungrant(name, read).shown()

    def revoke(self, name: str) -> dict[str, Any]:
        """{"revoked": name}."""
        self.people.revoke(name)
        return {"revoked": name}

    def rotate(self, name: str) -> dict[str, Any]:
        """{"name", "token"}: the new token, shown this once."""
        return {"name": name, "token": self.people.rotate(name)}

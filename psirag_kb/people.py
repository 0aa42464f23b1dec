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
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
RESERVED = ("owner",)
RELOAD_EVERY_S = 0.5
"""How often a reader looks at the file's modification time."""
SEEN_EVERY_S = 60.0
"""How often the daemon writes down when people last used their tokens."""
SOURCES = ("token", "oidc", "proxy")
"""Where a person comes from: `users add` (a token), the OpenID provider, the sign-in proxy."""
SIGN_IN_EVERY_S = 60.0
"""A sign-in that changes nothing is written down at most this often (the proxy signs in on
every request)."""
MAX_TOKENS = 20
"""Personal tokens one person may hold."""


class PeopleError(KBError):
    """A people command that cannot be done (bad name, role or grant)."""


class UnknownPerson(PeopleError):
    """No person has that name."""


class SignInRefused(PeopleError):
    """A sign-in from the provider or proxy that gives no access (no granting group)."""


@dataclass(frozen=True)
class PersonalToken:
    """A token a person made for themselves: its name, hash, when made and last used."""

    name: str
    token_sha256: str
    created: float
    last_used: float | None = None

    def shown(self) -> dict[str, Any]:
        """As listed: never the token nor its hash."""
        return {"name": self.name, "created": self.created, "last_used": self.last_used}


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
    source: str = "token"
    """"token" (made by `users add`), "oidc" or "proxy" (made at their first sign-in)."""
    groups: tuple[str, ...] = ()
    """Their groups at the provider at their last sign-in."""
    group_grants: tuple[str, ...] = ()
    """What those groups grant (`grants` are the ones an admin gave by hand)."""
    last_sign_in: float | None = None
    tokens: tuple[PersonalToken, ...] = ()

    @property
    def access(self) -> Access:
        """What the person may read (an admin everything, a monitor nothing): hand and group
        grants."""
        grants = (None if self.role == "admin" else () if self.role == "monitor"
                  else self.all_grants)
        return Access(name=self.name, role=self.role, grants=grants)

    @property
    def all_grants(self) -> tuple[str, ...]:
        """Hand-given grants, then the groups' grants, once each."""
        return tuple(dict.fromkeys([*self.grants, *self.group_grants]))

    def shown(self) -> dict[str, Any]:
        """The person as listed: never the token nor its hash."""
        return {"name": self.name, "role": self.role, "grants": list(self.grants),
                "created": self.created, "rotated": self.rotated, "last_used": self.last_used,
                "source": self.source, "groups": list(self.groups),
                "group_grants": list(self.group_grants), "last_sign_in": self.last_sign_in,
                "tokens": [t.shown() for t in self.tokens]}

    def stored(self) -> dict[str, Any]:
        """The person as written in people.json."""
        return self.shown() | {"token_sha256": self.token_sha256,
                               "tokens": [t.shown() | {"token_sha256": t.token_sha256}
                                          for t in self.tokens]}


def _person(raw: dict[str, Any]) -> Person:
    tokens = tuple(PersonalToken(str(t["name"]), str(t["token_sha256"]), float(t["created"]),
                                 t.get("last_used")) for t in raw.get("tokens", ()))
    return Person(name=str(raw["name"]), role=str(raw["role"]),
                  grants=tuple(str(g) for g in raw.get("grants", ())),
                  token_sha256=str(raw["token_sha256"]), created=float(raw["created"]),
                  last_used=raw.get("last_used"), rotated=raw.get("rotated"),
                  source=str(raw.get("source", "token")),
                  groups=tuple(str(g) for g in raw.get("groups", ())),
                  group_grants=tuple(str(g) for g in raw.get("group_grants", ())),
                  last_sign_in=raw.get("last_sign_in"), tokens=tokens)


def _hashes(people: dict[str, Person]) -> dict[str, tuple[str, str | None]]:
    """Each token hash -> (person, personal token name or None for their `users add` one)."""
    out: dict[str, tuple[str, str | None]] = {}
    for person in people.values():
        if person.token_sha256:
            out[person.token_sha256] = (person.name, None)
        for token in person.tokens:
            out[token.token_sha256] = (person.name, token.name)
    return out


@dataclass
class _Snapshot:
    people: dict[str, Person] = field(default_factory=dict)
    by_hash: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    stamp: tuple[int, int, int] | None = None


class People:
    """The registry in one data directory; thread-safe, reloaded when the file changes."""

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / PEOPLE_FILE
        self._lock = threading.Lock()
        self._snapshot = _Snapshot()
        self._checked = 0.0
        self._seen: dict[tuple[str, str | None], float] = {}
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
            self._snapshot = _Snapshot(people, _hashes(people), stamp)
            return self._snapshot

    def grant_paths(self) -> list[str]:
        """Every path granted to anyone, once each: the boundaries the tree is partitioned at."""
        people = self._reload(strict=False).people.values()
        return sorted({grant for person in people for grant in person.all_grants})

    def access_for(self, token: str) -> Access | None:
        """The Access of the person holding `token`, or None for no such (or a revoked) token."""
        return self.access_by_hash(token_hash(token))

    def access_by_hash(self, digest: str) -> Access | None:
        """The Access of the person whose token has this SHA-256 (a web session keeps only the
        hash), or None once that token is revoked or rotated."""
        snapshot = self._reload(strict=False)
        found = snapshot.by_hash.get(digest)
        person = snapshot.people.get(found[0]) if found is not None else None
        if person is None or found is None:
            return None
        stored = person.token_sha256 if found[1] is None else next(
            (t.token_sha256 for t in person.tokens if t.name == found[1]), "")
        if not hmac.compare_digest(stored, digest):
            return None
        self._used(person.name, found[1])
        return person.access

    def access_of(self, name: str) -> Access | None:
        """The Access of a person signed in through the provider or proxy, now (None once
        they are removed)."""
        person = self._reload(strict=False).people.get(name)
        return None if person is None else person.access

    def listed(self) -> list[dict[str, Any]]:
        """Everyone, by name, as shown to an admin (no token, no hash)."""
        people = self._reload(force=True).people
        return [self._with_seen(p).shown() for _, p in sorted(people.items())]

    def get(self, name: str) -> Person:
        """One person, or UnknownPerson naming who exists."""
        return _known(self._reload(force=True).people, name)

    def _with_seen(self, person: Person) -> Person:
        seen = self._seen.get((person.name, None))
        if seen is not None and (person.last_used or 0) < seen:
            person = replace(person, last_used=seen)
        tokens = []
        for token in person.tokens:
            used = self._seen.get((person.name, token.name))
            tokens.append(replace(token, last_used=used) if used is not None and
                          (token.last_used or 0) < used else token)
        return replace(person, tokens=tuple(tokens))

    def _used(self, name: str, token: str | None = None) -> None:
        self._seen[(name, token)] = time.time()
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
            for name in {key[0] for key in self._seen.copy()}:  # request threads add to it
                if name in people:
                    people[name] = self._with_seen(people[name])
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
        for key in [k for k in self._seen.copy() if k[0] == name]:
            self._seen.pop(key, None)

    def rotate(self, name: str) -> str:
        """A new token for a person; the old one stops working. Returns the new token."""
        token = secrets.token_urlsafe(32)
        with self._editing() as people:
            if _known(people, name).source != "token":
                raise PeopleError(f"{name} signs in through the {people[name].source}; they "
                                  "make their own tokens on the page (or `revoke` them)")
            people[name] = replace(_known(people, name), token_sha256=token_hash(token),
                                   rotated=time.time())
        return token

    def sign_in(self, name: str, source: str, groups: Sequence[str],
                configured: Sequence[Any]) -> Person:
        """A person signing in through the provider or proxy: created on their first sign-in,
        their role (the highest of their groups') and group grants recomputed from `groups`
        against the configured [auth.groups] each time; hand-given grants stay. SignInRefused
        when that gives them nothing to read (their record still loses the old groups)."""
        _check_name(name)
        if source not in SOURCES[1:]:
            raise PeopleError(f"unknown source {source!r}")
        groups = tuple(dict.fromkeys(str(g) for g in groups))
        mine = [g for g in configured if g.name in groups]
        role = max((g.role for g in mine), key=ROLES.index, default="reader")
        granted = tuple(dict.fromkeys(grant_path(p) for g in mine for p in g.read))
        known = self._reload(strict=False).people.get(name)
        now = time.time()
        if known is not None and known.source == source and known.groups == groups and \
                known.role == role and known.group_grants == granted and \
                now - (known.last_sign_in or 0) < SIGN_IN_EVERY_S:
            person = known  # nothing changed: no write on every proxied request
        else:
            with self._editing() as people:
                before = people.get(name)
                if before is not None and before.source != source:
                    raise SignInRefused(
                        f"{name!r} is a person made by `users add`" if before.source == "token"
                        else f"{name!r} signs in through the {before.source}, not the {source}")
                if before is None:
                    before = Person(name, role, (), "", now, source=source)
                person = replace(before, role=role, groups=groups, group_grants=granted,
                                 last_sign_in=now)
                people[name] = person
        if person.role != "admin" and not person.all_grants:
            raise SignInRefused(f"{name} is in no group that grants anything here (groups: "
                                f"{', '.join(groups) or 'none'})")
        return person

    # -- personal tokens --------------------------------------------------------------------

    def tokens_of(self, name: str) -> list[dict[str, Any]]:
        """A person's own tokens: name, created, last used (never the token)."""
        person = self._with_seen(_known(self._reload(force=True).people, name))
        return [t.shown() for t in person.tokens]

    def make_token(self, name: str, token_name: str) -> str:
        """A new personal token for a person; returns it (shown once, never stored)."""
        if not NAME.fullmatch(token_name):
            raise PeopleError(f"{token_name!r} cannot name a token: use 1-64 letters, digits, "
                              "'.', '_', '@' or '-'")
        token = secrets.token_urlsafe(32)
        with self._editing() as people:
            person = _known(people, name)
            if any(t.name == token_name for t in person.tokens):
                raise PeopleError(f"{name} has a token named {token_name!r} already; revoke "
                                  "it first or pick another name")
            if len(person.tokens) >= MAX_TOKENS:
                raise PeopleError(f"{name} has {MAX_TOKENS} tokens already; revoke one first")
            made = PersonalToken(token_name, token_hash(token), time.time())
            people[name] = replace(person, tokens=(*person.tokens, made))
        return token

    def drop_token(self, name: str, token_name: str) -> None:
        """Revoke one of a person's own tokens (it stops working within a second)."""
        with self._editing() as people:
            person = _known(people, name)
            if not any(t.name == token_name for t in person.tokens):
                raise UnknownPerson(f"{name} has no token named {token_name!r} (tokens: "
                                    f"{', '.join(t.name for t in person.tokens) or 'none'})")
            people[name] = replace(person, tokens=tuple(t for t in person.tokens
                                                        if t.name != token_name))
        self._seen.pop((name, token_name), None)

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


class MyTokens:
    """A signed-in person's own tokens as JSON-ready answers (the page and /api/me/tokens)."""

    def __init__(self, people: People) -> None:
        self.people = people

    def _name(self, access: Access) -> str:
        if access.name in RESERVED:
            raise PeopleError("the machine's owner signs in with api.token; personal tokens "
                              "belong to people (`psirag-kb users add`, or a provider sign-in)")
        return access.name

    def list(self, access: Access) -> dict[str, Any]:
        """{"tokens": [{"name", "created", "last_used"}]}."""
        return {"tokens": self.people.tokens_of(self._name(access))}

    def make(self, access: Access, name: str) -> dict[str, Any]:
        """{"name", "token"}: the new token, shown this once."""
        return {"name": name, "token": self.people.make_token(self._name(access), name)}

    def revoke(self, access: Access, name: str) -> dict[str, Any]:
        """{"revoked": name}."""
        self.people.drop_token(self._name(access), name)
        return {"revoked": name}

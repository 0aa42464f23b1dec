"""What one person may read and change: the folders and files granted to them, and their role."""

from __future__ import annotations

import os
from dataclasses import dataclass

ROLES = ("reader", "editor", "admin", "monitor")
"""Roles from least to most: a reader searches and browses, an editor may also reindex inside
their grants, an admin may do everything; apart from them, a monitor reads the server's metrics
and health and nothing else (no document, no status)."""


@dataclass(frozen=True)
class Access:
    """What one person may read: None grants = everything (admin, the machine's owner)."""

    name: str = "owner"
    role: str = "admin"
    grants: tuple[str, ...] | None = None
    """Absolute, resolved paths (folders or files); () reads nothing."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}: use one of {', '.join(ROLES)}")
        if self.grants is not None:
            relative = [g for g in self.grants if not os.path.isabs(g)]
            if relative:
                raise ValueError(f"grants must be absolute paths, not {', '.join(relative)}")
            object.__setattr__(self, "grants", tuple(dict.fromkeys(
                _trimmed(g) for g in self.grants)))

    @property
    def everything(self) -> bool:
        """Whether this person reads everything (no grants to check)."""
        return self.grants is None

    def may_read(self, path: str) -> bool:
        """Whether one of the grants is this path or a folder above it (by path components)."""
        if self.grants is None:
            return True
        return any(covers(grant, path) for grant in self.grants)

    def may_write(self, path: str) -> bool:
        """Whether this person may reindex the path: an admin anywhere, an editor inside grants."""
        if self.role == "admin":
            return True
        return self.role == "editor" and self.may_read(path)

    def within(self, paths: tuple[str, ...]) -> tuple[str, ...]:
        """The parts of these absolute paths this person may read: each path inside a grant, and
        each grant inside a path (the intersection of the asked scope with the grants)."""
        if self.grants is None:
            return paths
        out: list[str] = []
        for path in (_trimmed(p) for p in paths):
            if self.may_read(path):
                out.append(path)
            else:
                out.extend(g for g in self.grants if covers(path, g))
        return tuple(dict.fromkeys(out))


OWNER = Access()
"""The machine's owner (the data directory's admin token, the CLI on the data dir)."""


def covers(folder: str, path: str) -> bool:
    """Whether `path` is `folder` or lies below it, comparing path components, not prefixes."""
    folder = _trimmed(folder)
    if path == folder:
        return True
    return path.startswith(folder if folder.endswith(os.sep) else folder + os.sep)


def _trimmed(path: str) -> str:
    """A path without a trailing separator (the root stays `/`)."""
    stripped = path.rstrip(os.sep)
    return stripped or os.sep

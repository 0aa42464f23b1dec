"""Who is asking: a person's role and the folders or files they may read (below the facade)."""

from __future__ import annotations

import os
from dataclasses import dataclass


def _under(path: str, grant: str) -> bool:
    """Whether `path` is `grant` or lies below it, by path components (never a string prefix)."""
    if path == grant:
        return True
    prefix = grant if grant.endswith(os.sep) else grant + os.sep
    return path.startswith(prefix)


@dataclass(frozen=True)
class Access:
    """What one person may read: None grants = everything (admin, the machine's owner)."""

    name: str = "owner"
    role: str = "admin"  # "reader" | "editor" | "admin"
    grants: tuple[str, ...] | None = None  # absolute, resolved paths (folders or files)

    def may_read(self, path: str) -> bool:
        """Whether a grant contains the path."""
        if self.grants is None:
            return True
        spelled = os.path.normpath(os.path.abspath(str(path)))
        return any(_under(spelled, grant) for grant in self.grants)

    def may_write(self, path: str) -> bool:
        """Whether the person may reindex the path: an editor within grants, admin anywhere."""
        if self.role == "admin":
            return True
        return self.role == "editor" and self.may_read(path)

    @property
    def everything(self) -> bool:
        """Whether the person may read every indexed file."""
        return self.grants is None


OWNER = Access()

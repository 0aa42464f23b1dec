"""Path containment decided by path components after resolving links, never by string prefix."""

from __future__ import annotations

import os
from pathlib import Path


def resolved(path: Path | str) -> Path:
    """The absolute path with symlinks and '..' resolved (missing parts kept as they are)."""
    return Path(os.path.realpath(os.path.abspath(path)))


def inside(path: Path | str, folder: Path | str) -> bool:
    """Whether `path` is `folder` or below it (`~/kb-notes` is not inside `~/kb`)."""
    return resolved(path).is_relative_to(resolved(folder))

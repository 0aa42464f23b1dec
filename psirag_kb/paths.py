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


def spelled_under(path: Path, folder: Path) -> Path | None:
    """`path` spelled below `folder` when it lies there once the folders above it are resolved
    (`L/a.md` is `D/a.md` when L links to D); None when it does not lie there (`inside`), or
    only its own name links there.

    A path already spelled below `folder` is returned as it is.
    """
    root = resolved(folder)
    if not resolved(path).is_relative_to(root):
        return None
    if path == folder or folder in path.parents:
        return path
    if resolved(path) == root:
        return folder
    real = resolved(path.parent) / path.name
    return folder / real.relative_to(root) if real.is_relative_to(root) else None

"""Which paths a reindex or a forget may touch: inside a watched folder or indexed, never the
data directory, and within the caller's role and grants."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from psirag_kb.access import Access
from psirag_kb.errors import AccessDenied, KBError
from psirag_kb.paths import inside, spelled_under

__all__ = ["allowed_path", "may_write"]


def allowed_path(raw: str, data_dir: Path, folders: Sequence[Path],
                 is_indexed: Callable[[Path], bool]) -> Path:
    """The absolute path of a reindex request, refusing traversal and foreign paths."""
    if not raw or "\x00" in raw:
        raise KBError("give an absolute path")
    if not os.path.isabs(raw) or ".." in Path(raw).parts:
        raise KBError(f"{raw!r} must be an absolute path without '..'")
    path = Path(os.path.abspath(raw))
    if inside(path, data_dir):
        raise KBError(f"{path} is inside the data directory, which is never indexed")
    for folder in folders:  # the watcher's spelling: one row per file
        spelled = spelled_under(path, folder)
        if spelled is not None:
            return spelled
    if any(inside(path, folder) for folder in folders):
        return path  # a link to a file in a watched folder
    if is_indexed(path) and not path.is_dir():
        return path  # a file indexed before, never a folder around it (such as "/")
    raise KBError(f"{path} is neither inside a watched folder nor indexed; add its folder "
                  "to [watch] folders (or --watch) first")


def may_write(access: Access, raw: str) -> None:
    """Refuse a reindex the person's role or grants do not allow."""
    spelled = os.path.normpath(raw) if os.path.isabs(raw) else raw
    if not access.may_write(spelled):
        what = "never reindexes" if access.role == "reader" else f"may not reindex {raw}"
        raise AccessDenied(f"{access.name} ({access.role}) {what}")

"""Giving freed heap memory back to the system between embedding batches."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _trim() -> Any:
    """glibc's malloc_trim, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_free_memory() -> bool:
    """Return the allocator's free pages to the system (glibc only); whether it could."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True

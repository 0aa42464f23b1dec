"""The operations served by more than a call of the app, by name."""

from __future__ import annotations

from psirag_kb.service import people_api, probes, search_api, v1
from psirag_kb.serving.ops import OPS

__all__ = ["HANDLERS"]

HANDLERS = {**search_api.HANDLERS, **people_api.HANDLERS, **probes.HANDLERS, **v1.HANDLERS}


def _complete() -> None:
    """Refuse a table whose operation neither calls the app nor has a handler."""
    missing = sorted(o.name for o in OPS if o.target is None and o.name not in HANDLERS)
    if missing:
        raise ValueError(f"operations without a handler: {', '.join(missing)}")


_complete()

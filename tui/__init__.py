"""The Textual terminal UI of psirag-kb: talks to a KBClient only (daemon API or in-process)."""

from __future__ import annotations

__all__ = ["PsiragApp"]


def __getattr__(name: str):
    if name == "PsiragApp":
        from .app import PsiragApp

        return PsiragApp
    raise AttributeError(name)

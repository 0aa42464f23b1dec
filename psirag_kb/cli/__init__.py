"""The `psirag-kb` command line: every command opens the facade and calls one method."""

from psirag_kb.cli.entry import main

__all__ = ["main"]

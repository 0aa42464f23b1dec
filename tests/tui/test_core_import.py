"""The core library stays importable without the TUI's toolkit."""

from __future__ import annotations

import subprocess
import sys


def test_the_core_library_does_not_import_textual() -> None:
    code = ("import sys, psirag_kb, psirag_kb.kb, psirag_kb.service.client, psirag_kb.cli, "
            "psirag_kb.service.daemon; print('textual' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"

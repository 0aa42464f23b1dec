"""The TUI on a real knowledge base in-process (bundled model, real stores and files)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.client import LocalClient
from tui.app import PsiragApp

from .test_app import SIZE, ask, options, until

NOTES = {
    "volcanoes.md": "# Volcanoes\n\nMagma rises through the crust and erupts as lava. "
                    "Basalt forms when lava cools quickly.\n",
    "bees.md": "# Bees\n\nHoneybees dance to tell the hive where flowers are. "
               "A colony has one queen and thousands of workers.\n",
    "tides.md": "# Tides\n\nThe moon's gravity pulls the oceans, raising two tidal bulges. "
                "Spring tides happen at full and new moon.\n",
}


@pytest.mark.asyncio
async def test_query_on_a_real_kb(config: Config, tmp_path: Path, minilm) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in NOTES.items():
        (docs / name).write_text(text)
    client = LocalClient(KnowledgeBase(config, minilm))
    try:
        client.reindex(docs)
        app = PsiragApp(client)
        async with app.run_test(size=SIZE) as pilot:
            await ask(pilot, "how do bees tell where flowers are")
            await until(pilot, lambda: options(app), timeout=30)
            assert "bees.md:" in options(app)[0]
            path = app.screen.query_one("#treepath", Static)
            await until(pilot, lambda: "root first" in str(path.render()), timeout=30)
    finally:
        client.close()


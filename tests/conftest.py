"""Shared fixtures: isolation from the user's environment, embedders."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

from psirag_kb.config import Config, EmbeddingConfig
from psirag_kb.ingest.embedding import SentenceTransformerEmbedder, normalise

NOTES = {
    "birds.md": "# Birds\n\nThe arctic tern migrates from pole to pole every single year.\n"
    "Its round trip covers about seventy thousand kilometres.\n",
    "volcano.txt": "Mount Etna is an active stratovolcano on the east coast of Sicily.\n\n"
    "Its eruptions have been recorded for at least 2,700 years.\n",
    "bread.rst": "Sourdough\n=========\n\nA sourdough starter is a culture of wild yeast and "
    "lactic acid bacteria kept alive by regular feeding with flour and water.\n",
}
"""Three small notes in three formats, each with a sentence of its own."""


def scanned_pdf(path: Path, pages: list[str]) -> Path:
    """Write a PDF whose pages are images of these sentences (no text layer), as a scanner does."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=40)
    images = []
    for sentence in pages:
        image = Image.new("L", (1700, 600), 255)
        ImageDraw.Draw(image).text((60, 250), sentence, fill=0, font=font)
        images.append(image)
    images[0].save(path, "PDF", resolution=150, save_all=True, append_images=images[1:])
    return path

pytest_plugins = ["fake_ollama", "browser_plugin", "oidc_provider"]  # fixtures: `fake_ollama`,
# `browser`; oidc_provider says at the end of the run when the OIDC tests were skipped


UNIT = Path(__file__).parent / "unit"
NOT_FAST_FIXTURES = frozenset({"minilm"})
"""Fixtures that make a test more than pure logic (the real MiniLM model)."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tiers: a test under tests/unit is `fast` (`make test-fast`, `pytest -m fast`) unless
    it is marked `integration` or `slow`, or uses a fixture in NOT_FAST_FIXTURES. A unit test
    module that spawns processes or opens a KnowledgeBase says so with `pytestmark =
    pytest.mark.integration` (one test of a pure module: `@pytest.mark.integration`)."""
    for item in items:
        if not item.path.is_relative_to(UNIT):
            continue
        if item.get_closest_marker("integration") or item.get_closest_marker("slow"):
            continue
        if NOT_FAST_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            continue
        item.add_marker(pytest.mark.fast)


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the user's config, data, token and Ollama out of every test."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("PSIRAG_KB_TOKEN", raising=False)
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.chdir(home)


class FakeEmbedder:
    """Deterministic bag-of-words vectors: fast, for pure logic and plumbing tests."""

    name = "fake-bow"
    dim = 64

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                slot = int(hashlib.md5(word.encode()).hexdigest()[:8], 16) % self.dim
                out[row, slot] += 1.0
            out[row, row % self.dim] += 1e-3
        return normalise(out)

    def count_tokens(self, text: str) -> int:
        return len(text.split())


@pytest.fixture
def fake_embedder() -> FakeEmbedder:
    return FakeEmbedder()


class MemoEmbedder:
    """The real model with an in-memory memo, so tests that index the same texts embed once."""

    def __init__(self, model: SentenceTransformerEmbedder) -> None:
        self._model = model
        self.name = model.name
        self.dim = model.dim
        self._memo: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            self._memo.update(zip(missing, self._model.embed(missing), strict=True))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])

    def count_tokens(self, text: str) -> int:
        return self._model.count_tokens(text)


@pytest.fixture(scope="session")
def minilm() -> MemoEmbedder:
    """The real bundled model, loaded once per test session (vectors memoised by text)."""
    embedder = SentenceTransformerEmbedder(EmbeddingConfig())
    assert embedder.dim == 384
    return MemoEmbedder(embedder)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """Default config with a fresh data directory."""
    return Config().with_data_dir(tmp_path / "data")


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """An empty folder for documents beside the data directory (a module that wants notes in
    it defines its own `docs`)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    return folder

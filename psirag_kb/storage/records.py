"""Records the stores hand back: rankings of chunk ids."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Ranking:
    """Chunk ids best first, with the retriever's scores."""

    ids: np.ndarray
    scores: np.ndarray

    @classmethod
    def empty(cls) -> Ranking:
        """A ranking with nothing in it."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.float32))

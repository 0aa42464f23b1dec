"""Vectors of recently asked questions, so a question asked again costs no model pass."""

from __future__ import annotations

import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

SIZE = 4096
"""Questions kept at most (about 1.5 KiB each at 384 dimensions: 6 MiB); the least recently
used goes first."""
TTL_S = 300.0
"""Seconds a question's vector is kept after it was embedded: a chat app's retries and the
page's follow-ups come within minutes."""


def question_key(text: str) -> str:
    """The text a vector is kept under: Unicode NFC, runs of white space as one space."""
    return " ".join(unicodedata.normalize("NFC", text).split())


class QuestionCache:
    """A bounded, expiring map from (model, normalised question) to its unit vector.

    Thread-safe: every client thread of the daemon reads and fills it. Vectors are stored
    read-only, so no caller can change another's.
    """

    def __init__(self, size: int = SIZE, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.ttl_s = ttl_s
        self._clock = clock
        self._kept: OrderedDict[tuple[str, str], tuple[float, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)

    def get(self, model: str, text: str) -> np.ndarray | None:
        """The vector kept for this question under this model, or None (absent or expired)."""
        key = (model, question_key(text))
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                return None
            if self._clock() - kept[0] >= self.ttl_s:
                del self._kept[key]
                return None
            self._kept.move_to_end(key)
            return kept[1]

    def put(self, model: str, text: str, vector: np.ndarray) -> None:
        """Keep a question's vector (the oldest entries go beyond `size`)."""
        if self.size <= 0:
            return
        stored = np.array(vector, dtype=np.float32)
        stored.flags.writeable = False
        key = (model, question_key(text))
        with self._lock:
            self._kept[key] = (self._clock(), stored)
            self._kept.move_to_end(key)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def clear(self) -> None:
        """Forget every vector (the model changed)."""
        with self._lock:
            self._kept.clear()

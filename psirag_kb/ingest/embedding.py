"""Embedder protocol and the sentence-transformers implementation (offline default)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from psirag_kb.config import EmbeddingConfig, StorageConfig
from psirag_kb.errors import ConfigError
from psirag_kb.ingest.chunking import content_hash
from psirag_kb.ingest.device import pick_device
from psirag_kb.ingest.models import TokenCounter, normalise, quiet_offline, resolve_model_path
from psirag_kb.ingest.question_cache import QuestionCache

__all__ = ["CachedEmbedder", "Embedder", "QueryEmbedder", "SentenceTransformerEmbedder",
           "TokenCounter", "for_queries", "make_embedder", "normalise", "quiet_offline",
           "resolve_model_path", "yield_cores"]

log = logging.getLogger(__name__)


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    name: str

    @property
    def dim(self) -> int:
        """Length of each vector."""
        ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return an (n, dim) float32 array of unit vectors."""
        ...

    def count_tokens(self, text: str) -> int:
        """Number of model tokens in `text` (without special tokens)."""
        ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded on first use, offline when it is a local folder."""

    def __init__(self, config: EmbeddingConfig, threads: int | None = None,
                 purpose: str = "passages") -> None:
        """`threads`: torch threads for calls made from each thread that uses this instance;
        `purpose`: what it embeds, for the log."""
        self.name = config.model
        self.purpose = purpose
        self._config = config
        self._threads = threads
        self._local = threading.local()
        self._model = None
        self._lock = threading.Lock()
        self._use = threading.Lock()  # a model's tokenizer must not be used by two threads at once
        self._dim: int | None = None
        self._full_threads = 1
        self._counter: TokenCounter | None = None
        self.yield_cores: Callable[[], bool] | None = None
        """When set and true, batches run on one torch thread, leaving a core to questions."""
        self.device = ""
        """The torch device the model runs on, once loaded ([embedding] device resolved)."""
        self.device_reason = ""

    def _load(self):
        """Import torch and load the model (a few seconds, done once)."""
        with self._lock:
            if self._model is None:
                path = resolve_model_path(self._config.model)
                quiet_offline(path)
                import torch
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                self._full_threads = torch.get_num_threads()
                self.device, self.device_reason = pick_device(self._config.device)

                hf_logging.disable_progress_bar()

                log.info("loading embedding model %s for %s on %s (%s)", self.name,
                         self.purpose, self.device, self.device_reason)
                try:
                    self._model = SentenceTransformer(path, device=self.device)
                except Exception as exc:  # noqa: BLE001 - any loader failure is a config problem
                    raise ConfigError(
                        f"embedding model {self.name!r} could not be loaded ({exc}); "
                        "set [embedding] model to a local sentence-transformers folder"
                    ) from exc
                model = self._model
                get_dim = getattr(model, "get_embedding_dimension", None) or (
                    model.get_sentence_embedding_dimension
                )
                self._dim = int(get_dim())
        return self._model

    def for_queries(self) -> SentenceTransformerEmbedder:
        """Another instance of the same model, so questions never wait for a file's batch.

        It runs on one torch thread: beside a file's batch, two threads per question only
        fight over the two cores (benchmarks/embed_threads.py: 232 questions/s on one thread,
        192 on two, the file embedding unchanged).
        """
        return SentenceTransformerEmbedder(self._config, threads=1, purpose="questions")

    @property
    def dim(self) -> int:  # type: ignore[override]
        """Vector dimension (loads the model)."""
        self._load()
        assert self._dim is not None
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts in batches; returns unit float32 vectors.

        With `yield_cores` set, the batches (longest texts first, as sentence-transformers
        orders them) run on one torch thread whenever it says questions are being asked.
        """
        model = self._load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        step = self._config.batch_size if self.yield_cores is not None else len(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), step):
            rows = order[start:start + step]
            if self._threads is not None:
                self._set_threads(self._threads)
            elif self.yield_cores is not None:
                self._set_threads(1 if self.yield_cores() else self._full_threads)
            with self._use:
                out[rows] = model.encode(
                    [texts[i] for i in rows],
                    batch_size=self._config.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
        return out

    def _set_threads(self, count: int) -> None:
        """Torch threads for this thread's calls (OpenMP keeps the setting per thread)."""
        if getattr(self._local, "threads", None) != count:
            import torch

            torch.set_num_threads(count)
            self._local.threads = count

    def count_tokens(self, text: str) -> int:
        """Token count from the model's own tokenizer."""
        tokenizer = self._load().tokenizer
        if self._counter is None:
            self._counter = TokenCounter(tokenizer)
        if self._counter.shared:
            with self._use:
                return self._counter(text)
        return self._counter(text)


class QueryEmbedder:
    """Embeds questions for many threads at once: those that arrive together share one call.

    One thread feeds the model, so a burst of concurrent questions costs one batched forward
    pass instead of one pass each, and no question waits behind another thread's lock. A
    question asked in the last minutes comes from a bounded cache (`QuestionCache`) keyed by
    the model's name, and a new model gets a new QueryEmbedder (see `kb.py`'s switch).
    """

    MAX_BATCH = 64

    def __init__(self, inner: Embedder, cache: QuestionCache | None = None) -> None:
        self.inner = inner
        self.cache = QuestionCache() if cache is None else cache
        self._waiting: list[_Question] = []
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._last_asked = -1e9
        self._in_model = 0

    def busy(self, within_s: float = 1.0) -> bool:
        """Whether a question was asked in the last `within_s` seconds."""
        return time.monotonic() - self._last_asked < within_s

    def backlog(self) -> int:
        """Texts queued for the model or in its current pass (read without the lock: a hint)."""
        return len(self._waiting) + self._in_model

    def embed_one(self, text: str) -> np.ndarray:
        """The unit vector of one question."""
        return self.embed_many([text])[0]

    def embed_many(self, texts: list[str]) -> np.ndarray:
        """The unit vectors of several questions: those kept in the cache from it, the rest
        asked together (one batched call) and kept."""
        model = self.inner.name
        kept = {text: self.cache.get(model, text) for text in texts}
        missing = [text for text, vector in kept.items() if vector is None]
        found = {text: vector for text, vector in kept.items() if vector is not None}
        if missing:
            for text, vector in zip(missing, self._embed_now(missing), strict=True):
                self.cache.put(model, text, vector)
                found[text] = vector
        return np.stack([found[text] for text in texts]) if texts else np.zeros((0, 0))

    def _embed_now(self, texts: list[str]) -> list[np.ndarray]:
        """The model's vectors of these texts, queued for the one embedding thread."""
        self._last_asked = time.monotonic()
        questions = [_Question(text) for text in texts]
        with self._ready:
            self._waiting.extend(questions)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="psirag-query-embed",
                                                daemon=True)
                self._thread.start()
            self._ready.notify()
        for question in questions:
            question.done.wait()
            if question.error is not None:
                raise question.error
        return [q.vector for q in questions if q.vector is not None]

    def _run(self) -> None:
        while True:
            with self._ready:
                if not self._ready.wait_for(lambda: self._waiting, timeout=60.0):
                    self._thread = None
                    return
                batch = self._waiting[: self.MAX_BATCH]
                del self._waiting[: self.MAX_BATCH]
                self._in_model = len(batch)
            try:
                vectors = self.inner.embed([q.text for q in batch])
                for question, vector in zip(batch, vectors, strict=True):
                    question.vector = np.asarray(vector, dtype=np.float32)
            except BaseException as exc:  # noqa: BLE001 - every waiting caller gets the error
                for question in batch:
                    question.error = exc
            self._in_model = 0
            for question in batch:
                question.done.set()


class _Question:
    """One question waiting for its vector."""

    __slots__ = ("text", "vector", "error", "done")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: np.ndarray | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class CachedEmbedder:
    """Wraps an embedder with an on-disk cache of vectors keyed by text hash."""

    def __init__(self, inner: Embedder, cache_dir: Path) -> None:
        self.inner = inner
        self.name = inner.name
        key = getattr(inner, "cache_name", inner.name)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)[-80:]
        self._dir = Path(cache_dir).expanduser() / "embeddings" / safe
        self._keys: dict[str, int] | None = None
        self._vectors: np.ndarray | None = None
        self._mutex = threading.Lock()  # ingest pipelines may embed from several threads

    @property
    def dim(self) -> int:  # type: ignore[override]
        """Vector dimension of the inner embedder."""
        return self.inner.dim

    def count_tokens(self, text: str) -> int:
        """Delegate token counting."""
        return self.inner.count_tokens(text)

    def for_queries(self) -> Embedder:
        """Questions skip the cache (they would grow it with one-off texts)."""
        return for_queries(self.inner)

    def _open(self) -> None:
        """Load the cache files (keys.txt and vectors.npy) if present."""
        if self._keys is not None:
            return
        self._keys, self._vectors = {}, np.zeros((0, 0), dtype=np.float32)
        keys_file, vec_file = self._dir / "keys.txt", self._dir / "vectors.npy"
        try:
            keys = keys_file.read_text().split()
            vectors = np.load(vec_file)
        except (OSError, ValueError):
            return
        if len(keys) == len(vectors):
            self._keys = {k: i for i, k in enumerate(keys)}
            self._vectors = vectors

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return cached vectors, embedding and saving only texts not seen before."""
        with self._mutex:
            return self._embed(texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        """`embed` under the cache's lock."""
        self._open()
        assert self._keys is not None and self._vectors is not None
        keys = [content_hash(t) for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._keys))
        if missing:
            by_key = dict(zip(keys, texts, strict=True))
            fresh = self.inner.embed([by_key[k] for k in missing])
            base = len(self._keys)
            old = self._vectors if self._vectors.size else np.zeros((0, fresh.shape[1]), np.float32)
            self._vectors = np.concatenate([old, fresh])
            for i, k in enumerate(missing):
                self._keys[k] = base + i
            self._save()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._vectors[[self._keys[k] for k in keys]]

    def _save(self) -> None:
        """Write the cache atomically."""
        assert self._keys is not None and self._vectors is not None
        self._dir.mkdir(parents=True, exist_ok=True)
        tmp_vec, tmp_keys = self._dir / "vectors.tmp.npy", self._dir / "keys.tmp"
        np.save(tmp_vec, self._vectors)
        tmp_keys.write_text("\n".join(self._keys))
        os.replace(tmp_vec, self._dir / "vectors.npy")
        os.replace(tmp_keys, self._dir / "keys.txt")


def for_queries(embedder: Embedder) -> Embedder:
    """The embedder questions should use: a separate model instance where the embedder offers
    one, else the embedder itself."""
    make = getattr(embedder, "for_queries", None)
    return make() if make is not None else embedder


def yield_cores(embedder: Embedder, busy: Callable[[], bool]) -> None:
    """Let a model (or the model inside a cache) step down to one thread while `busy()`."""
    target = getattr(embedder, "inner", embedder)
    if hasattr(target, "yield_cores"):
        target.yield_cores = busy


def make_embedder(config: EmbeddingConfig, cache_dir: Path | None = None) -> Embedder:
    """The embedder a config asks for; ONNX exports are kept under `cache_dir`
    (default: [storage] cache_dir's default)."""
    if config.backend == "torch":
        return SentenceTransformerEmbedder(config)
    from psirag_kb.ingest.onnx import OnnxEmbedder

    return OnnxEmbedder(config, cache_dir if cache_dir is not None else StorageConfig().cache_dir)

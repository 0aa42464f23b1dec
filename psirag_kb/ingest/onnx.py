"""ONNX Runtime embedder: a sentence-transformers folder exported once to ONNX, fp32 or int8."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import shutil
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psirag_kb.config import EmbeddingConfig
from psirag_kb.errors import ConfigError
from psirag_kb.ingest.models import TokenCounter, normalise, quiet_offline, resolve_model_path

log = logging.getLogger(__name__)

_FILES = {"onnx": "model.onnx", "onnx-int8": "model_int8.onnx"}
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
_EXPORT_LOCK = threading.Lock()


def export_dir(model: str, cache_dir: Path) -> Path:
    """The cache folder of a model's ONNX files, named after the hash of its resolved path."""
    resolved = Path(resolve_model_path(model)).resolve()
    digest = hashlib.sha256(str(resolved).encode("utf-8")).hexdigest()[:16]
    label = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(model).name)[-40:]
    return Path(cache_dir).expanduser() / "onnx" / f"{label}-{digest}"


@dataclass(frozen=True)
class _Layout:
    """What the ONNX embedder needs from a sentence-transformers folder."""

    transformer: Path
    max_length: int
    pooling: str
    lower_case: bool


class OnnxEmbedder:
    """A sentence-transformers model (transformer, mean or CLS pooling) run by ONNX Runtime."""

    def __init__(self, config: EmbeddingConfig, cache_dir: Path,
                 threads: int | None = None, purpose: str = "passages") -> None:
        """`threads`: ONNX Runtime intra-op threads (None: one per core); `purpose`: what it
        embeds, for the log."""
        self.purpose = purpose
        if config.backend not in _FILES:
            raise ConfigError(f"[embedding] backend {config.backend!r} is not an ONNX backend")
        self.name = config.model
        self.cache_name = f"{config.model}@{config.backend}"
        """Key of the embedding cache: these vectors differ (slightly) from the torch model's."""
        self._config = config
        self._cache_dir = Path(cache_dir)
        self._threads = threads
        self._lock = threading.Lock()
        self._sessions: dict[int | None, Any] = {}
        self._layout: _Layout | None = None
        self._tokenizer: Any = None
        self._counter: TokenCounter | None = None
        self._file: Path | None = None
        self._dim: int | None = None
        self.yield_cores: Callable[[], bool] | None = None
        """When set and true, batches run on one thread, leaving a core to questions."""
        self.device, self.device_reason = "cpu", "ONNX Runtime runs on the CPU"

    def for_queries(self) -> OnnxEmbedder:
        """Another instance on one thread, so questions never wait for a file's batch."""
        return OnnxEmbedder(self._config, self._cache_dir, threads=1, purpose="questions")

    @property
    def dim(self) -> int:  # type: ignore[override]
        """Vector dimension (loads the model)."""
        self._load()
        assert self._dim is not None
        return self._dim

    @property
    def onnx_file(self) -> Path:
        """The ONNX file in use (exported on first use)."""
        self._load()
        assert self._file is not None
        return self._file

    def count_tokens(self, text: str) -> int:
        """Token count from the model's own tokenizer."""
        self._load()
        assert self._counter is not None
        return self._counter(text)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts in batches of `batch_size`, longest first; returns unit float32 vectors.

        With `yield_cores` set, a batch runs on one thread whenever it says questions are asked.
        """
        self._load()
        assert self._dim is not None
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        step = self._config.batch_size
        for start in range(0, len(texts), step):
            rows = order[start:start + step]
            threads = self._threads
            if threads is None and self.yield_cores is not None and self.yield_cores():
                threads = 1
            out[rows] = self._forward([texts[i] for i in rows], self._session(threads))
        return out

    def _forward(self, texts: list[str], session: Any) -> np.ndarray:
        """Unit vectors of one batch: tokenise, run the encoder, pool as the model does."""
        layout = self._layout
        assert layout is not None
        if layout.lower_case:
            texts = [t.lower() for t in texts]
        encodings = self._tokenizer.encode_batch(texts)
        arrays = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        hidden = session.run(None, {i.name: arrays[i.name] for i in session.get_inputs()})[0]
        if layout.pooling == "cls":
            return normalise(hidden[:, 0])
        mask = arrays["attention_mask"][:, :, None].astype(np.float32)
        return normalise((hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1.0))

    def _session(self, threads: int | None) -> Any:
        """The ONNX Runtime session with `threads` intra-op threads (made once per count)."""
        with self._lock:
            session = self._sessions.get(threads)
            if session is None:
                import onnxruntime as ort

                options = ort.SessionOptions()
                options.intra_op_num_threads = threads or 0
                options.inter_op_num_threads = 1
                options.log_severity_level = 3
                session = ort.InferenceSession(str(self._file), options,
                                               providers=["CPUExecutionProvider"])
                self._sessions[threads] = session
        return session

    def _load(self) -> None:
        """Read the model folder, export it unless the cache has a current copy, open it."""
        if self._dim is not None:
            return
        with _EXPORT_LOCK:
            if self._dim is not None:
                return
            path = resolve_model_path(self._config.model)
            layout = _read_layout(Path(path), self._config)
            try:
                import onnxruntime  # noqa: F401
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ConfigError(
                    f"[embedding] backend = {self._config.backend!r} needs onnxruntime and "
                    "onnx: pip install 'psirag-kb[fast]' (or set backend = \"torch\")"
                ) from exc
            self._layout = layout
            self._tokenizer = _batch_tokenizer(Tokenizer, layout)
            self._counter = TokenCounter(self._tokenizer)
            self._file = _exported(self._config.model, layout, self._cache_dir,
                                   self._config.backend)
            log.info("embedding %s with %s", self.purpose, self._file)
            probe = self._forward(["dimension probe"], self._session(self._threads))
            self._dim = int(probe.shape[1])


def _read_layout(path: Path, config: EmbeddingConfig) -> _Layout:
    """Check that a model folder is a transformer with mean or CLS pooling, and read it."""
    backend = config.backend
    fix = "or set [embedding] backend = \"torch\""
    modules_file = path / "modules.json"
    if not modules_file.is_file():
        raise ConfigError(f"[embedding] backend = {backend!r} needs a local sentence-transformers "
                          f"folder; {config.model!r} is not one: download it first, {fix}")
    modules = json.loads(modules_file.read_text(encoding="utf-8"))
    kinds = {m["type"].rsplit(".", 1)[-1]: path / m.get("path", "") for m in modules}
    if "StaticEmbedding" in kinds:
        raise ConfigError(f"{config.model!r} is a static model, fast without ONNX: set "
                          "[embedding] backend = \"torch\"")
    if "Transformer" not in kinds or "Pooling" not in kinds:
        raise ConfigError(f"[embedding] backend = {backend!r} runs transformer + pooling models; "
                          f"{config.model!r} has {', '.join(kinds)}: {fix}")
    pooling = json.loads((kinds["Pooling"] / "config.json").read_text(encoding="utf-8"))
    modes = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v is True]
    if modes not in (["pooling_mode_mean_tokens"], ["pooling_mode_cls_token"]):
        raise ConfigError(f"[embedding] backend = {backend!r} supports mean or CLS pooling, not "
                          f"{modes} of {config.model!r}: {fix}")
    folder = kinds["Transformer"]
    if not (folder / "tokenizer.json").is_file():
        raise ConfigError(f"[embedding] backend = {backend!r} needs the model's tokenizer.json "
                          f"in {folder}: {fix}")
    settings_file = folder / "sentence_bert_config.json"
    settings = json.loads(settings_file.read_text("utf-8")) if settings_file.is_file() else {}
    return _Layout(folder, int(settings.get("max_seq_length") or 512),
                   "cls" if modes == ["pooling_mode_cls_token"] else "mean",
                   bool(settings.get("do_lower_case", False)))


def _batch_tokenizer(tokenizer_class: Any, layout: _Layout) -> Any:
    """The model's fast tokenizer, truncating at its max sequence length, padding to the
    longest text of a batch (as sentence-transformers does)."""
    tokenizer = tokenizer_class.from_file(str(layout.transformer / "tokenizer.json"))
    padding = tokenizer.padding or {}
    pad_token = padding.get("pad_token", "[PAD]")
    pad_id = padding.get("pad_id", tokenizer.token_to_id(pad_token) or 0)
    tokenizer.enable_truncation(max_length=layout.max_length)
    tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)
    return tokenizer


def _exported(model: str, layout: _Layout, cache_dir: Path, backend: str) -> Path:
    """The cached ONNX file of a model for a backend, exported (and quantised) when missing or
    when the model's weights changed since."""
    path = resolve_model_path(model)
    target_dir = export_dir(model, cache_dir)
    weights = next((layout.transformer / w for w in _WEIGHTS
                    if (layout.transformer / w).is_file()), None)
    if weights is None:
        raise ConfigError(f"no model weights ({' or '.join(_WEIGHTS)}) in {layout.transformer}")
    stat = weights.stat()
    stamp = {"model": str(Path(path).resolve()), "weights": weights.name,
             "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    stamp_file = target_dir / "source.json"
    try:
        current = json.loads(stamp_file.read_text(encoding="utf-8")) == stamp
    except (OSError, ValueError):
        current = False
    if not current:
        shutil.rmtree(target_dir, ignore_errors=True)
        target_dir.mkdir(parents=True, exist_ok=True)
        stamp_file.write_text(json.dumps(stamp), encoding="utf-8")
    fp32 = target_dir / _FILES["onnx"]
    if not fp32.is_file():
        log.warning("exporting %s to ONNX in %s (once)", path, target_dir)
        quiet_offline(path)
        _export(layout.transformer, fp32)
    target = target_dir / _FILES[backend]
    if not target.is_file():
        log.warning("quantising %s to int8 (once)", fp32)
        _quantise(fp32, target)
    return target


def _export(folder: Path, target: Path) -> None:
    """Export a transformers encoder to ONNX: its last hidden state, any batch and length."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder), local_files_only=True).eval()
    names = [n for n in _INPUTS if n in inspect.signature(model.forward).parameters]

    class Encoder(torch.nn.Module):
        """The model's last hidden state from positional inputs (what the exporter traces)."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.model(**dict(zip(names, inputs, strict=True))).last_hidden_state

    sample = tuple(torch.zeros((2, 8), dtype=torch.long) if n == "token_type_ids"
                   else torch.ones((2, 8), dtype=torch.long) for n in names)
    axes = {n: {0: "batch", 1: "tokens"} for n in (*names, "last_hidden_state")}
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Encoder(), sample, str(partial), input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    os.replace(partial, target)


def _quantise(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of the matrix products, per channel (mean cosine to fp32
    0.994 on MiniLM; all operators per tensor gave 0.95)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ConfigError("[embedding] backend = \"onnx-int8\" needs the onnx package: "
                          "pip install 'psirag-kb[fast]'") from exc
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    root = logging.getLogger()
    hush = logging.Filter("psirag_kb")  # passes only psirag_kb records: quantize_dynamic nags
    root.addFilter(hush)
    try:
        quantize_dynamic(source, partial, weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])
    finally:
        root.removeFilter(hush)
    os.replace(partial, target)

"""A static embedding model distilled offline from a local sentence-transformers model."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from psirag_kb.config import DEFAULT_MODEL
from psirag_kb.errors import ConfigError, KBError
from psirag_kb.ingest.models import quiet_offline, resolve_model_path

log = logging.getLogger(__name__)


def distill_static(out_dir: Path, source: str = DEFAULT_MODEL,
                   pca_dims: int | None = 256) -> dict[str, Any]:
    """Write a static model distilled from `source` into `out_dir`, a folder that
    `SentenceTransformer(out_dir)` (and so `[embedding] model`) loads; returns what was made.

    model2vec embeds every token of the source's vocabulary once, reduces the vectors to
    `pca_dims` dimensions (None: keep them all) and weights them by token frequency; the result
    embeds a text as the mean of its tokens' vectors. Nothing is downloaded.
    """
    out_dir = Path(out_dir).expanduser().absolute()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise KBError(f"{out_dir} already exists; remove it or choose another folder")
    path = resolve_model_path(source)
    if not (Path(path) / "modules.json").is_file():
        raise ConfigError(f"distillation needs a local sentence-transformers folder; {source!r} "
                          "is not one")
    if pca_dims is not None and pca_dims < 1:
        raise KBError(f"--pca-dims must be positive, not {pca_dims}")
    quiet_offline(path)
    try:
        from model2vec.distill import distill
    except ImportError as exc:
        raise KBError(f"distillation needs model2vec ({exc}): pip install 'psirag-kb[fast]'"
                      ) from exc
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers.models import StaticEmbedding  # type: ignore[no-redef]

    started = time.perf_counter()
    static = distill(path, pca_dims=pca_dims, device="cpu", quantize_to="float32")
    seconds = time.perf_counter() - started
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".distill-", dir=out_dir.parent) as tmp:
        static.save_pretrained(str(Path(tmp) / "model2vec"))
        module = StaticEmbedding.from_model2vec(str(Path(tmp) / "model2vec"))
        module.base_model = source
        folder = Path(tmp) / "model"
        SentenceTransformer(modules=[module], device="cpu").save(str(folder))
        if out_dir.exists():
            out_dir.rmdir()
        os.replace(folder, out_dir)
    rows, dim = static.embedding.shape
    log.info("distilled %s into %s: %d tokens x %d dimensions", source, out_dir, rows, dim)
    return {"path": str(out_dir), "source": source, "tokens": int(rows), "dim": int(dim),
            "distill_s": round(seconds, 1)}

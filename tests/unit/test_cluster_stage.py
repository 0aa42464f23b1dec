"""A cluster ingest's pieces that need no cluster: [compute] settings, the address, a worker
that cannot see a file, and an unreachable cluster leaving the ingest to this machine."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import pytest

from psirag_kb.config import Config, parse_config
from psirag_kb.errors import ConfigError, KBError
from psirag_kb.ingest import cluster as cluster_module
from psirag_kb.ingest.cluster import ClusterGone, probe, resolve_address
from psirag_kb.ingest.clusterpipe import ClusterStage
from psirag_kb.ingest.raywork import Outcome
from psirag_kb.ingest.report import IngestReport
from psirag_kb.kb import KnowledgeBase


def closed_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_compute_settings_are_read_and_unknown_ones_refused(tmp_path: Path) -> None:
    config = parse_config({"compute": {"ray_address": "auto"}}, tmp_path)
    assert config.compute.ray_address == "auto"
    assert Config().compute.ray_address == ""
    with pytest.raises(ConfigError, match=r"unknown setting \[compute\] workers"):
        parse_config({"compute": {"workers": 4}}, tmp_path)


def test_an_unanswered_address_is_refused_quickly(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    with pytest.raises(ClusterGone, match="no Ray cluster answers"):
        probe(f"127.0.0.1:{closed_port()}", timeout_s=2.0)
    with pytest.raises(ClusterGone, match="HOST:PORT"):
        probe("somewhere")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(cluster_module, "CURRENT_CLUSTER", tmp_path / "none")
    with pytest.raises(ClusterGone, match="ray start --head"):
        resolve_address("auto")
    (tmp_path / "none").write_text("10.0.0.5:6379\n")
    assert resolve_address("auto") == "10.0.0.5:6379"
    assert resolve_address("10.0.0.9:6379") == "10.0.0.9:6379"


@pytest.mark.integration  # a KnowledgeBase
def test_a_file_a_worker_cannot_see_is_refused_not_removed(tmp_path: Path,
                                                           fake_embedder: Any) -> None:
    here = tmp_path / "docs" / "a.md"
    here.parent.mkdir()
    here.write_text("A note the worker's node has no mount for.\n")
    gone = tmp_path / "docs" / "gone.md"
    config = Config().with_data_dir(tmp_path / "data")
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        stage = ClusterStage(kb.ingestion, keep_vanished=False, max_chunks=256)
        outcome = Outcome([], [], [str(gone)], IngestReport(), "10.0.0.7", 1)
        prepared, left = stage.receive([gone], {}, outcome)  # gone here too: nothing to do
        assert prepared.paths == [gone] and prepared.changes == [] and left == []
        outcome = Outcome([], [], [str(here), str(gone)], IngestReport(), "10.0.0.7", 1)
        with pytest.raises(KBError, match=r"worker on 10\.0\.0\.7 cannot see .*a\.md.*shared"):
            stage.receive([here, gone], {}, outcome)


@pytest.mark.integration  # a KnowledgeBase
def test_an_unreachable_cluster_leaves_the_ingest_here(tmp_path: Path, fake_embedder: Any,
                                                       caplog: pytest.LogCaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module.importlib.util, "find_spec", lambda name: object())
    docs = tmp_path / "docs"
    docs.mkdir()
    for number in range(3):
        (docs / f"n{number}.md").write_text(f"Note {number} about a heron by the river.\n")
    config = (Config().with_data_dir(tmp_path / "data")
              .replace("embedding", model=fake_embedder.name)
              .replace("compute", ray_address=f"127.0.0.1:{closed_port()}"))
    with KnowledgeBase(config, embedder=fake_embedder) as kb, caplog.at_level(logging.WARNING):
        report = kb.ingest([docs])
        assert report.added == 3 and kb.stores.store.chunk_count() == 3
    assert any("no Ray cluster answers" in r.getMessage() and "this machine" in r.getMessage()
               for r in caplog.records)


@pytest.mark.integration  # a KnowledgeBase
def test_ray_address_without_ray_installed_is_a_config_error(
        tmp_path: Path, fake_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module.importlib.util, "find_spec", lambda name: None)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("A note.\n")
    config = (Config().with_data_dir(tmp_path / "data")
              .replace("compute", ray_address="auto"))
    with KnowledgeBase(config, embedder=fake_embedder) as kb:
        with pytest.raises(ConfigError, match=r"psirag-kb\[ray\]"):
            kb.ingest([docs])

"""A chunk's path up the tree: KnowledgeBase.path_of, LocalClient and the daemon's /api/path."""

from __future__ import annotations

from pathlib import Path

import pytest

from psirag_kb.config import Config
from psirag_kb.errors import NodeNotFound
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.client import HTTPClient, LocalClient
from psirag_kb.service.daemon import Daemon

ANIMALS = ["Meerkats stand guard.", "Otters hold hands.", "Bats echolocate at night.",
           "Moles dig tunnels.", "Owls hunt mice.", "Ravens solve puzzles."]


def write_docs(folder: Path) -> None:
    folder.mkdir()
    for n, text in enumerate(ANIMALS):
        (folder / f"{n}.md").write_text(text + "\n")


def test_path_of_is_root_first_and_matches_the_tree(config: Config, tmp_path: Path,
                                                    fake_embedder) -> None:
    write_docs(tmp_path / "docs")
    with LocalClient(KnowledgeBase(config, fake_embedder)) as client:
        client.reindex(tmp_path / "docs")
        hit = client.query("otters", mode="sparse", k=1)["results"][0]
        path = client.path(hit["chunk_id"])
        root = client.node()
        assert path[0]["id"] == root["id"] and path[0]["abstract"] == root["abstract"]
        assert [p["layer"] for p in path] == sorted((p["layer"] for p in path), reverse=True)
        parent = client.node(path[-1]["id"])
        assert any(c["kind"] == "leaf" and c["id"] == hit["chunk_id"] for c in parent["children"])
        for upper, lower in zip(path, path[1:], strict=False):
            assert client.node(lower["id"])["parent"] == upper["id"]
        with pytest.raises(NodeNotFound):
            client.path(987654)


def test_path_over_the_daemon_api(config: Config, tmp_path: Path, fake_embedder) -> None:
    docs = tmp_path / "docs"
    write_docs(docs)
    config = config.replace("api", port=0)
    daemon = Daemon(config, embedder=fake_embedder)
    daemon.start()
    try:
        daemon.kb.ingest([docs])
        client = HTTPClient(daemon.api.url, daemon.api.token)
        chunk = client.query("owls", mode="sparse", k=1)["results"][0]["chunk_id"]
        assert client.path(chunk) == daemon.kb.path_of(chunk)
        with pytest.raises(NodeNotFound):
            client.path(987654)
        with pytest.raises(NodeNotFound):
            client._call("GET", "/api/path/abc")
    finally:
        daemon.stop()


def test_a_one_chunk_tree_is_browsable(config: Config, tmp_path: Path, fake_embedder) -> None:
    (tmp_path / "only.md").write_text("A lone heron waits by the pond.\n")
    with LocalClient(KnowledgeBase(config, fake_embedder)) as client:
        client.reindex(tmp_path / "only.md")
        root = client.node()
        [child] = root["children"]
        assert child["kind"] == "leaf" and "heron" in child["abstract"]
        assert root["leaves"] == 1 and child["source"] == str(tmp_path / "only.md")
        above = [node["id"] for node in client.path(child["id"])]  # the root, when it is a node
        assert above == ([root["id"]] if root["id"] else [])

"""Ingest on a Ray cluster of its own (loopback, its own temp dir and ports): the same chunks,
texts, locations, headers, vectors and tree as a local ingest; a worker killed mid-batch costs a
retry; a cluster that goes away mid-ingest leaves the rest to this machine."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from daemon_helpers import api, wait_for  # noqa: E402
from ray_helpers import LocalRay  # noqa: E402

import psirag_kb.ingest.compute as compute_module  # noqa: E402
import psirag_kb.ingest.ingestion as ingestion  # noqa: E402
from psirag_kb.config import Config  # noqa: E402
from psirag_kb.ingest.cluster import Cluster  # noqa: E402
from psirag_kb.kb import KnowledgeBase  # noqa: E402
from psirag_kb.service.daemon import Daemon  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WORDS = ("river castle engine violin glacier pepper orbit harbour lantern meadow copper falcon "
         "quarry saddle tundra velvet walnut yeast zephyr anchor bramble cinder dune ember "
         "forest granite hollow island jasmine kettle lemon marble nectar olive pebble").split()


def prose(rng: np.random.Generator, sentences: int) -> str:
    """Sentences of plain words, about 12 tokens each."""
    return " ".join(" ".join(rng.choice(WORDS, 11)).capitalize() + "." for _ in range(sentences))


@pytest.fixture(scope="module")
def head() -> Any:
    """A two-CPU Ray head on loopback for this module, stopped by its own processes."""
    cluster = LocalRay(cpus=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def make_docs(root: Path, files: int = 8, big: int = 0) -> Path:
    """Markdown with headings, plain text, a PDF, a Word file and a slide deck; `big` adds one
    long file (many chunks) first."""
    docs = root / "docs"
    (docs / "notes").mkdir(parents=True)
    rng = np.random.default_rng(7)
    if big:
        (docs / "aaa-long.md").write_text(f"# Long notes\n\n{prose(rng, big)}\n")
    for number in range(files):
        (docs / "notes" / f"n{number:02d}.md").write_text(
            f"# Topic {number}\n\n{prose(rng, 4)}\n\n## Details\n\n{prose(rng, 9)}\n")
    (docs / "plain.txt").write_text(prose(rng, 20) + "\n")
    shutil.copy(FIXTURES / "sample.pdf", docs / "sample.pdf")
    for name in ("testWORD.docx", "testPPT.pptx"):
        shutil.copy(FIXTURES / "docs" / name, docs / name)
    return docs


def snapshot(kb: KnowledgeBase) -> dict[str, Any]:
    """Everything an ingest decides: chunks (by id) with text, place, location, header and
    vector; the files; the tree's nodes and leaves; the abstracts."""
    db = kb.stores.store.reader()
    chunks = db.execute(
        "SELECT c.id, f.path, c.ordinal, c.start_char, c.end_char, c.line_first, c.line_last,"
        " c.text, c.hash, c.location, c.context FROM chunks c JOIN files f ON c.file_id = f.id"
        " ORDER BY c.id").fetchall()
    vectors = kb.stores.store.vectors(np.array([row[0] for row in chunks]))
    files = db.execute("SELECT path, hash, state, reason, chunks FROM files ORDER BY path"
                       ).fetchall()
    nodes = db.execute("SELECT id, parent, layer, ord, abstract FROM nodes ORDER BY id"
                       ).fetchall()
    leaves = db.execute("SELECT chunk_id, parent, ord FROM leaves ORDER BY chunk_id").fetchall()
    return {"chunks": chunks, "vectors": vectors, "files": files, "nodes": nodes,
            "leaves": leaves}


def ingest(tmp_path: Path, name: str, docs: Path, minilm: Any, address: str = "",
           edit: Path | None = None) -> dict[str, Any]:
    """Ingest `docs` into a fresh data directory (on the cluster at `address`, if given);
    with `edit`, that file then gets a new closing paragraph and the folder is ingested again
    (its unchanged chunks kept), and the file is put back as it was."""
    config = Config().with_data_dir(tmp_path / name).replace("compute", ray_address=address)
    with KnowledgeBase(config, embedder=minilm) as kb:
        report = kb.ingest([docs])
        if edit is not None:
            original = edit.read_text()
            edit.write_text(original + "\nA closing paragraph about herons by the river.\n")
            try:
                again = kb.ingest([docs])
            finally:
                edit.write_text(original)
            assert again.updated == 1 and again.chunks_kept >= 1 and again.chunks_embedded
            report.chunks_kept, report.updated = again.chunks_kept, again.updated
        kb.regenerate_abstracts(offline=True)
        result = snapshot(kb)
        result["compute"] = kb.status()["compute"]
    result["report"] = report
    return result


def assert_same(local: dict[str, Any], remote: dict[str, Any]) -> None:
    """Equal chunks, files and tree; vectors equal within float tolerance."""
    assert remote["chunks"] == local["chunks"]
    assert remote["files"] == local["files"]
    np.testing.assert_allclose(remote["vectors"], local["vectors"], atol=2e-5)
    assert remote["leaves"] == local["leaves"]
    assert remote["nodes"] == local["nodes"]
    assert remote["report"].chunks_embedded == local["report"].chunks_embedded
    assert remote["report"].added == local["report"].added
    assert remote["report"].chunks_kept == local["report"].chunks_kept


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 3 files and 4 chunks, so several go out at once and the chunk budget
    leaves files for a following batch."""
    monkeypatch.setattr(ingestion, "BATCH_FILES", 3)
    monkeypatch.setattr(ingestion, "BATCH_CHUNKS", 4)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time a process used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_cluster_ingest_equals_a_local_one_with_a_worker_killed_mid_batch(
        tmp_path: Path, head: LocalRay, minilm: Any, small_batches: None,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Batches go out several at a time and come back in any order; the first (one long
    file) loses its worker half-way, runs again on a restarted one, and nothing is lost or
    doubled; an edited file's ingest on the cluster keeps its unchanged chunks, as here."""
    docs = make_docs(tmp_path, files=8, big=400)
    killed: list[int] = []
    outcomes: list[Any] = []
    real = Cluster.outcome

    def kill_first(self: Cluster, seq: int, check_stop: Any) -> Any:
        if not killed:  # the first batch went to the first actor: kill it while it embeds
            pid = self.nodes[0][1]
            start = _cpu_seconds(pid)
            deadline = time.monotonic() + 60
            while _cpu_seconds(pid) - start < 0.5 and time.monotonic() < deadline:
                time.sleep(0.02)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        outcome = real(self, seq, check_stop)
        outcomes.append(outcome)
        return outcome

    monkeypatch.setattr(Cluster, "outcome", kill_first)
    edit = docs / "notes" / "n03.md"  # then edited and ingested again: kept chunks too
    local = ingest(tmp_path, "local", docs, minilm, edit=edit)
    with caplog.at_level(logging.WARNING):
        remote = ingest(tmp_path, "ray", docs, minilm, head.address, edit=edit)
    assert killed and outcomes[0].pid not in (killed[0], os.getpid())  # run again elsewhere
    assert outcomes[0].changes[0].path.endswith("aaa-long.md")
    assert len(outcomes) >= 5 and all(outcome.pid != os.getpid() for outcome in outcomes)
    assert not [r for r in caplog.records if "goes on locally" in r.getMessage()]
    assert remote["compute"]["state"] == "connected" and remote["compute"]["workers"] == 2
    assert local["compute"]["state"] == "local"
    assert len(local["chunks"]) > 40
    assert_same(local, remote)


@pytest.mark.long  # make test's 15 minutes; an unreachable cluster stays in the test below
def test_a_cluster_gone_mid_ingest_leaves_the_rest_to_this_machine(
        tmp_path: Path, minilm: Any, small_batches: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A daemon watching the folder scans it on the cluster; the cluster is killed after the
    first outcome: the rest is ingested here with one warning, the result is a local ingest's,
    and the daemon goes on (a burst that follows is indexed here, its API answers)."""
    docs = make_docs(tmp_path, files=10)
    doomed = LocalRay(cpus=1).start()
    outcomes: list[Any] = []
    real = Cluster.outcome

    def kill_after_first(self: Cluster, seq: int, check_stop: Any) -> Any:
        if outcomes:
            doomed.kill()
        outcome = real(self, seq, check_stop)
        outcomes.append(outcome)
        return outcome

    monkeypatch.setattr(Cluster, "outcome", kill_after_first)
    config = (Config().with_data_dir(tmp_path / "ray")
              .replace("compute", ray_address=doomed.address)
              .replace("watch", folders=[str(docs)], quiet_period_s=0.2)
              .replace("api", port=0).replace("web", enabled=False))
    try:
        local = ingest(tmp_path, "local", docs, minilm)
        with caplog.at_level(logging.WARNING):
            daemon = Daemon(config, embedder=minilm)
            daemon.start()
            try:
                kb = daemon.kb
                wait_for(lambda: kb.stores.store.chunk_count() == len(local["chunks"])
                         and kb.ingestion.running == 0, timeout=300)
                remote = snapshot(kb)
                compute = kb.status()["compute"]
                burst = docs / "burst"
                burst.mkdir()
                for number in range(10):
                    (burst / f"b{number}.md").write_text(f"Burst note {number} on kestrels.\n")
                wait_for(lambda: len(kb.stores.store.files(str(burst))) == 10
                         and kb.ingestion.running == 0, timeout=300)
                code, health = api(daemon, "GET", "/api/health")
                assert code == 200 and health["ok"] is True
                assert daemon.watcher._thread.is_alive()
            finally:
                daemon.stop()
    finally:
        doomed.stop()
    warnings = [r.getMessage() for r in caplog.records if "goes on locally" in r.getMessage()]
    assert len(warnings) == 1  # and this process (the daemon's) lives on: Ray is in a child
    assert 1 <= sum(len(o.taken) for o in outcomes) < len(local["files"])  # the rest: here
    assert compute["state"] == "gone"
    assert remote["chunks"] == local["chunks"] and remote["files"] == local["files"]
    np.testing.assert_allclose(remote["vectors"], local["vectors"], atol=2e-5)


def test_ingest_ray_says_where_the_work_ran(tmp_path: Path, head: LocalRay, capsys,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`ingest --ray` names the cluster's address, its workers and the rate, in its output
    and in --json; without a cluster to reach, it says the work ran here and why."""
    from psirag_kb.cli import main

    docs = make_docs(tmp_path, files=6)
    data = ["--data-dir", str(tmp_path / "data")]
    assert main([*data, "ingest", str(docs), "--ray", head.address, "--json"]) == 0
    compute = json.loads(capsys.readouterr().out)["compute"]
    assert compute["where"] == "ray" and compute["ray_address"] == head.address
    assert compute["workers"] == 2 and compute["nodes"] and compute["finished_on_ray"]
    assert compute["files"] == 10 and compute["chunks"] > 0 and compute["chunks_per_s"] > 0
    (docs / "notes" / "n00.md").write_text("# Topic zero\n\nRewritten about herons.\n")
    (docs / "notes" / "n01.md").write_text("# Topic one\n\nRewritten about pikes.\n")
    assert main([*data, "ingest", str(docs), "--ray", head.address]) == 0
    printed = capsys.readouterr().out
    assert f"ran on Ray at {head.address}: 2 worker(s) on " in printed, printed
    assert "chunks/s" in printed
    monkeypatch.setattr(compute_module, "CLUSTER_RETRY_S", 0.0)
    gone = "127.0.0.1:9"  # nothing listens there
    (docs / "notes" / "n02.md").write_text("# Topic two\n\nRewritten about terns.\n")
    assert main([*data, "ingest", str(docs), "--ray", gone, "--json"]) == 0
    compute = json.loads(capsys.readouterr().out)["compute"]
    assert compute["where"] == "local" and compute["ray_address"] == gone
    assert "could not be reached" in compute["reason"]

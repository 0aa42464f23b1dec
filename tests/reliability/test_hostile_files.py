"""Readers survive hostile files: a seeded corpus of fixtures truncated,
bit-flipped, with zip members swapped, cut, renamed or dropped, XML nested deep or with huge
attributes, invalid UTF-8 and JSON nested deep, each read by the real readers in a worker
process under a memory limit (RLIMIT_AS) and a time limit per file, must end as indexed,
skipped or failed with a reason; and a batch of them leaves the stores answering as before.

Real KnowledgeBase, DuckDB, Tantivy, hnswlib and MiniLM for the stores; see tests/hostile.py
(the generator), tests/hostile_worker.py and tests/hostile_run.py (the limits). A long run:
`pytest -m long tests/reliability/test_hostile_files.py`.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from hostile import SEED, cases, write_cases
from hostile_run import CLEAN, findings, run

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase

ROOT = Path(__file__).resolve().parents[2]
MAKE_TEST_CASES = 300
LONG_CASES = 3000
BATCH = 30
"""Hostile files ingested beside good ones into a real knowledge base."""


def _run_clean(folder: Path, count: int, start: int = 0) -> Counter:
    made = write_cases(folder, count, start=start)
    results = run([folder / case.name for case in made])
    assert len(results) == count
    assert findings(results) == {}
    return Counter(r["outcome"] for r in results.values())


def test_the_generator_gives_the_same_files_for_the_same_seed() -> None:
    first, again = list(cases(20)), list(cases(5, start=15))
    assert [c.data for c in first[15:]] == [c.data for c in again]
    assert [c.data for c in cases(5, seed=SEED + 1)] != [c.data for c in first[:5]]
    assert len({c.mutation for c in first}) > 4


def test_the_corpus_runs_clean(tmp_path: Path) -> None:
    """Every case ends as indexed, skipped or failed with a reason within the limits."""
    outcomes = _run_clean(tmp_path, MAKE_TEST_CASES)
    assert outcomes["indexed"] and outcomes["skipped"]  # mutations that keep and lose a file


@pytest.mark.long
def test_the_long_corpus_runs_clean(tmp_path: Path) -> None:
    """The cases after those of `make test`, ten times as many."""
    _run_clean(tmp_path, LONG_CASES, start=MAKE_TEST_CASES)


def test_the_runner_reports_a_hang_and_a_crash(tmp_path: Path) -> None:
    """The limits are real: a file slower than the time limit is a hang, a worker that cannot
    live within its memory is a crash, and the files after them still run."""
    made = write_cases(tmp_path, 3)
    paths = [tmp_path / case.name for case in made]
    hung = run(paths[:1], time_limit=0.0)
    assert hung[str(paths[0])]["outcome"] == "hang"
    starved = run(paths, memory=20 << 20)  # the interpreter cannot even start
    assert {r["outcome"] for r in starved.values()} == {"crash"}
    assert len(findings(starved)) == 3
    assert all(r["outcome"] in CLEAN for r in run(paths).values())


def _sentences() -> dict[str, str]:
    """A sentence of each good file, the file's name."""
    return {
        "Licensed under the Apache License, Version 2.0": "Apache-2.0.txt",
        "macros in this section are used for managing reference counts":
            "c-api-reference-counting.html",
        "Import types and functions implemented in C": "tracemalloc.py",
    }


def test_a_batch_of_hostile_files_leaves_the_stores_answering_the_same(
        tmp_path: Path, minilm) -> None:
    good = tmp_path / "docs" / "good"
    good.mkdir(parents=True)
    for name in ("Apache-2.0.txt", "c-api-reference-counting.html", "tracemalloc.py"):
        shutil.copy(next((ROOT / "examples" / "docs").rglob(name)), good / name)
    shutil.copy(ROOT / "tests" / "fixtures" / "docs" / "testWORD.docx", good / "word.docx")
    config = Config().with_data_dir(tmp_path / "data")
    queries = list(_sentences())
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([tmp_path / "docs"])
        before_files = {r.path: (r.hash, r.state, r.chunks) for r in kb.stores.store.files()}
        before_chunks = {r.path: kb.stores.store.chunk_hashes(r.id)
                         for r in kb.stores.store.files()}
        before = {(q, mode): [h["source"] for h in kb.query(q, mode=mode, k=3)["results"]]
                  for q in queries for mode in ("sparse", "dense", "hybrid")}
        assert all(Path(before[(q, "sparse")][0]).name == name
                   for q, name in _sentences().items())
        word_query = kb.query("word.docx " + _docx_words(kb, good / "word.docx"), mode="sparse")
        assert Path(word_query["results"][0]["source"]).name == "word.docx"
        # a batch of hostile files beside them, and the good .docx replaced by a cut copy
        hostile = tmp_path / "docs" / "hostile"
        write_cases(hostile, BATCH * 2, start=7000)
        for path in sorted(hostile.iterdir(), key=lambda p: p.stat().st_size)[BATCH:]:
            path.unlink()  # the largest half: megabytes of text to embed (the corpus reads them)
        data = (good / "word.docx").read_bytes()
        (good / "word.docx").write_bytes(data[: len(data) // 2])
        os.utime(good / "word.docx", (1.7e9, 1.7e9))
        kb.ingest([tmp_path / "docs"])
        files = {r.path: r for r in kb.stores.store.files()}
        states = Counter(r.state for p, r in files.items() if "/hostile/" in p)
        assert sum(states.values()) == BATCH and set(states) <= {"indexed", "skipped", "failed"}
        assert all(r.reason for p, r in files.items() if "/hostile/" in p
                   and r.state != "indexed")
        cut = files[str(good / "word.docx")]
        assert cut.state == "failed" and "previous version stays indexed" in cut.reason
        for path, (digest, state, chunks) in before_files.items():
            if path != str(good / "word.docx"):
                assert (files[path].hash, files[path].state, files[path].chunks) == (
                    digest, state, chunks)
            assert kb.stores.store.chunk_hashes(files[path].id) == before_chunks[path]
        for q, name in _sentences().items():
            assert Path(kb.query(q, mode="sparse", k=1)["results"][0]["source"]).name == name
            assert before[(q, "dense")][0] == kb.query(q, mode="dense", k=3)[
                "results"][0]["source"]
        again = kb.query("word.docx " + _docx_words(kb, good / "word.docx"), mode="sparse")
        assert Path(again["results"][0]["source"]).name == "word.docx"
        count = kb.stores.store.chunk_count()
        assert kb.stores.sparse.count() == count and kb.stores.dense.count == count


def _docx_words(kb: KnowledgeBase, path: Path) -> str:
    """The first words of the file's first chunk, as indexed."""
    record = kb.stores.store.file(str(path))
    chunk_id = kb.stores.store.chunk_hashes(record.id)[0][0]
    return " ".join(kb.chunk(chunk_id)["text"].split()[:8])

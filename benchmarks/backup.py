"""Backup and restore cost: N generated chunks ingested, then backed up idle and during writes,
the way `backup` did it before (hnswlib saved on the writer) and now side by side, restored, and
the restored copy opened.

    .venv/bin/python benchmarks/backup.py --n 10000 100000 --data $D/*/corpus.jsonl \
        --model /tmp/models/minilm-static --work /tmp/psirag-backup

Per N, in `WORK/nN/` (docs generated as `benchmarks/scale.py` does: 50-chunk Markdown files of
recombined corpus sentences, a code word per chunk):
1. Ingest in this process (`KnowledgeBase.ingest`), unless `--keep` finds a data directory.
2. `--pairs` (2) pairs of idle backups, each after five single-file commits (so hnswlib's memory
   is ahead of its file), before then now: wall time, how long the writer was held (the time writes
   wait), of it DuckDB's CHECKPOINT and copy, bytes and files by part.
3. As many pairs of backups while a thread ingests 5-chunk files one after another (before,
   now, ...): the writer's hold and the ingests that committed during it; on the writer at the last
   one's copy, the top 10 of ten queries (dense and hybrid) are recorded.
4. With `--methods`, DuckDB's own copy methods on the writer, side by side.
5. `restore` of the last backup into a new data directory (hashes checked, files copied), then
   the restored knowledge base opened (the log names what was rebuilt or caught up) and the ten
   queries asked again.

Prints progress on stderr and one JSON object on stdout (also WORK/backup.json).
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from scale import Generator, Layout, load_sentences, token_counter, write_docs  # noqa: E402

from psirag_kb.config import Config  # noqa: E402
from psirag_kb.kb import KnowledgeBase  # noqa: E402
from psirag_kb.storage.backup import (  # noqa: E402
    Later,
    copy_stores,
    copy_tantivy,
    restore,
    take_backup,
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def parts(folder: Path) -> dict[str, int]:
    """Bytes of a backup by part."""
    return {"duckdb": sum(size(p) for p in folder.glob("kb.duckdb*")),
            "bm25": size(folder / "bm25"), "dense": size(folder / "dense"),
            "total": size(folder)}


def duckdb_methods(kb: KnowledgeBase, work: Path) -> dict[str, Any]:
    """Each DuckDB copy method on the writer thread (nothing commits meanwhile): seconds and
    bytes."""
    out: dict[str, Any] = {}

    def checkpoint_copy(target: Path) -> None:
        kb.stores.store.db.execute("CHECKPOINT")
        shutil.copyfile(kb.stores.store.path, target / "kb.duckdb")

    def copy_from_database(target: Path) -> None:
        db = kb.stores.store.db
        db.execute(f"ATTACH '{target / 'kb.duckdb'}' AS copied")
        try:
            db.execute("COPY FROM DATABASE kb TO copied")
        finally:
            db.execute("DETACH copied")

    def export_database(target: Path) -> None:
        kb.stores.store.db.execute(f"EXPORT DATABASE '{target / 'export'}' (FORMAT parquet)")

    for name, method in (("checkpoint + file copy", checkpoint_copy),
                         ("ATTACH + COPY FROM DATABASE", copy_from_database),
                         ("EXPORT DATABASE (parquet)", export_database)):
        target = work / f"method-{name.split()[0].lower()}"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)

        def run(method: Any = method, target: Path = target) -> float:
            started = time.perf_counter()
            method(target)
            return time.perf_counter() - started

        try:
            seconds = kb.stores.writer.call(run)
            out[name] = {"seconds": round(seconds, 3), "bytes": size(target)}
        except Exception as exc:  # noqa: BLE001 - reported, the others go on
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        shutil.rmtree(target, ignore_errors=True)
        log(f"  duckdb {name}: {out[name]}")
    tantivy = work / "method-tantivy"
    started = time.perf_counter()
    kb.stores.writer.call(lambda: copy_tantivy(kb.stores.sparse.folder, tantivy))
    out["tantivy copy"] = {"seconds": round(time.perf_counter() - started, 3),
                           "bytes": size(tantivy)}
    shutil.rmtree(tantivy, ignore_errors=True)
    return out


def saved_on_writer(kb: KnowledgeBase, dest: Path) -> dict[str, Any]:
    """A backup as `backup` took it before it left hnswlib's index as last saved: the index
    saved on the writer first whenever memory was ahead of its file (for the side-by-side
    comparison)."""
    def copy(folder: Path, later: Later) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            dense, generation = kb.stores.dense, kb.stores.store.generation
            started = time.perf_counter()
            if dense.memory_generation == generation and dense.generation != generation:
                dense.save(generation)
            saved_s = time.perf_counter() - started
            copied = copy_stores(kb.stores, folder, later)
            return copied | {"writer_held_s": round(copied["writer_held_s"] + saved_s, 3),
                             "dense_save_s": round(saved_s, 3)}
        return kb.stores.writer.call(run)

    return take_backup(kb.data_dir, dest, copy)


def small_file(folder: Path, number: int) -> Path:
    """A new 5-chunk Markdown file."""
    path = folder / f"w{number:05d}.md"
    path.write_text("\n\n".join(f"## Added {number} part {p}\n\nA short added note number "
                                 f"{number}, part {p}, about backups." for p in range(5)) + "\n")
    return path


def edits(kb: KnowledgeBase, docs: Path, count: int) -> None:
    """Commit `count` small files one by one (hnswlib's memory goes ahead of its file)."""
    extra = docs / "during"
    extra.mkdir(exist_ok=True)
    start = len(list(extra.iterdir()))
    for number in range(start, start + count):
        kb.ingest([small_file(extra, number)])


def during_writes(kb: KnowledgeBase, docs: Path, dest: Path, old: bool = False,
                  then: Any = None) -> dict[str, Any]:
    """A backup while a thread writes and ingests small files back to back (`old`: hnswlib
    saved on the writer, as before; else as `backup` does it now)."""
    stop = threading.Event()
    commits: list[float] = []
    extra = docs / "during"
    extra.mkdir(exist_ok=True)

    def writes() -> None:
        number = len(list(extra.iterdir()))
        while not stop.is_set():
            kb.ingest([small_file(extra, number)])
            commits.append(time.perf_counter())
            number += 1

    thread = threading.Thread(target=writes)
    thread.start()
    time.sleep(3.0)  # writes under way
    started = time.perf_counter()
    manifest = saved_on_writer(kb, dest) if old else kb.backup(dest, then=then)
    ended = time.perf_counter()
    time.sleep(1.0)
    stop.set()
    thread.join()
    during = [t for t in commits if started <= t <= ended]
    gaps = [b - a for a, b in zip(commits, commits[1:], strict=False)]
    return {"dense_saved_on_writer": old, "seconds": manifest["seconds"],
            "writer_held_s": manifest["writer_held_s"], "duckdb_s": manifest["duckdb_s"],
            "dense_generation": manifest["dense_generation"],
            "bytes": manifest["bytes"], "generation": manifest["generation"],
            "ingests_before": len([t for t in commits if t < started]),
            "ingests_committed_during_backup": len(during),
            "longest_gap_between_ingests_s": round(max(gaps), 3) if gaps else None,
            "median_gap_between_ingests_s": round(sorted(gaps)[len(gaps) // 2], 3)
            if gaps else None}


QUERIES = ("the history of the river valley", "a famous football club", "music of the 1970s",
           "which film won an award", "the capital city and its university",
           "a species of flowering plant", "the war and the treaty that ended it",
           "an American politician", "a railway station opened", "the population census")


def answers(kb: KnowledgeBase) -> dict[str, list[int]]:
    """The top 10 chunk ids of each query, dense and hybrid."""
    return {f"{mode}: {q}": [r["chunk_id"] for r in kb.query(q, mode=mode, k=10)["results"]]
            for q in QUERIES for mode in ("dense", "hybrid")}


def idle(kb: KnowledgeBase, docs: Path, dest: Path, old: bool) -> dict[str, Any]:
    """Five single-file commits, then a backup with nothing else writing."""
    edits(kb, docs, 5)
    shutil.rmtree(dest, ignore_errors=True)
    behind = kb.stores.dense.unsaved
    manifest = saved_on_writer(kb, dest) if old else kb.backup(dest)
    out = {"dense_saved_on_writer": old, "seconds": manifest["seconds"],
           "writer_held_s": manifest["writer_held_s"], "duckdb_s": manifest["duckdb_s"],
           "dense_save_s": manifest.get("dense_save_s", 0.0),
           "dense_vectors_behind": behind, "bytes": manifest["bytes"],
           "files": len(manifest["files"]), "parts": parts(dest)}
    shutil.rmtree(dest, ignore_errors=True)
    return out


def one(n: int, args: argparse.Namespace, generator: Generator) -> dict[str, Any]:
    folder = args.work / f"n{n}"
    docs, data = folder / "docs", folder / "data"
    if not args.keep and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    layout = Layout(n, 50, 20)
    write_docs(generator, layout, docs)
    config = Config().with_data_dir(data)
    if args.model:
        config = config.replace("embedding", model=str(args.model))
    result: dict[str, Any] = {"n": n}
    with KnowledgeBase(config) as kb:
        if not (args.keep and kb.stores.store.chunk_count() > 0):  # --keep: as ingested before
            log(f"N={n}: ingesting")
            started = time.perf_counter()
            kb.ingest([docs])
            result["ingest_s"] = round(time.perf_counter() - started, 1)
        result["chunks"] = kb.stores.store.chunk_count()
        result["model"] = kb.embedder.name
        result["dim"] = kb.dim
        result["data_dir_bytes"] = size(data)
        log(f"N={n}: {result['chunks']} chunks; idle backups, before (hnswlib saved on the "
            "writer) and now, alternating")
        rounds = []
        for old in (True, False) * args.pairs:
            rounds.append(idle(kb, docs, folder / "backup-idle", old))
            log(f"  {rounds[-1]}")
        result["idle"] = rounds
        log(f"N={n}: backups during writes, before and now, alternating")
        busy = folder / "backup-busy"
        rounds = []
        for old in ((True, False) * args.pairs)[:-1]:
            shutil.rmtree(busy, ignore_errors=True)
            rounds.append(during_writes(kb, docs, busy, old))
            log(f"  {rounds[-1]}")
        recorded: dict[str, Any] = {}

        def record(copied: dict[str, Any]) -> None:  # on the writer: nothing commits meanwhile
            recorded.update(answers(kb))

        shutil.rmtree(busy, ignore_errors=True)
        rounds.append(during_writes(kb, docs, busy, False, then=record))  # restored below
        log(f"  {rounds[-1]}")
        result["during_writes"] = rounds
        if args.methods:
            log(f"N={n}: DuckDB copy methods")
            result["methods"] = duckdb_methods(kb, folder)
    log(f"N={n}: restore")
    target = folder / "restored"
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    report = restore(busy, target)
    result["restore_s"] = round(time.perf_counter() - started, 2)
    result["restored_bytes"] = size(target)
    records: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    catcher = Catch(logging.INFO)
    logging.getLogger("psirag_kb").addHandler(catcher)
    logging.getLogger("psirag_kb").setLevel(logging.INFO)
    started = time.perf_counter()
    with KnowledgeBase(config.with_data_dir(target)) as restored:
        result["restored_open_s"] = round(time.perf_counter() - started, 2)
        result["restored_chunks"] = restored.stores.store.chunk_count()
        result["restored_generation"] = restored.stores.store.generation
        again = answers(restored)
    logging.getLogger("psirag_kb").removeHandler(catcher)
    result["restored_answers_equal"] = f"{sum(again[k] == recorded[k] for k in recorded)} of " \
        f"{len(recorded)}"
    result["rebuilt_at_open"] = [m for m in records if "rebuil" in m or "catching up" in m
                                 or "caught up" in m]
    assert result["restored_generation"] == report["generation"]
    shutil.rmtree(target)
    shutil.rmtree(busy, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--data", nargs="+", required=True, help="corpus.jsonl files (globs)")
    parser.add_argument("--model", type=Path, help="[embedding] model (a static one is fast)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/psirag-backup"))
    parser.add_argument("--keep", action="store_true",
                        help="reuse an earlier ingest (the data directory as it is)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=2,
                        help="before/now pairs of backups, idle and during writes")
    parser.add_argument("--methods", action="store_true",
                        help="also time DuckDB's copy methods side by side")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    corpora = [Path(p) for pattern in args.data for p in sorted(glob.glob(pattern))]
    config = Config()
    if args.model:
        config = config.replace("embedding", model=str(args.model))
    count, _, _ = token_counter(config)
    generator = Generator(load_sentences(corpora), count, config.ingest.chunk_tokens, args.seed)
    results = {"machine": f"{os.cpu_count()} cores", "load_at_start": os.getloadavg(),
               "runs": [one(n, args, generator) for n in args.n]}
    results["load_at_end"] = os.getloadavg()
    text = json.dumps(results, indent=1)
    (args.work / "backup.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

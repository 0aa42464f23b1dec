"""Backup and restore cost: N generated chunks ingested, then backed up idle and during writes,
the DuckDB copy methods side by side, restored, and the restored copy opened.

    .venv/bin/python benchmarks/backup.py --n 10000 100000 --data $D/*/corpus.jsonl \
        --model /tmp/models/minilm-static --work /tmp/psirag-backup

Per N, in `WORK/nN/` (docs generated as `benchmarks/scale.py` does: 50-chunk Markdown files of
recombined corpus sentences, a code word per chunk):
1. Ingest in this process (`KnowledgeBase.ingest`), unless `--keep` finds it done.
2. `KnowledgeBase.backup` on an idle knowledge base: wall time, how long the writer was held
   (the time writes wait), bytes and files, by part (DuckDB, BM25, dense).
3. The same while a thread writes and ingests 5-chunk files one after another: the backup's
   time, the writer's hold, and the ingests that committed during it; then four more such
   backups alternating the way the stores' immutable files are copied (every file copied on
   the writer; hard-linked on it and copied after, as `backup` does).
4. DuckDB's own copy methods on the writer, side by side in the same run, each into a new
   folder: CHECKPOINT then a file copy (what `backup` does), `ATTACH` + `COPY FROM DATABASE`,
   and `EXPORT DATABASE` (Parquet).
5. `restore` of the idle backup into a new data directory (manifest hashes checked, files
   copied), then the restored knowledge base opened (no index rebuilt: the log is checked).
6. Per-chunk cost (bytes and seconds per chunk at the largest N) and the projection to a million
   chunks, labelled as a projection.

Prints progress on stderr and one JSON object on stdout (also WORK/backup.json).
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import math
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
        kb.store.db.execute("CHECKPOINT")
        shutil.copyfile(kb.store.path, target / "kb.duckdb")

    def copy_from_database(target: Path) -> None:
        db = kb.store.db
        db.execute(f"ATTACH '{target / 'kb.duckdb'}' AS copied")
        try:
            db.execute("COPY FROM DATABASE kb TO copied")
        finally:
            db.execute("DETACH copied")

    def export_database(target: Path) -> None:
        kb.store.db.execute(f"EXPORT DATABASE '{target / 'export'}' (FORMAT parquet)")

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
            seconds = kb.writer.call(run)
            out[name] = {"seconds": round(seconds, 3), "bytes": size(target)}
        except Exception as exc:  # noqa: BLE001 - reported, the others go on
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        shutil.rmtree(target, ignore_errors=True)
        log(f"  duckdb {name}: {out[name]}")
    tantivy = work / "method-tantivy"
    started = time.perf_counter()
    kb.writer.call(lambda: copy_tantivy(kb.sparse.folder, tantivy))
    out["tantivy copy"] = {"seconds": round(time.perf_counter() - started, 3),
                           "bytes": size(tantivy)}
    shutil.rmtree(tantivy, ignore_errors=True)
    return out


def copied_on_writer(kb: KnowledgeBase, dest: Path) -> dict[str, Any]:
    """A backup as `backup` took it before the hard links: every store file copied on the
    writer (for the side-by-side comparison)."""
    def copy(folder: Path, _later: Later) -> dict[str, Any]:
        return kb.writer.call(lambda: copy_stores(kb.stores, folder, Later(None)))

    return take_backup(kb.data_dir, dest, copy)


def during_writes(kb: KnowledgeBase, docs: Path, dest: Path,
                  linked: bool = True) -> dict[str, Any]:
    """A backup while a thread writes and ingests small files back to back (`linked`: as
    `backup` does it; else every file copied on the writer)."""
    stop = threading.Event()
    commits: list[float] = []
    extra = docs / "during"
    extra.mkdir(exist_ok=True)

    def writes() -> None:
        number = 0
        while not stop.is_set():
            path = extra / f"w{number:05d}.md"
            path.write_text("\n\n".join(f"## Added {number} part {p}\n\nA short added note "
                                        f"number {number}, part {p}, about backups."
                                        for p in range(5)) + "\n")
            kb.ingest([path])
            commits.append(time.perf_counter())
            number += 1

    thread = threading.Thread(target=writes)
    thread.start()
    time.sleep(3.0)  # writes under way
    started = time.perf_counter()
    manifest = kb.backup(dest) if linked else copied_on_writer(kb, dest)
    ended = time.perf_counter()
    time.sleep(1.0)
    stop.set()
    thread.join()
    during = [t for t in commits if started <= t <= ended]
    gaps = [b - a for a, b in zip(commits, commits[1:], strict=False)]
    shutil.rmtree(extra)
    kb.ingest([docs])  # the added files removed again
    return {"linked": linked, "seconds": manifest["seconds"],
            "writer_held_s": manifest["writer_held_s"],
            "bytes": manifest["bytes"], "generation": manifest["generation"],
            "ingests_before": len([t for t in commits if t < started]),
            "ingests_committed_during_backup": len(during),
            "longest_gap_between_ingests_s": round(max(gaps), 3) if gaps else None,
            "median_gap_between_ingests_s": round(sorted(gaps)[len(gaps) // 2], 3)
            if gaps else None}


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
        if kb.store.chunk_count() != n:
            log(f"N={n}: ingesting")
            started = time.perf_counter()
            kb.ingest([docs])
            result["ingest_s"] = round(time.perf_counter() - started, 1)
        result["chunks"] = kb.store.chunk_count()
        result["model"] = kb.embedder.name
        result["dim"] = kb.dim
        result["data_dir_bytes"] = size(data)
        log(f"N={n}: {result['chunks']} chunks; idle backup")
        idle = folder / "backup-idle"
        shutil.rmtree(idle, ignore_errors=True)
        manifest = kb.backup(idle)
        result["idle"] = {"seconds": manifest["seconds"],
                          "writer_held_s": manifest["writer_held_s"],
                          "duckdb_copy_s": manifest["duckdb_s"], "bytes": manifest["bytes"],
                          "files": len(manifest["files"]), "parts": parts(idle)}
        log(f"  {result['idle']}")
        log(f"N={n}: backup during writes")
        busy = folder / "backup-busy"
        shutil.rmtree(busy, ignore_errors=True)
        result["during_writes"] = during_writes(kb, docs, busy)
        shutil.rmtree(busy, ignore_errors=True)
        log(f"  {result['during_writes']}")
        rounds = []
        for linked in (False, True, False, True):  # side by side, alternating
            rounds.append(during_writes(kb, docs, busy, linked))
            shutil.rmtree(busy, ignore_errors=True)
            log(f"  {rounds[-1]}")
        result["linked_vs_copied"] = rounds
        log(f"N={n}: DuckDB copy methods")
        result["methods"] = duckdb_methods(kb, folder)
    log(f"N={n}: restore")
    target = folder / "restored"
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    report = restore(idle, target)
    result["restore_s"] = round(time.perf_counter() - started, 2)
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
        result["restored_chunks"] = restored.store.chunk_count()
        result["restored_generation"] = restored.store.generation
    logging.getLogger("psirag_kb").removeHandler(catcher)
    result["rebuilt_at_open"] = [m for m in records if "rebuild" in m or "catching up" in m]
    assert result["restored_generation"] == report["generation"]
    shutil.rmtree(target)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--data", nargs="+", required=True, help="corpus.jsonl files (globs)")
    parser.add_argument("--model", type=Path, help="[embedding] model (a static one is fast)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/psirag-backup"))
    parser.add_argument("--keep", action="store_true", help="reuse an earlier ingest")
    parser.add_argument("--seed", type=int, default=0)
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
    largest = results["runs"][-1]
    per_chunk_bytes = largest["idle"]["bytes"] / largest["chunks"]
    per_chunk_s = largest["idle"]["seconds"] / largest["chunks"]
    per_chunk_held = largest["idle"]["writer_held_s"] / largest["chunks"]
    per_chunk_restore = largest["restore_s"] / largest["chunks"]
    results["projection_1m"] = {
        "note": f"projected linearly from N={largest['chunks']} (not measured at 1M)",
        "bytes": math.ceil(per_chunk_bytes * 1e6), "backup_s": round(per_chunk_s * 1e6, 1),
        "writer_held_s": round(per_chunk_held * 1e6, 1),
        "restore_s": round(per_chunk_restore * 1e6, 1)}
    results["load_at_end"] = os.getloadavg()
    text = json.dumps(results, indent=1)
    (args.work / "backup.json").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

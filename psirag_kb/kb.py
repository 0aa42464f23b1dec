"""The KnowledgeBase facade: ingest, remove, query and status over the stores."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .abstraction import AbstractJob
from .chunking import chunk_text, content_hash
from .config import Config
from .dense import DenseIndex
from .documents import is_supported, link_inside, read_document
from .embedding import Embedder, make_embedder
from .errors import FileReadError, KBError, SkippedFile
from .rerank import Reranker
from .retrieval import EVAL_MODES, MODES, Ranking, rrf
from .sparse import SparseIndex
from .store import ChunkRow, Delta, FileChange, FileRecord, Store
from .tree.drift import repair
from .tree.live import LiveTree
from .treeindex import TreeIndex
from .treeview import node_view, path_view

log = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]
"""progress(done, total, current item)"""

BATCH_FILES = 64
DRIFT_TOLERANCE = 0.02
"""A subtree is rebuilt when its cost exceeds a local rebuild's by more than this fraction."""
DRIFT_MAX_LEAVES = 4000
"""Largest subtree rebuilt in one piece."""
SUMMARY_LEAVES = 18
BATCH_CHUNKS = 1024


@dataclass
class IngestReport:
    """What one ingest call did."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    renamed: int = 0
    skipped: int = 0
    failed: int = 0
    chunks_embedded: int = 0
    chunks_kept: int = 0
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    """(path, state, reason) of skipped and failed files."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        data = dict(self.__dict__)
        data["problems"] = [{"path": p, "state": s, "reason": r} for p, s, r in self.problems]
        return data


def file_hash(data: bytes) -> str:
    """Content hash of a file's bytes."""
    return hashlib.sha256(data).hexdigest()


def _storable(path: Path) -> bool:
    """Whether a path can be stored in DuckDB (names that are not UTF-8 decode to surrogates)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(path: Path) -> str:
    """A path with undecodable bytes shown as \\xNN escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def path_hash(path: Path) -> str:
    """Content hash of a file on disk, read in blocks (the same value as `file_hash`)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_records(path: Path, data: bytes) -> list[ChunkRow]:
    """One chunk row per {"id","title","text"} line of a benchmark corpus."""
    rows: list[ChunkRow] = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            title, text = str(item.get("title", "")).strip(), str(item["text"]).strip()
            source = str(item["id"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KBError(f"{path}:{number}: not a {{id, title, text}} record ({exc})") from exc
        body = f"{title}\n{text}" if title else text
        rows.append(ChunkRow(len(rows), source, None, None, None, None, body, content_hash(body)))
    return rows


class KnowledgeBase:
    """One knowledge base in a data directory; the only object the CLI, API and TUI use."""

    def __init__(self, config: Config, embedder: Embedder | None = None) -> None:
        self.config = config
        self.data_dir = config.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder or make_embedder(config.embedding)
        self._lock = threading.RLock()
        self.store = Store(
            self.data_dir / "kb.duckdb", self.embedder.name, lambda: self.embedder.dim
        )
        self.dim = self.store.dim
        self.sparse = SparseIndex(self.data_dir / "bm25")
        self.dense = DenseIndex(self.data_dir / "dense", self.dim)
        self.embed_seconds = 0.0
        self.tree_seconds = 0.0
        self._defer_tree = False
        self.tree_index: TreeIndex
        self.abstract_job = AbstractJob(self)
        reranker = config.retrieval.reranker
        self.reranker = Reranker(reranker, config.embedding.device) if reranker else None
        self._sync_derived()
        self._load_tree()

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Save what is only in memory and release the stores."""
        with self._lock:
            try:
                self.checkpoint()
            except Exception:  # noqa: BLE001 - a failed save is redone from DuckDB at start-up
                log.exception("could not save the dense index; it will be rebuilt at start-up")
            self.sparse.close()
            self.store.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sync_derived(self) -> None:
        """Rebuild Tantivy or hnswlib when their generation differs from DuckDB's."""
        generation = self.store.generation
        if self.sparse.generation != generation:
            log.info("BM25 index at generation %s, database at %s: rebuilding",
                     self.sparse.generation, generation)
            self.sparse.rebuild(generation, self.store.all_texts())
        if self.dense.generation != generation:
            log.info("dense index at generation %s, database at %s: rebuilding",
                     self.dense.generation, generation)
            ids, vectors = self.store.all_vectors()
            self.dense.rebuild(generation, ids, vectors)

    def _load_tree(self) -> None:
        """Load the stored tree, or rebuild it when it does not match the chunks."""
        ids, vectors = self.store.all_vectors()
        by_id = dict(zip(ids.tolist(), vectors, strict=True))
        live = self.store.load_tree(self.config.tree.max_children, by_id)
        if live is not None:
            index = TreeIndex(live, self.config.tree)
            if np.array_equal(index.chunk_ids(), ids) and not index.problems():
                self.tree_index = index
                return
        if len(ids):
            log.warning("stored tree does not match the chunks: rebuilding it")
        self._build_tree(ids, vectors)

    def _build_tree(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Build the whole tree over the given chunks at once and store it."""
        next_id = int(self.store.meta().get("next_node_id", "1"))
        if len(ids) == 0:
            self.tree_index = TreeIndex(
                LiveTree(self.config.tree.max_children, self.dim, next_id), self.config.tree
            )
        else:
            self.tree_index = TreeIndex.build(ids, vectors, self.config.tree, next_id)
            self.tree_seconds += self.tree_index.build_s
            log.info("built tree over %d leaves in %.2f s", len(ids), self.tree_index.build_s)
        self.store.save_tree(self.tree_index.live)

    def rebuild_tree(self) -> None:
        """Rebuild the whole tree from the stored chunks."""
        with self._lock:
            self._build_tree(*self.store.all_vectors())

    def _nearest(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Most similar existing leaf (chunk id, cosine) per vector, from the dense index."""
        live = self.tree_index.live.vectors
        labels, scores = self.dense.search_many(vectors, 8)
        best = np.full(len(vectors), -1, dtype=np.int64)
        similarity = np.full(len(vectors), -1.0, dtype=np.float32)
        for row in range(len(vectors)):
            for label, score in zip(labels[row].tolist(), scores[row].tolist(), strict=True):
                if -label in live:
                    best[row], similarity[row] = label, score
                    break
        return best, similarity

    def _update_tree(self, added: np.ndarray, vectors: np.ndarray, removed: np.ndarray):
        """Incremental tree update run inside the DuckDB transaction of a change."""
        if self._defer_tree:
            return None
        started = time.perf_counter()
        self.tree_index.update(added, vectors, removed, self._nearest)
        self.tree_seconds += time.perf_counter() - started
        return self.tree_index.live

    def _apply(self, changes: list[FileChange], removals: Iterable[str] = ()) -> Delta:
        """Commit chunks and tree to DuckDB, then bring the derived indexes to the generation."""
        try:
            delta = self.store.apply(changes, removals, self._update_tree)
        except BaseException:
            self._load_tree()  # the transaction rolled back: drop in-memory tree edits too
            raise
        self.sparse.apply(
            delta.generation, zip(delta.added_ids.tolist(), delta.added_texts, strict=True),
            delta.removed_ids.tolist(),
        )
        self.dense.apply(delta.generation, delta.added_ids, delta.added_vectors, delta.removed_ids,
                         save=False)
        return delta

    def checkpoint(self) -> None:
        """Persist the hnswlib index and checkpoint DuckDB (cheap to redo; done on close)."""
        with self._lock:
            if self.dense.generation != self.store.generation:
                self.dense.save(self.store.generation)
            self.store.db.execute("CHECKPOINT")

    @contextmanager
    def _bulk(self) -> Iterator[None]:
        """Defer tree updates when the tree is empty, then build it once at the end."""
        if not self.tree_index.empty or self._defer_tree:
            yield
            return
        self._defer_tree = True
        try:
            yield
        finally:
            with self._lock:
                self._defer_tree = False
                self._build_tree(*self.store.all_vectors())

    # -- ingest -----------------------------------------------------------------------------

    def _ignored(self, path: Path) -> bool:
        """Whether a path component matches an ignore pattern or is hidden."""
        for part in path.parts:
            if part in ("", "/", ".", ".."):
                continue
            if not self.config.ingest.include_hidden and part.startswith("."):
                return True
            if any(fnmatch.fnmatch(part, pattern) for pattern in self.config.ingest.ignore):
                return True
        return False

    def ignored(self, path: Path) -> bool:
        """Whether a path (relative to a watched or ingested folder) is never indexed."""
        return self._ignored(path)

    def _walk(self, folder: Path) -> Iterator[Path]:
        """Files below a folder (no symlinked folders, no links to files inside it, ignore
        patterns applied)."""
        data_dir = str(self.data_dir.resolve())
        for root, dirs, files in os.walk(folder, followlinks=False):
            root_path = Path(root)
            if str(root_path.resolve()).startswith(data_dir):
                dirs[:] = []
                continue
            dirs[:] = sorted(d for d in dirs if not self._ignored(Path(d)))
            for name in sorted(files):
                path = root_path / name
                if not self._ignored(Path(name)) and not link_inside(path, [folder]):
                    yield path

    def ingest(
        self, paths: Iterable[Path | str], progress: Progress | None = None,
        keep_vanished: bool = False,
    ) -> IngestReport:
        """Index files and folders; unchanged files are skipped, missing ones removed.

        A known file that vanishes between listing and reading is removed, unless
        `keep_vanished` (the watcher's choice: the delete or move event that follows decides,
        so a folder moved mid-ingest keeps its leaves).
        """
        report = IngestReport()
        files: list[Path] = []
        removals: list[str] = []
        for raw in paths:
            path = Path(os.path.abspath(os.path.expanduser(raw)))
            if path.is_dir():
                found = list(self._walk(path))
                files.extend(found)
                present = {str(p) for p in found}
                with self._lock:
                    known = self.store.files(str(path))
                removals.extend(
                    r.path for r in known if r.origin == "file" and r.path not in present
                )
            elif path.is_file():
                files.append(path)
            elif self.is_indexed(path):
                removals.append(str(path))
            else:
                raise KBError(f"{path} does not exist")
        for path in [p for p in files if not _storable(p)]:
            files.remove(path)
            report.failed += 1
            report.problems.append((_printable(path), "failed",
                                    "file name is not valid UTF-8; rename the file to index it"))
        with self._bulk():
            with self._lock:
                removals = self._renames(files, removals, report)
                if removals:
                    self._apply([], removals)
                    report.removed += len(removals)
            total = len(files)
            for start in range(0, total, BATCH_FILES):
                batch = files[start:start + BATCH_FILES]
                self._ingest_batch(batch, report, keep_vanished)
                if progress:
                    progress(min(start + len(batch), total), total, str(batch[-1]))
        return report

    def _renames(self, files: list[Path], removals: list[str], report: IngestReport) -> list[str]:
        """Turn a vanished file plus a new file with the same content into a rename."""
        if not removals:
            return removals
        by_hash = {}
        for path, record in self.store.records(removals).items():
            if record.state == "indexed" and record.hash:
                by_hash.setdefault(record.hash, path)
        known = self.store.records(str(p) for p in files) if by_hash else {}
        left = set(removals)
        for path in files:
            if not by_hash or str(path) in known:
                continue
            try:
                digest = path_hash(path)
            except OSError:
                continue
            old = by_hash.pop(digest, None)
            if old is not None and self.store.rename(old, str(path)):
                left.discard(old)
                report.renamed += 1
        return [p for p in removals if p in left]

    def is_indexed(self, path: Path | str) -> bool:
        """Whether a file, or anything below a folder, is known to the knowledge base."""
        with self._lock:
            return bool(self.store.files(os.path.abspath(path)))

    def rename(self, old: Path | str, new: Path | str) -> bool:
        """A file moved: its record and leaves stay, its path changes."""
        with self._lock:
            return self.store.rename(os.path.abspath(old), os.path.abspath(new))

    def _prepare(
        self, path: Path, record: FileRecord | None, report: IngestReport,
        keep_vanished: bool = False,
    ) -> FileChange | None:
        """Read and chunk one file (known as `record`); None when it is unchanged."""
        key = str(path)
        try:
            before = path.stat()
            if not is_supported(path):
                raise SkippedFile(f"unsupported file type {path.suffix or '(no extension)'}")
            if before.st_size > self.config.ingest.max_file_bytes:
                raise SkippedFile(
                    f"file too large ({before.st_size} bytes > limit "
                    f"{self.config.ingest.max_file_bytes})"
                )
            digest = path_hash(path)
            if record and record.hash == digest and record.state != "failed":
                report.unchanged += 1
                return None
            document = read_document(path, max_bytes=self.config.ingest.max_file_bytes)
            after = path.stat()
            if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                raise FileReadError(f"{path} changed while being read; will retry")
        except SkippedFile as exc:
            report.skipped += 1
            report.problems.append((key, "skipped", exc.reason))
            size = before.st_size if "before" in locals() else 0
            return FileChange(key, "file", "", size, 0.0, "skipped", exc.reason)
        except FileNotFoundError:
            if keep_vanished:
                return None
            report.removed += record is not None
            return FileChange(key, "file", "", 0, 0.0, "removed") if record else None
        except (FileReadError, OSError) as exc:
            report.failed += 1
            reason = str(exc) if isinstance(exc, FileReadError) else f"cannot read: {exc}"
            report.problems.append((key, "failed", reason))
            return FileChange(key, "file", "", 0, 0.0, "failed", reason, keep_chunks=True)
        chunks = chunk_text(
            document.text, self.embedder.count_tokens,
            max_tokens=self.config.ingest.chunk_tokens,
            hard_max_tokens=self.config.ingest.max_chunk_tokens,
        )
        rows = [
            ChunkRow(c.ordinal, key, c.start, c.end, c.line_first, c.line_last, c.text, c.hash)
            for c in chunks
        ]
        if record is None:
            report.added += 1
        else:
            report.updated += 1
        change = FileChange(key, "file", digest, after.st_size, after.st_mtime, "indexed", "", rows)
        if not rows:
            change.state, change.reason = "skipped", "no text to index"
            report.skipped += 1
            report.problems.append((key, "skipped", change.reason))
        return change

    def _reuse_and_embed(self, changes: list[FileChange], report: IngestReport) -> None:
        """Keep chunks whose hash is unchanged; embed the others in one pass."""
        pending: list[ChunkRow] = []
        with self._lock:
            records = self.store.records(change.path for change in changes)
        for change in changes:
            record = records.get(change.path)
            with self._lock:
                known = self.store.chunk_hashes(record.id) if record else []
            old: dict[str, list[int]] = defaultdict(list)
            if change.state == "indexed":
                for chunk_id, chunk_hash in known:
                    old[chunk_hash].append(chunk_id)
            for row in change.chunks:
                if row.id is not None:
                    continue
                if old.get(row.hash):
                    row.id = old[row.hash].pop(0)
                    report.chunks_kept += 1
                else:
                    pending.append(row)
        if pending:
            started = time.perf_counter()
            vectors = self.embedder.embed([row.text for row in pending])
            self.embed_seconds += time.perf_counter() - started
            for row, vector in zip(pending, vectors, strict=True):
                row.vector = vector
            report.chunks_embedded += len(pending)

    def _ingest_batch(
        self, paths: list[Path], report: IngestReport, keep_vanished: bool = False
    ) -> None:
        """Prepare, embed and commit a batch of files."""
        changes = []
        with self._lock:
            records = self.store.records(str(p) for p in paths)
        for path in paths:
            try:
                change = self._prepare(path, records.get(str(path)), report, keep_vanished)
            except Exception as exc:  # noqa: BLE001 - one bad file never stops the run
                log.exception("unexpected error reading %s", path)
                report.failed += 1
                report.problems.append((str(path), "failed", f"unexpected error: {exc}"))
                change = FileChange(str(path), "file", "", 0, 0.0, "failed",
                                    f"unexpected error: {exc}")
            if change is not None:
                changes.append(change)
        removals = [c.path for c in changes if c.state == "removed"]
        changes = [c for c in changes if c.state != "removed"]
        if changes or removals:
            self._reuse_and_embed(changes, report)
            with self._lock:
                self._apply(changes, removals)

    def ingest_jsonl(self, path: Path | str, progress: Progress | None = None) -> IngestReport:
        """Index a benchmark corpus: one leaf per {"id","title","text"} record."""
        path = Path(os.path.abspath(path))
        report = IngestReport()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise KBError(f"cannot read corpus {path}: {exc}") from exc
        digest = file_hash(data)
        with self._lock:
            record = self.store.file(str(path))
        if record and record.hash == digest:
            report.unchanged += 1
            return report
        rows = read_records(path, data)
        change = FileChange(str(path), "corpus", digest, len(data), path.stat().st_mtime,
                            "indexed", "", rows)
        with self._lock, self._bulk():
            if record is None:
                report.added += 1
            else:
                report.updated += 1
            self._reuse_and_embed([change], report)
            self._apply([change])
        if progress:
            progress(len(rows), len(rows), str(path))
        return report

    def ingest_corpora(
        self, corpora: Iterable[Path], batches: int = 1, seed: int = 0
    ) -> dict[str, float]:
        """Index benchmark corpora: at once, or shuffled in sequential incremental batches."""
        self.embed_seconds = self.tree_seconds = 0.0
        if batches <= 1:
            with self._lock, self._bulk():
                for corpus in corpora:
                    self.ingest_jsonl(corpus)
        else:
            rows = [row for corpus in corpora
                    for row in read_records(Path(corpus), Path(corpus).read_bytes())]
            order = np.random.default_rng(seed).permutation(len(rows))
            for number, part in enumerate(np.array_split(order, batches)):
                batch = [rows[i] for i in part]
                for ordinal, row in enumerate(batch):
                    row.ordinal = ordinal
                change = FileChange(f"batch-{number:05d}", "corpus", f"batch-{number}",
                                    0, 0.0, "indexed", "", batch)
                with self._lock:
                    self._reuse_and_embed([change], IngestReport())
                    self._apply([change])
        return {"embed_s": round(self.embed_seconds, 2),
                "tree_build_s": round(self.tree_seconds, 2)}

    def remove(self, paths: Iterable[Path | str]) -> int:
        """Forget files (and everything below folders); returns how many were removed."""
        targets: list[str] = []
        with self._lock:
            for raw in paths:
                key = os.path.abspath(os.path.expanduser(raw))
                targets.extend(r.path for r in self.store.files(key))
            if targets:
                self._apply([], targets)
        return len(targets)

    # -- query ------------------------------------------------------------------------------

    def embed_query(self, text: str) -> np.ndarray:
        """The query's unit vector (float32)."""
        return np.asarray(self.embedder.embed([text])[0], dtype=np.float32)

    def rank(self, text: str, mode: str, k: int) -> Ranking:
        """Chunk ids for a query in one mode, best first."""
        if mode not in EVAL_MODES:
            raise KBError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        with self._lock:
            return self._rank(text, mode, k)

    def _rank(self, text: str, mode: str, k: int) -> Ranking:
        """`rank` with the lock held."""
        retrieval = self.config.retrieval
        per = max(k, retrieval.k_per_retriever)
        if mode == "sparse":
            return Ranking(*self.sparse.search(text, k))
        if mode == "agent":  # retrieval of agent mode without an LLM
            from .multiround import multi_round

            return multi_round(self, text, k).ranking
        query = self.embed_query(text)
        if mode == "dense":
            return Ranking(*self.dense.search(query, k))
        if mode == "tree":
            return self._tree_search(query, k)
        rankings = [
            Ranking(*self.sparse.search(text, per)), Ranking(*self.dense.search(query, per))
        ]
        if mode == "hybrid":
            if not retrieval.fuse_dense:
                rankings.pop()
            rankings.insert(0, self._tree_search(query, per))
        if retrieval.fusion == "rerank" and self.reranker is not None:
            candidates = rrf(rankings, retrieval.rrf_k).ids
            hits = self.store.hits(candidates.tolist())
            candidates = np.array([i for i in candidates.tolist() if i in hits], dtype=np.int64)
            return self.reranker.rerank(text, candidates, [hits[i].text for i in candidates], k)
        return rrf(rankings, retrieval.rrf_k, limit=k)

    def _tree_search(self, query: np.ndarray, k: int) -> Ranking:
        """Top-down tree retrieval (empty before anything is indexed)."""
        retrieval = self.config.retrieval
        if retrieval.tree_search == "collapsed":
            return self.tree_index.search_collapsed(
                query, retrieval.parent_weight, k, self.config.tree.node_vectors == "abstract"
            )
        return self.tree_index.search(query, retrieval.tree_k, k)

    def sources(self, ids: np.ndarray) -> list[str]:
        """The source (path or corpus id) of each chunk id, in order."""
        with self._lock:
            hits = self.store.hits(ids.tolist())
        return [hits[i].source for i in ids.tolist() if i in hits]

    def query(
        self, text: str, mode: str | None = None, k: int | None = None, summarize: bool = False
    ) -> dict[str, Any]:
        """Ranked results as the JSON shape the CLI and API return.

        With `summarize`, 18 leaves (or k) come from the tree alone, in corpus order.
        """
        text = text.strip()
        if not text:
            raise KBError("the query is empty")
        mode = "summarize" if summarize else (mode or self.config.retrieval.default_mode)
        if mode == "agent":
            return self.answer(text, k)
        with self._lock:
            if summarize:
                ranking = self._tree_search(self.embed_query(text), k or SUMMARY_LEAVES)
            else:
                k = k or self.config.retrieval.k
                ranking = self.rank(text, mode, k)
            hits = self.store.hits(ranking.ids.tolist())
        if summarize:
            position = {i: (hits[i].path, hits[i].ordinal) for i in hits}
            order = sorted(range(len(ranking.ids)),
                           key=lambda j: position.get(int(ranking.ids[j]), ("", 0)))
            ranking = Ranking(ranking.ids[order], ranking.scores[order])
        results = []
        for chunk_id, score in zip(ranking.ids.tolist(), ranking.scores.tolist(), strict=True):
            hit = hits.get(chunk_id)
            if hit is None:
                continue
            lines = [hit.line_first, hit.line_last] if hit.line_first is not None else None
            results.append({
                "rank": len(results) + 1,
                "score": float(score),
                "source": hit.source,
                "lines": lines,
                "text": hit.text,
                "chunk_id": chunk_id,
                "path": hit.path,
            })
        result = {"query": text, "mode": mode, "results": results}
        if summarize:
            from .summary import add_summary

            return add_summary(self, result)
        return result

    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Agent mode: an LLM answer with citations and steps, or multi-round retrieval."""
        from .agent import answer_question

        return answer_question(self, text, k, on_step).as_dict()

    # -- status -----------------------------------------------------------------------------

    def repair_drift(self, tolerance: float = DRIFT_TOLERANCE,
                     max_leaves: int = DRIFT_MAX_LEAVES) -> dict[str, Any]:
        """Rebuild subtrees whose neighbour cost exceeds a local rebuild's by `tolerance`."""
        started = time.perf_counter()
        with self._lock:
            live = self.tree_index.live
            report = repair(live, self.config.tree.max_children, self.config.tree.pair_mode,
                            tolerance, max_leaves)
            if report["rebuilt"]:
                with self.store.transaction():
                    self.store.write_tree(live)
        return report | {"seconds": round(time.perf_counter() - started, 3)}

    def regenerate_abstracts(self, max_nodes: int | None = None) -> dict[str, Any]:
        """Write fresh abstracts for dirty nodes, bottom-up (offline keywords or Ollama)."""
        return self.abstract_job.run(max_nodes)

    def maintain(self) -> dict[str, Any]:
        """Periodic upkeep: repair drifted subtrees, then regenerate dirty abstracts."""
        drift = self.repair_drift()
        abstracts = self.regenerate_abstracts()
        self.checkpoint()
        return {"drift": drift, "abstracts": abstracts}

    def node(self, node_id: int | None = None) -> dict[str, Any]:
        """One abstract node (the root by default): its abstract and its children."""
        with self._lock:
            return node_view(self.tree_index.live, node_id, self.store.hits)

    def path_of(self, chunk_id: int) -> list[dict[str, Any]]:
        """The abstract nodes above a chunk's leaf, root first: id, layer, abstract, dirty."""
        with self._lock:
            return path_view(self.tree_index.live, chunk_id)

    def tree_status(self) -> dict[str, Any]:
        """Shape of the tree."""
        with self._lock:
            return self.tree_index.status()

    def status(self) -> dict[str, Any]:
        """Counts, model and store sizes."""
        with self._lock:
            counts = self.store.state_counts()
            problems = [
                {"path": r.path, "state": r.state, "reason": r.reason}
                for r in self.store.problems()
            ]
            return {
                "data_dir": str(self.data_dir),
                "tree": self.tree_status(),
                "abstracts": self.abstract_job.status(),
                "files": counts,
                "chunks": self.store.chunk_count(),
                "model": self.embedder.name,
                "dim": self.dim,
                "generation": self.store.generation,
                "stores": {
                    "duckdb_bytes": _size(self.store.path)
                    + _size(self.store.path.with_name(self.store.path.name + ".wal")),
                    "bm25_bytes": _size(self.sparse.folder),
                    "dense_bytes": _size(self.dense.folder),
                },
                "problems": problems,
            }


def _size(path: Path) -> int:
    """Bytes used by a file or folder."""
    if path.is_file():
        return path.stat().st_size
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())

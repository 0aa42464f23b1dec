"""The KnowledgeBase facade: ingest, query, tree and status over one data directory.

Writes run on the stores' one writer thread (`stores.py`), in order; queries run on any thread
against what the last commit published (DuckDB cursors, Tantivy's searcher, hnswlib, the tree's
view) and take no lock a write holds.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from psirag_kb.abstracts.job import AbstractJob
from psirag_kb.access import OWNER, Access
from psirag_kb.answer.agent import answer_question
from psirag_kb.answer.summary import add_summary
from psirag_kb.config import Config
from psirag_kb.errors import AccessDenied, KBError
from psirag_kb.ingest.device import device_of
from psirag_kb.ingest.embedding import (
    Embedder,
    QueryEmbedder,
    for_queries,
    make_embedder,
    yield_cores,
)
from psirag_kb.ingest.ingestion import CLOSE_WAIT_S, Ingestion
from psirag_kb.ingest.report import IngestReport, Progress
from psirag_kb.paths import resolved
from psirag_kb.search.engine import QueryEngine, Within, asked
from psirag_kb.search.followup import Rewrite, Turn, history_turns, resolve
from psirag_kb.search.overview import is_global
from psirag_kb.search.rerank import Reranker
from psirag_kb.search.rows import result_row
from psirag_kb.storage.backup import (
    Later,
    copy_stores,
    last_backup,
    record_last,
    seed_copy,
    take_backup,
)
from psirag_kb.storage.conversations import Conversations, StoredTurn
from psirag_kb.storage.records import Ranking
from psirag_kb.storage.scope import Scope
from psirag_kb.storage.store import reembedded_model
from psirag_kb.tree import rows as tree_rows
from psirag_kb.tree.drift import repair
from psirag_kb.tree.stores import Stores
from psirag_kb.tree.view import TreeView

log = logging.getLogger(__name__)

RUNNING = ("running", "switching")
"""States of a reembed that has not ended."""


class _Named:
    """A model known by its name only (a stopped reembed being cancelled)."""

    def __init__(self, name: str) -> None:
        self.name = name


DRIFT_TOLERANCE = 0.02
"""A subtree is rebuilt when its cost exceeds a local rebuild's by more than this fraction."""
DRIFT_MAX_LEAVES = 4000
"""Largest subtree rebuilt in one piece."""
HISTORY_TURNS = 6
"""Earlier turns of a stored conversation a follow-up is resolved against."""
HEADER_PASSAGES = 3
"""Cited passages of a turn whose headers the rewrite may draw on."""
CITED = 20
"""Passages kept per turn."""

__all__ = ["OWNER", "Access", "KnowledgeBase", "Within", "result_row"]


class KnowledgeBase:
    """One knowledge base in a data directory; the only object the CLI, API and TUI use."""

    def __init__(self, config: Config, embedder: Embedder | None = None) -> None:
        self.config = config
        self.data_dir = config.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if embedder is None:
            embedding = config.embedding
            switched = reembedded_model(config.data_dir / "kb.duckdb")
            if switched and switched != embedding.model:
                log.warning("the knowledge base was embedded again with %s by `reembed`; "
                            "[embedding] model = %r is not used (set it to %r)", switched,
                            embedding.model, switched)
                embedding = dataclasses.replace(embedding, model=switched)
            embedder = make_embedder(embedding, config.storage.cache_dir)
        self.embedder = embedder
        # questions get a model instance of their own, so they never wait for a file's batch
        self.query_embedder = QueryEmbedder(for_queries(self.embedder))
        # while questions come in, files are embedded on one core and questions get the other
        yield_cores(self.embedder, self.query_embedder.busy)
        self.stores = Stores(config, self.embedder.name, lambda: self.embedder.dim)
        self.dim = self.stores.dim
        self.ingestion = Ingestion(config, self.embedder, self.stores)
        self.abstract_job = AbstractJob(config, self.embedder, self.stores)
        self.stores.embed_texts = self.abstract_job.embedder.embed
        reranker = config.retrieval.reranker
        self.reranker = Reranker(reranker, config.embedding.device) if reranker else None
        self.engine = QueryEngine(config, self.stores, self.query_embedder, self.reranker)
        """Every read of the knowledge base: the facade composes it, never the other way."""
        self.talks = Conversations(self.stores.store)
        """The conversations table (`ask`, `conversations`, `conversation`, ...)."""
        self.reembedding: Any = None
        """The reembed this process runs or ran (ingest/reembed.py), None before one."""

    @property
    def config(self) -> Config:
        """The configuration (replacing it here replaces the query engine's too)."""
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        self._config = config
        if "engine" in self.__dict__:
            self.engine.config = config

    # -- what the daemon and the command line read ----------------------------------------

    def busy(self) -> bool:
        """Whether files are being indexed or writes are queued."""
        return self.stores.writer.queued > 0 or self.ingestion.running > 0

    def queued(self) -> int:
        """Writes queued plus files being indexed."""
        return self.stores.writer.queued + self.ingestion.running

    def chunk_count(self) -> int:
        """Passages stored."""
        return self.stores.store.chunk_count()

    @property
    def generation(self) -> int:
        """The store's write generation (bumped by every committed change)."""
        return self.stores.store.generation

    def tree_view(self) -> TreeView:
        """The tree as last published (a new object after every change to it)."""
        return self.stores.tree_index.view

    def index_states(self) -> dict[str, str]:
        """Each index's state word: the derived ones and the tree."""
        stores = self.stores
        states = {name: shown["state"] for name, shown in stores.index_status().items()}
        states["tree"] = stores.tree_state["state"]
        return states

    def unready_reasons(self) -> list[str]:
        """Why queries do not answer as they should yet ([] when they do): a derived index
        stale or being rebuilt, the tree missing."""
        stores = self.stores
        reasons = [f"the {name} index is being rebuilt from the database "
                   f"({entry.get('reason', 'stale')})"
                   for name, entry in sorted(stores.stale.items())]
        tree = stores.tree_state
        if tree["state"] != "ok":
            reasons.append(f"the tree is {tree['state']} ({tree.get('reason', '')}); queries "
                           "use BM25 and the dense index until it is rebuilt")
        return reasons

    def start_tree_rebuild(self) -> None:
        """Rebuild a missing tree in the background while queries go on."""
        self.stores.start_tree_rebuild()

    def metrics_snapshot(self) -> dict[str, Any]:
        """Counts, queues and index states for the metrics endpoint."""
        stores = self.stores
        return {
            "files": stores.store.state_counts(), "chunks": stores.store.chunk_count(),
            "generation": stores.store.generation, "dirty": stores.tree_index.view.dirty,
            "writer_queue": stores.writer.queued, "indexes": self.index_states(),
            "files_written": stores.files_written, "chunks_written": stores.chunks_written,
        }

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop ingests after their committed batch, finish the running write, drop queued
        ones, save what is only in memory, close."""
        if self.reembedding is not None:
            self.reembedding.stop()  # resumed at its cursor by the next `resume_reembed`
        self.ingestion.stop(CLOSE_WAIT_S)
        self.stores.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes (each one a task for the writer thread) -------------------------------------

    def ingest(self, paths: Iterable[Path | str], progress: Progress | None = None,
               keep_vanished: bool = False, *, access: Access = OWNER) -> IngestReport:
        """Index files and folders; unchanged files are skipped, missing ones removed (only
        inside what `access` may write: an editor's grants, anywhere for an admin)."""
        return self.ingestion.ingest(_writable(paths, access), progress, keep_vanished)

    def ingest_jsonl(self, path: Path | str, progress: Progress | None = None) -> IngestReport:
        """Index a benchmark corpus: one leaf per {"id","title","text"} record."""
        return self.ingestion.ingest_jsonl(path, progress)

    def ingest_corpora(self, corpora: Iterable[Path], batches: int = 1,
                       seed: int = 0) -> dict[str, float]:
        """Index benchmark corpora: at once, or shuffled in sequential incremental batches."""
        return self.ingestion.ingest_corpora(corpora, batches, seed)

    def remove(self, paths: Iterable[Path | str], *, access: Access = OWNER) -> int:
        """Forget files (and everything below folders); returns how many were removed (only
        inside what `access` may write)."""
        return self.ingestion.remove(_writable(paths, access))

    def forget(self, paths: Iterable[Path | str], *, access: Access = OWNER) -> int:
        """Remove files and folders on purpose, unavailable ones included; an error when nothing
        is indexed at or below a path. Returns how many files were removed."""
        return self.ingestion.forget(_writable(paths, access))

    def vanish(self, folders: Iterable[Path | str]) -> int:
        """Mark the indexed files of folders that vanished unavailable: they stay searchable
        until the folder returns or is forgotten. Returns how many were marked."""
        return self.ingestion.vanish(folders)

    def forget_unwatched(self, folders: Iterable[Path | str]) -> int:
        """Record the watched folders; remove the unavailable files of folders watched the
        last time and no longer. Returns how many files were removed."""
        return self.ingestion.forget_unwatched(folders)

    def rename(self, old: Path | str, new: Path | str) -> bool:
        """A file moved: its record and leaves stay, its path changes."""
        return self.ingestion.rename(old, new)

    def is_indexed(self, path: Path | str) -> bool:
        """Whether a file, or anything below a folder, is known to the knowledge base."""
        return self.ingestion.is_indexed(path)

    def ignored(self, path: Path) -> bool:
        """Whether a path (relative to a watched or ingested folder) is never indexed."""
        return self.ingestion.ignored(path)

    def rebuild_tree(self) -> None:
        """Rebuild the whole tree from the stored chunks."""
        stores = self.stores
        self.stores.writer.call(lambda: stores.build_tree(*stores.tree_vectors()),
                         key="rebuild-tree")

    def set_boundaries(self, grants: Iterable[str] | None = None,
                       roots: Iterable[Path | str] | None = None) -> bool:
        """Partition the tree at these granted folders and files and watched folders (None
        keeps the current ones), so no abstract mixes text of different readers; True when the
        tree is being split in the background (queries go on with the current tree)."""
        paths = None if grants is None else [str(g) for g in grants]
        folders = None if roots is None else [Path(r) for r in roots]
        return self.stores.writer.call(lambda: self.stores.set_boundaries(paths, folders),
                                key="boundaries")

    def checkpoint(self) -> None:
        """Persist the hnswlib index and checkpoint DuckDB (cheap to redo; done on close)."""
        self.stores.writer.call(self.stores.checkpoint_now, key="checkpoint")

    def backup(self, dest: Path | str, then: Callable[[dict[str, Any]], None] | None = None,
               ) -> dict[str, Any]:
        """Copy the knowledge base into the new folder `dest` while it goes on serving: the
        stores on the writer between two commits, then people, audit and the rest, with a
        manifest (see `storage/backup.py`); `then(copied)` runs on the writer right after the
        stores were copied, before any later write. The manifest."""
        def copy(folder: Path, later: Later) -> dict[str, Any]:
            seed_copy(self.stores, folder)  # off the writer; made exact on it

            def run() -> dict[str, Any]:
                copied = copy_stores(self.stores, folder, later)
                if then is not None:
                    then(copied)
                return copied
            return self.stores.writer.call(run)

        cache = Path(self.config.storage.cache_dir).expanduser()
        manifest = take_backup(self.data_dir, Path(dest), copy, (cache,))
        record_last(self.data_dir, manifest)
        return manifest

    # -- query (composed from the query engine; `access` is the person asking) -------------

    def embed_query(self, text: str) -> np.ndarray:
        """The query's unit vector (float32)."""
        return self.engine.embed_query(text)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of several queries in one batched call."""
        return self.engine.embed_queries(texts)

    def scope_of(self, within: Within, access: Access = OWNER) -> Scope:
        """The scope of a query limited to these folders and files and the person's grants."""
        scope = self.engine.scope_of(within, access)
        assert scope is not None  # paths were given
        return scope

    def rank(self, text: str, mode: str, k: int, within: Within | None = None,
             vector: np.ndarray | None = None, *, access: Access = OWNER) -> Ranking:
        """Chunk ids for a query in one mode, best first (see `QueryEngine.rank`)."""
        return self.engine.rank(text, mode, k, within, vector, access)

    def sources(self, ids: np.ndarray) -> list[str]:
        """The source (path or corpus id) of each chunk id, in order."""
        return self.engine.sources(ids)

    def query(
        self, text: str, mode: str | None = None, k: int | None = None, summarize: bool = False,
        within: Within | None = None, *, access: Access = OWNER,
    ) -> dict[str, Any]:
        """Ranked results as the JSON shape the CLI and API return, from what `access` may
        read: agent mode answers (`answer`), a summary adds abstracts and the LLM's text, and
        every other mode is the engine's (see `QueryEngine.query`)."""
        if mode == "agent" and not summarize:
            if not text.strip():
                raise KBError("the query is empty")
            return self.answer(text.strip(), k, within=within, access=access)
        result = self.engine.query(text, mode, k, summarize, within, access)
        if summarize:
            return add_summary(self.engine, result, access=access)
        return result

    def tree_note(self) -> str | None:
        """What a tree-mode or summarize query says while the tree is missing or rebuilding."""
        return self.engine.tree_note()

    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None,
               within: Within | None = None, *, access: Access = OWNER) -> dict[str, Any]:
        """Agent mode: an LLM answer with citations and steps, or multi-round retrieval; every
        retrieval round searches only what `access` may read (and `within`, when given)."""
        if is_global(text) and self.engine.tree_note() is None:
            return self._global_answer(text, k, within, access)
        scope = self.engine.scope_of(within, access)
        result = answer_question(self.engine, text, k, on_step, scope).as_dict()
        if within is not None:
            result["in"] = list(asked(within))
        return result

    def _global_answer(self, text: str, k: int | None, within: Within | None,
                       access: Access) -> dict[str, Any]:
        """A question about the whole collection or a folder, answered from the tree's top
        branches (their summary, citing the nodes) in agent mode's shape."""
        found = self.query(text, k=k, summarize=True, within=within, access=access)
        return {"mode": "agent", "query": text, "answer": found["summary"],
                "status": "answered", "citations": found["citations"],
                "nodes": found["nodes"], "steps": [],
                "hops": 0, "message": found["message"], "results": found["results"],
                "overview": found["overview"],
                **({"in": found["in"]} if "in" in found else {})}

    # -- conversations (each person's own; writes on the writer thread) --------------------

    def ask(self, question: str, *, conversation: str | None = None,
            history: Sequence[Any] | None = None, mode: str | None = None,
            k: int | None = None, within: Within | None = None,
            on_step: Callable[[dict[str, Any]], None] | None = None,
            access: Access = OWNER) -> dict[str, Any]:
        """A question in a conversation: a follow-up made standalone from the earlier turns
        (the stored `conversation`'s, or `history` as a client sends it: {role, content}
        messages or earlier turns), searched or answered as `query` would, and recorded as a
        turn of `conversation` when given. The result is `query`'s (or `answer`'s) plus
        "question", "searched", "rewrite" (as_is, offline, llm), "conversation" and "turn"."""
        question = question.strip()
        if not question:
            raise KBError("the question is empty")
        if conversation is not None and history is not None:
            raise KBError("give a conversation or the earlier turns, not both")
        if conversation is not None:
            turns = self._turns_of(conversation, access)
        else:
            try:
                turns = history_turns(history or [])
            except ValueError as exc:
                raise KBError(f"history: {exc}") from None
        rewrite = self.rewrite(turns, question)
        extra: dict[str, Any] = {} if within is None else {"within": within}
        if mode == "agent":
            result = self.answer(rewrite.query, k, on_step, access=access, **extra)
        else:
            result = self.query(rewrite.query, mode, k, access=access, **extra)
        result |= {"question": question, **rewrite.as_dict(), "conversation": conversation,
                   "turn": None}
        if conversation is not None:
            stored = _stored_turn(question, rewrite, result)
            result["turn"] = self.stores.writer.call(
                lambda: self.talks.add_turn(conversation, access.name, stored),
                key="conversation")
        return result

    def rewrite(self, history: Sequence[Turn], question: str) -> Rewrite:
        """The standalone query for a question after these turns (the LLM's when [llm] is
        enabled and its rewrite keeps to the turns' words, else the offline one)."""
        from psirag_kb.answer.rewriting import llm_rewriter

        return resolve(history, question, llm_rewriter(self.config.llm))

    def _turns_of(self, conversation: str, access: Access) -> list[Turn]:
        """A stored conversation's last turns as the rewrite sees them: the headers of passages
        the person may still read, answers only while all their passages are (one lookup of
        the passages for all the turns)."""
        stored = self.talks.turns(conversation, access.name, HISTORY_TURNS)
        readable = self.engine.readable([i for t in stored for i in t.chunk_ids], access)
        texts = self.stores.store.texts([i for t in stored for i in t.chunk_ids[:HEADER_PASSAGES]
                                  if i in readable])
        return [Turn(turn.question, turn.searched,
                     tuple(texts[i][1] for i in turn.chunk_ids[:HEADER_PASSAGES]
                           if i in texts and texts[i][1]),
                     (turn.answer or "") if all(i in readable for i in turn.chunk_ids) else "")
                for turn in stored]

    def new_conversation(self, title: str = "", *, access: Access = OWNER) -> dict[str, Any]:
        """A new, empty conversation of this person's: {"id", "title", "created", ...}."""
        return self.stores.writer.call(lambda: self.talks.create(access.name, title),
                                key="conversation")

    def conversations(self, *, access: Access = OWNER) -> dict[str, Any]:
        """{"conversations": [...]}: this person's, the most recently continued first."""
        return {"conversations": self.talks.listed(access.name)}

    def conversation(self, conversation: str, *, access: Access = OWNER) -> dict[str, Any]:
        """One of this person's conversations with its turns; each turn's passages are
        re-checked against the grants of now (one no longer readable, or gone, is
        {"chunk_id", "withheld": true}, and an answer drawn from it is withheld too)."""
        summary = self.talks.summary(conversation, access.name)
        stored = self.talks.turns(conversation, access.name)
        readable = self.engine.readable([i for t in stored for i in t.chunk_ids], access)
        turns = []
        for number, turn in enumerate(stored, start=1):
            passages = [_passage(readable[i], i, rank) if i in readable
                        else {"chunk_id": i, "rank": rank, "withheld": True}
                        for rank, i in enumerate(turn.chunk_ids, start=1)]
            for passage, cited in zip(passages, turn.numbers, strict=False):
                passage["number"] = cited
            withheld = any(p.get("withheld") for p in passages)
            turns.append({"turn": number, "question": turn.question, "searched": turn.searched,
                          "rewrite": turn.rewrite, "mode": turn.mode,
                          "answer": None if withheld else turn.answer, "status": turn.status,
                          "at": turn.at, "passages": passages,
                          **({"withheld": True} if withheld else {})})
        return summary | {"turns": turns}

    def rename_conversation(self, conversation: str, title: str, *,
                            access: Access = OWNER) -> dict[str, Any]:
        """Give one of this person's conversations a new title; its summary."""
        if not title.strip():
            raise KBError("the title is empty")
        self.stores.writer.call(lambda: self.talks.rename(conversation, access.name, title),
                         key="conversation")
        return self.talks.summary(conversation, access.name)

    def delete_conversation(self, conversation: str, *, access: Access = OWNER) -> dict[str, Any]:
        """Delete one of this person's conversations; {"deleted": id}."""
        self.stores.writer.call(lambda: self.talks.delete(conversation, access.name),
                         key="conversation")
        return {"deleted": conversation}

    def forget_person(self, name: str) -> int:
        """Delete all of a removed person's conversations; returns how many."""
        return self.stores.writer.call(lambda: self.talks.delete_owner(name), key="conversation")

    def prune_conversations(self, people: Mapping[str, float] | Iterable[str] | None = None
                            ) -> dict[str, Any]:
        """Delete conversations not continued for [conversations] keep_days, and, when the
        people there are now are given (names, or name -> when added), those of anyone else
        and those begun before their person was added (a namesake's); the machine's owner's
        stay. {"pruned": how many}."""
        before = time.time() - self.config.conversations.keep_days * 86400.0
        keep: dict[str, float] | None = None
        if people is not None:
            keep = (dict(people) if isinstance(people, Mapping)
                    else dict.fromkeys(people, 0.0)) | {OWNER.name: 0.0}
        return {"pruned": self.stores.writer.call(lambda: self.talks.prune(before, keep),
                                           key="conversation")}

    # -- status -----------------------------------------------------------------------------

    def repair_drift(self, tolerance: float = DRIFT_TOLERANCE,
                     max_leaves: int = DRIFT_MAX_LEAVES) -> dict[str, Any]:
        """Rebuild subtrees whose neighbour cost exceeds a local rebuild's by `tolerance`."""
        started = time.perf_counter()

        def run() -> dict[str, Any]:
            live = self.stores.tree_index.live
            with self.stores.tree_edit():
                report = repair(live, self.config.tree.max_children,
                                self.config.tree.pair_mode, tolerance, max_leaves)
                if report["rebuilt"]:
                    with self.stores.store.transaction():
                        tree_rows.write_tree(self.stores.store, live)
            return report

        report = self.stores.writer.call(run, key="repair-drift")
        return report | {"seconds": round(time.perf_counter() - started, 3)}

    def regenerate_abstracts(self, max_nodes: int | None = None, offline: bool = False,
                             yield_to: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Write fresh abstracts for dirty nodes, bottom-up (offline keywords or Ollama);
        `offline` never asks the LLM (see `AbstractJob.run`)."""
        return self.abstract_job.run(max_nodes, offline, yield_to)

    def maintain(self) -> dict[str, Any]:
        """Upkeep: repair drifted subtrees, regenerate dirty abstracts, relabel after an upgrade."""
        if self.stores.tree_state["state"] == "missing":  # not being rebuilt
            self.rebuild_tree()
        report = {"drift": self.repair_drift(), "abstracts": self.regenerate_abstracts()}
        report |= self.abstract_job.relabel_if_stale()
        self.checkpoint()
        return report

    # -- a new embedding model (ingest/reembed.py) -------------------------------------------

    def reembed(self, model: str, embedder: Embedder | None = None) -> dict[str, Any]:
        """Start embedding every chunk with another model in the background (queries and
        writes go on with the current one until the switch); a reembed to the same model that
        a stopped process left resumes. Returns its status."""
        from psirag_kb.ingest.reembed import Reembed, ReembedError, model_name

        if self.reembedding is not None and self.reembedding.state in RUNNING:
            raise ReembedError(f"a reembed to {self.reembedding.embedder.name!r} runs; "
                               "`psirag-kb reembed --cancel` stops it")
        if embedder is None:
            embedder = make_embedder(dataclasses.replace(
                self.config.embedding, model=model_name(model)), self.config.storage.cache_dir)
        job = Reembed(self.stores, embedder, self._switch_embedder)
        job.begin()
        self.reembedding = job
        return job.status()

    def resume_reembed(self, embedder: Embedder | None = None) -> dict[str, Any] | None:
        """Go on with a reembed a stopped process left (None when there is none)."""
        from psirag_kb.ingest.reembed import Reembed

        model = Reembed.pending(self.stores)
        if model is None:
            return None
        return self.reembed(model, embedder)

    def cancel_reembed(self) -> dict[str, Any]:
        """Stop a reembed and drop its new vectors: the current model stays."""
        from psirag_kb.ingest.reembed import Reembed, ReembedError

        job = self.reembedding
        if job is None or job.state not in RUNNING:
            model = Reembed.pending(self.stores)
            if model is None:
                raise ReembedError("no reembed runs")
            # cancelling reads only the model's name
            job = Reembed(self.stores, cast(Embedder, _Named(model)), self._switch_embedder)
        job.cancel()
        self.reembedding = job
        return {"cancelled": job.embedder.name, "model": self.embedder.name}

    def reembed_status(self) -> dict[str, Any] | None:
        """The running (or last) reembed's progress, or a stopped one's model."""
        from psirag_kb.ingest.reembed import Reembed

        if self.reembedding is not None:
            return self.reembedding.status()
        model = Reembed.pending(self.stores)
        return None if model is None else {"model": model, "state": "stopped"}

    def _switch_embedder(self, embedder: Embedder, dense: Any) -> None:
        """Swap the new model in for files, abstracts and questions (on the writer, right
        after the switch committed; the dense index is swapped by the caller)."""
        from psirag_kb.ingest.reading import BatchReader

        self.embedder = embedder
        self.dim = self.stores.dim
        self.ingestion.embedder = embedder
        self.ingestion.reader = BatchReader(self.config, embedder)
        self.abstract_job.embedder = getattr(embedder, "inner", embedder)
        self.abstract_job.keywords = type(self.abstract_job.keywords)(self.abstract_job.embedder)
        self.stores.embed_texts = self.abstract_job.embedder.embed
        self.query_embedder = QueryEmbedder(for_queries(embedder))
        self.engine.query_embedder = self.query_embedder

    def node(self, node_id: int | None = None, *, access: Access = OWNER) -> dict[str, Any]:
        """One abstract node (the root by default) and its children, as `access` may see them."""
        return self.engine.node(node_id, access)

    def topic_map(self, node_id: int | None = None, *, access: Access = OWNER) -> dict[str, Any]:
        """`node` with two layers below and each area's sampled files (`search/topicmap.py`)."""
        return self.engine.topic_map(node_id, access)

    def path_of(self, chunk_id: int, *, access: Access = OWNER) -> list[dict[str, Any]]:
        """The abstract nodes above a chunk's leaf, root first: id, layer, abstract, dirty."""
        return self.engine.path_of(chunk_id, access)

    def chunk(self, chunk_id: int, neighbours: int = 0, *,
              access: Access = OWNER) -> dict[str, Any]:
        """One chunk with up to `neighbours` chunks either side of it in its file; one that
        `access` may not read is not found, as one that does not exist."""
        return self.engine.chunk(chunk_id, neighbours, access)

    def original(self, chunk_id: int, *, access: Access = OWNER) -> dict[str, Any]:
        """The indexed file of a chunk ({"path", "source"}) when `access` may read it."""
        return self.engine.original(chunk_id, access)

    def tree_status(self) -> dict[str, Any]:
        """Shape of the tree, and whether it waits for a rebuild."""
        state = self.stores.tree_state
        shown = {"state": state["state"]} | (
            {"reason": state.get("reason", ""), "since": state.get("since")}
            if state["state"] != "ok" else {})
        if self.stores.splitting:
            shown["splitting"] = True
        return self.stores.tree_index.status() | shown

    def status(self, *, access: Access = OWNER) -> dict[str, Any]:
        """Counts, model and store sizes; for a person with grants, only what they may read
        (their files, chunks, problems and visible tree nodes; no paths or sizes of the rest)."""
        if not access.everything:
            return self.engine.status_within(access) | {"model": self.embedder.name,
                                                        "dim": self.dim}
        # the reembed first: one seen done has switched the model read below (the switch
        # swaps the embedder before it marks the reembed done)
        reembed = self.reembed_status()
        writer = self.stores.writer
        counts = self.stores.store.state_counts()
        problems = [
            {"path": r.path, "state": r.state, "reason": r.reason}
            for r in self.stores.store.problems()
        ]
        return {
            "data_dir": str(self.data_dir),
            "tree": self.tree_status(),
            "abstracts": self.abstract_job.status(),
            "files": counts,
            "chunks": self.stores.store.chunk_count(),
            "model": self.embedder.name,
            "dim": self.dim,
            **dict(zip(("device", "device_reason"), device_of(self.embedder), strict=True)),
            "generation": self.stores.store.generation,
            "indexes": self.stores.index_status(),
            "writer": {"queued": writer.queued, "running": _label(writer.running)},
            "compute": self.ingestion.compute_status(),
            "stores": self.stores.sizes(),
            "problems": problems,
            "unavailable": self.stores.store.unavailable(),
            "backup": last_backup(self.data_dir),
            **({"reembed": reembed} if reembed else {}),
            "encodings": self.stores.store.encodings(),
        }


def _writable(paths: Iterable[Path | str], access: Access) -> Iterable[Path | str]:
    """The paths, once each is known to lie where `access` may write (AccessDenied if not)."""
    if access.role == "admin" and access.everything:
        return paths
    paths = list(paths)
    for path in paths:
        if not access.may_write(str(resolved(path))):
            raise AccessDenied(f"{access.name} may not reindex {path}: ask an admin for a grant "
                               "as an editor of its folder")
    return paths


def _stored_turn(question: str, rewrite: Rewrite, result: dict[str, Any]) -> StoredTurn:
    """What is kept of a turn: the question, the query searched, the answer and the ids of
    the passages it cited (an answer's citations, else its results), best first."""
    if result.get("mode") == "agent" or "citations" in result:
        rows = result.get("citations") or []
    else:
        rows = result.get("results") or []
    cited: dict[int, int] = {}
    for row in rows:
        if row.get("chunk_id") is not None and int(row["chunk_id"]) not in cited:
            cited[int(row["chunk_id"])] = int(row.get("number") or 0)
    ids = list(cited)[:CITED]
    numbers = tuple(cited[i] for i in ids) if all(cited[i] for i in ids) else ()
    status = result.get("status") or ("found" if rows else "nothing found")
    return StoredTurn(question, rewrite.query, rewrite.method, str(result.get("mode") or ""),
                      result.get("answer"), str(status), tuple(ids), numbers)


def _passage(hit: Any, chunk_id: int, rank: int) -> dict[str, Any]:
    """A passage of a reopened turn, shaped like a result row (no score)."""
    row = result_row(hit, chunk_id, 0.0, rank)
    row.pop("score", None)
    return row


def _label(key: Any) -> str | None:
    """A writer task's key as text for status."""
    if key is None or isinstance(key, str):
        return key
    return str(key[0]) if isinstance(key, tuple) and key else str(key)

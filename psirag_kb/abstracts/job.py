"""The job that regenerates dirty abstracts bottom-up, offline or with Ollama, resumably."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from psirag_kb.abstracts.writers import KeywordAbstractor, LLMAbstractor
from psirag_kb.errors import LLMError, LLMUnavailable

if TYPE_CHECKING:
    from psirag_kb.config import Config
    from psirag_kb.ingest.embedding import Embedder
    from psirag_kb.storage.stores import Stores

log = logging.getLogger(__name__)

BATCH_NODES = 256
"""Nodes abstracted between two commits (a crash loses at most one batch)."""
BACKOFF_S = (30.0, 3600.0)
"""First and longest wait before retrying the LLM after a failure."""


class AbstractJob:
    """Regenerates the abstracts of dirty nodes, lowest layer first, committing per batch."""

    def __init__(self, config: Config, embedder: Embedder, stores: Stores) -> None:
        self.config = config
        self.stores = stores
        # phrases and abstracts are not worth an evaluation cache: embed them directly
        self.embedder = getattr(embedder, "inner", embedder)
        self.keywords = KeywordAbstractor(self.embedder)
        self.llm_abstractor: LLMAbstractor | None = None
        self.llm = None
        if config.llm.enabled:
            from psirag_kb.answer.llm import OllamaLLM

            self.llm = OllamaLLM(config.llm)
            self.llm_abstractor = LLMAbstractor(
                self.llm, config.llm.abstract_model, kind=config.tree.abstract_kind
            )
        self.last_run: float | None = None
        self.last_result: dict[str, Any] = {}
        self.last_error = ""
        self._failures = 0
        self._retry_at = 0.0

    def status(self) -> dict[str, Any]:
        """Dirty count, last run and errors, for `status`."""
        return {
            "dirty": self.stores.tree_index.view.dirty,
            "kind": self.config.tree.abstract_kind if self.llm else "keyword",
            "source": "ollama" if self.llm else "offline",
            "last_run": self.last_run,
            "last_result": self.last_result,
            "last_error": self.last_error,
        }

    def _llm_ready(self) -> bool:
        """Whether the LLM may be asked now (not inside a backoff after a failure)."""
        if self.llm is None or time.time() < self._retry_at:
            return False
        try:
            self.llm.check(self.config.llm.abstract_model)
        except LLMError as exc:
            self._fail(exc)
            return False
        return True

    def _fail(self, exc: LLMError) -> None:
        """Record an LLM failure and back off exponentially."""
        self._failures += 1
        first, longest = BACKOFF_S
        self._retry_at = time.time() + min(longest, first * 2 ** (self._failures - 1))
        self.last_error = str(exc)
        log.warning("abstract generation failed: %s", exc)

    def run(self, max_nodes: int | None = None) -> dict[str, Any]:
        """Regenerate dirty abstracts bottom-up; returns counts and seconds."""
        started = time.perf_counter()
        use_llm = self._llm_ready()
        view = self.stores.tree_index.view
        by_layer: dict[int, list[int]] = defaultdict(list)
        for node, info in view.nodes.items():
            if info.dirty:
                by_layer[info.layer].append(node)
        done = failed = 0
        for layer in sorted(by_layer):
            nodes = sorted(by_layer[layer])
            for start in range(0, len(nodes), BATCH_NODES):
                if max_nodes is not None and done >= max_nodes:
                    break
                batch = nodes[start:start + BATCH_NODES]
                made, errors = self._batch(batch, layer, use_llm)
                done += made
                failed += errors
                if errors and use_llm:
                    use_llm = False  # keep the rest for the retry after the backoff
        if done and not failed:
            self._failures = 0
            if use_llm:
                self.last_error = ""  # Ollama answered again: the old error is history
        self.last_run = time.time()
        self.last_result = {
            "regenerated": done, "failed": failed,
            "seconds": round(time.perf_counter() - started, 2),
        }
        return self.last_result

    def _batch(self, nodes: list[int], layer: int, use_llm: bool) -> tuple[int, int]:
        """Abstract one batch of same-layer nodes and commit them.

        Reading the children and writing the abstracts are writer tasks; generating the text
        (the LLM, or the offline extractor) happens outside, so writes go on meanwhile.
        """
        writer = self.stores.writer
        work = writer.call(lambda: self._read(nodes, layer, use_llm))
        if work is None:
            return 0, 0
        nodes, groups, vectors, shapes, keep_dirty = work
        texts: list[str | None]
        errors = 0
        if use_llm and self.llm_abstractor is not None:
            texts = []
            down = False
            for group in groups:
                if down:  # the server failed: the rest stay dirty for the retry after the backoff
                    texts.append(None)
                    continue
                try:
                    texts.append(self.llm_abstractor.abstract(group) if group else "")
                except LLMError as exc:
                    self._fail(exc)
                    texts.append(None)
                    errors += 1
                    down = isinstance(exc, LLMUnavailable)
        else:
            texts = list(self.keywords.abstract_many(groups, vectors))
        fresh = [t for t in texts if t]
        embedded = dict(zip(fresh, self.embedder.embed(fresh), strict=True)) if fresh else {}
        made = writer.call(lambda: self._write(nodes, texts, embedded, shapes, keep_dirty))
        return made, errors

    def _read(self, nodes: list[int], layer: int, use_llm: bool) -> tuple | None:
        """The children's texts (or abstracts) of the nodes still dirty (on the writer)."""
        live = self.stores.tree_index.live
        nodes = [n for n in nodes if n in live.children and n in live.dirty]
        shapes = {n: tuple(live.children[n]) for n in nodes}
        if layer == 1:
            leaf_ids = [-k for n in nodes for k in live.children[n]]
            hits = self.stores.store.hits(leaf_ids)
            groups = [[hits[-k].text for k in live.children[n] if -k in hits] for n in nodes]
            vectors = [live.vectors_of(live.children[n]) for n in nodes]
        else:
            groups = [[live.abstracts.get(k, "") for k in live.children[n]] for n in nodes]
            groups = [[t for t in group if t] for group in groups]
            vectors = None
        keep_dirty = {n for n in nodes if self.llm is not None and not use_llm}
        if keep_dirty:  # the LLM is down: offline keywords only where nothing exists yet
            selected = [i for i, n in enumerate(nodes) if n not in live.abstracts]
            nodes = [nodes[i] for i in selected]
            groups = [groups[i] for i in selected]
            vectors = None if vectors is None else [vectors[i] for i in selected]
        if not nodes:
            return None
        return nodes, groups, vectors, shapes, keep_dirty

    def _write(self, nodes: list[int], texts: list[str | None], embedded: dict[str, Any],
               shapes: dict[int, tuple[int, ...]], keep_dirty: set[int]) -> int:
        """Store the abstracts of nodes whose children did not change meanwhile (on the writer)."""
        stores = self.stores
        made = 0
        with stores.tree_edit():
            live = stores.tree_index.live
            for node, text in zip(nodes, texts, strict=True):
                if text is None or node not in live.children:
                    continue
                if tuple(live.children[node]) != shapes[node]:
                    continue  # changed meanwhile: still dirty, next run
                live.set_abstract(node, text, embedded.get(text))
                if node in keep_dirty:
                    live.dirty.add(node)
                made += 1
            with stores.store.transaction():
                stores.store.write_tree(live)
        return made

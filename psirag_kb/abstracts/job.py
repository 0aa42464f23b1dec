"""The job that regenerates dirty abstracts bottom-up, offline or with Ollama, resumably."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from psirag_kb.abstracts import covered, meaning
from psirag_kb.abstracts.labels import LABEL_RULES, Work, label_batch, offline_abstracts
from psirag_kb.abstracts.writers import KeywordAbstractor, LLMAbstractor
from psirag_kb.backoff import Backoff
from psirag_kb.errors import LLMError, LLMUnavailable, Ungrounded
from psirag_kb.llm.hosts import spread
from psirag_kb.tree import rows as tree_rows
from psirag_kb.tree.sample import spread_leaves

if TYPE_CHECKING:
    from psirag_kb.config import Config
    from psirag_kb.ingest.embedding import Embedder
    from psirag_kb.tree.stores import Stores

log = logging.getLogger(__name__)

BATCH_NODES = 256
"""Same-layer nodes whose children are read from the tree at a time."""
KEYWORD_NODES = 32
"""Nodes given to the offline extractor at once."""
COMMIT_EVERY_S = 2.0
"""Longest offline work held before a commit; each LLM abstract is committed at once."""
BACKOFF_S = (30.0, 3600.0)
"""First and longest wait before retrying the LLM after the server failed (unreachable, down)."""
NODE_BACKOFF_S = (300.0, 86400.0)
"""First and longest wait before asking again for one node whose reply was junk."""
LABELLER_KEY = "labeller"
"""The meta row naming who labelled the stored tree (`AbstractJob.labeller`)."""

OnProgress = Callable[[dict[str, Any]], None]


class _Stopped(Exception):
    """Raised between nodes once `AbstractJob.stop` was called."""


class _Yielded(Exception):
    """Raised between LLM abstracts when another caller waits for the job or `yield_to` says so."""


class Progress:
    """Nodes done of a run's dirty total, with rate and ETA; read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = False
        self.total = self.done = self.failed = self.skipped = 0
        self.started = 0.0

    def start(self, total: int) -> None:
        """A run begins with `total` nodes to go."""
        with self._lock:
            self.running, self.started = True, time.monotonic()
            self.total, self.done, self.failed, self.skipped = total, 0, 0, 0

    def advance(self, done: int = 0, failed: int = 0, skipped: int = 0) -> None:
        """Count nodes written, failed, or left for later (the LLM is down, the tree moved)."""
        with self._lock:
            self.done += done
            self.failed += failed
            self.skipped += skipped

    def stop(self) -> None:
        """The run ended (finished or interrupted)."""
        with self._lock:
            self.running = False

    def snapshot(self) -> dict[str, Any]:
        """{"running": false}, or the counts with nodes per second and seconds left."""
        with self._lock:
            if not self.running:
                return {"running": False}
            elapsed = max(time.monotonic() - self.started, 1e-6)
            handled = self.done + self.failed + self.skipped
            rate = handled / elapsed
            left = max(self.total - handled, 0)
            return {"running": True, "done": self.done, "total": self.total,
                    "failed": self.failed, "skipped": self.skipped,
                    "rate_per_s": round(rate, 3), "elapsed_s": round(elapsed, 1),
                    "eta_s": round(left / rate, 1) if handled else None}


class AbstractJob:
    """Regenerates the abstracts of dirty nodes, lowest layer first, committing as it goes:
    each LLM abstract at once, offline ones at least every COMMIT_EVERY_S seconds."""

    def __init__(self, config: Config, embedder: Embedder, stores: Stores) -> None:
        self.config = config
        self.stores = stores
        # phrases and abstracts are not worth an evaluation cache: embed them directly
        self.embedder = getattr(embedder, "inner", embedder)
        self.word_vectors = meaning.WordVectors(self.embedder.embed)
        """Label words embedded for the "meaning" labeller, the last few thousand kept."""
        self.keywords = KeywordAbstractor(self.embedder)
        self.llm_abstractor: LLMAbstractor | None = None
        self.llm = None
        if config.llm.enabled:
            from psirag_kb.llm.hosts import LLMPool

            self.llm = LLMPool(config.llm)
            self.llm_abstractor = LLMAbstractor(
                self.llm, config.llm.abstract_model, kind=config.tree.abstract_kind,
                grounding=config.llm.grounding)
        self.last_run: float | None = None
        self.last_result: dict[str, Any] = {}
        self.last_error = ""
        self.progress = Progress()
        self.on_progress: OnProgress | None = None
        """Called with the progress snapshot after every commit (a terminal's progress bar)."""
        self.refused = 0
        """LLM abstracts refused as ungrounded since the start (the offline one stayed)."""
        self.last_refusal = ""
        self.junk = 0
        """Unusable LLM replies (empty, wordless, wrong format) since the start: per node."""
        self.last_junk = ""
        self._node_retry: dict[int, tuple[int, float]] = {}
        """Per node whose reply was junk: its failures in a row and when to ask again."""
        self._backoff = Backoff(*BACKOFF_S)
        """The LLM's failures in a row and the wait after them."""
        self._retry_at = 0.0
        self._stopping = threading.Event()
        self._running = threading.Lock()
        self._waiting = 0
        self._count = threading.Lock()
        self._yield_to: Callable[[], bool] | None = None
        self._skip_backed_off = False
        self._mark: Any = None
        self._ended: float | None = None
        self._labelled_by: str | None = None
        """The stored tree's labeller, read from the meta table once."""
        stores.writer.call(self.adopt_labeller)

    def stop(self) -> None:
        """End a running regeneration after the node in hand (what it committed stays); later
        runs return at once. For a daemon stopping: call it before waiting for the job."""
        self._stopping.set()

    def _check_stop(self) -> None:
        """Raise _Stopped between two nodes when a stop was asked for."""
        if self._stopping.is_set():
            raise _Stopped

    def _between(self) -> None:
        """Raise between two LLM abstracts when asked to stop or give way."""
        self._check_stop()
        self._check_yield()

    def _check_yield(self) -> None:
        """Raise _Yielded between two LLM abstracts when a caller waits or `yield_to` asks."""
        if self._waiting or (self._yield_to is not None and self._yield_to()):
            raise _Yielded

    def status(self) -> dict[str, Any]:
        """Dirty count, the running job's progress, last run and errors, for `status`."""
        return {
            "dirty": self.stores.tree_index.view.dirty,
            "kind": self.config.tree.abstract_kind if self.llm else "keyword",
            "source": "ollama" if self.llm else "offline",
            **self._snapshot(),
            "last_run": self.last_run,
            "last_result": self.last_result,
            "last_error": self.last_error,
            "refused": self.refused,
            "last_refusal": self.last_refusal,
            "junk": self.junk,
            "last_junk": self.last_junk,
            "nodes_backed_off": self._nodes_waiting(),
        }

    def _snapshot(self) -> dict[str, Any]:
        """The progress, with each LLM host's rate over the current (or last) run."""
        snapshot = self.progress.snapshot()
        if self.llm is not None:
            snapshot["hosts"] = self.llm.report(self._mark, self._ended)
        return snapshot

    def llm_due(self) -> bool:
        """Whether an LLM is configured, not inside a backoff after a failure, and some dirty
        node is not waiting out its own backoff after a junk reply."""
        if self.llm is None or time.time() < self._retry_at:
            return False
        return self.stores.tree_index.view.dirty > self._nodes_waiting()

    def _nodes_waiting(self) -> int:
        """Nodes inside their own backoff after a junk reply (forgetting nodes gone since)."""
        nodes = self.stores.tree_index.view.nodes
        now = time.time()
        waiting = list(self._node_retry.items())  # a copy: the job's thread may add meanwhile
        for node, _ in waiting:
            if node not in nodes:
                self._node_retry.pop(node, None)
        return sum(at > now and node in nodes for node, (_, at) in waiting)

    def _node_due(self, node: int) -> bool:
        """Whether a node may be asked now (not inside its backoff after a junk reply)."""
        entry = self._node_retry.get(node)
        return entry is None or time.time() >= entry[1]

    def _junk(self, node: int, exc: LLMError) -> None:
        """Record a junk reply for one node and back that node off (the LLM goes on)."""
        failures = self._node_retry.get(node, (0, 0.0))[0] + 1
        self._node_retry[node] = (failures, time.time() + Backoff(*NODE_BACKOFF_S).delay(failures))
        self.junk += 1
        self.last_junk = self.last_error = str(exc)
        log.info("unusable LLM reply for node %d (asked again later): %s", node, exc)

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
        self._retry_at = time.time() + self._backoff.next_delay()
        self.last_error = str(exc)
        log.warning("abstract generation failed: %s", exc)

    def run(self, max_nodes: int | None = None, offline: bool = False,
            yield_to: Callable[[], bool] | None = None,
            skip_backed_off: bool = False) -> dict[str, Any]:
        """Regenerate dirty abstracts bottom-up; returns counts and seconds.

        `offline` writes keyword abstracts only, without asking the LLM; when an LLM is
        configured they go only where a node has none yet, and those nodes stay dirty for it.
        Runs never overlap: a caller waits for the run in progress, and an LLM run gives way
        between two nodes to a waiting caller, or whenever `yield_to()` is true.
        Whatever was committed before an interruption (an exception, Ctrl-C, the daemon
        stopping, giving way) stays: those nodes are clean and the rest stay dirty.
        `skip_backed_off` (the background refresher) leaves alone the nodes inside their own
        backoff after a junk reply; an explicit run asks every dirty node.
        """
        with self._lock_waiting():
            self._yield_to = yield_to
            self._skip_backed_off = skip_backed_off
            try:
                return self._run(max_nodes, offline)
            finally:
                self._yield_to = None
                self._skip_backed_off = False

    @contextlib.contextmanager
    def _lock_waiting(self) -> Iterator[None]:
        """Hold the run lock, counted as waiting (so an LLM run gives way) until it is ours."""
        with self._count:
            self._waiting += 1
        try:
            self._running.acquire()
        finally:
            with self._count:
                self._waiting -= 1
        try:
            yield
        finally:
            self._running.release()

    def _run(self, max_nodes: int | None, offline: bool) -> dict[str, Any]:
        """One regeneration run (the caller holds the run lock)."""
        started = time.perf_counter()
        refused = self.refused
        if self.stores.tree_index.view.dirty == 0:
            self.last_result = {"regenerated": 0, "failed": 0, "seconds": 0.0}
            return self.last_result
        use_llm = not offline and self._llm_ready()
        view = self.stores.tree_index.view
        by_layer: dict[int, list[int]] = defaultdict(list)
        for node, info in view.nodes.items():
            if info.dirty:
                by_layer[info.layer].append(node)
        total = sum(len(nodes) for nodes in by_layer.values())
        measured = use_llm  # per-host rates over this run
        if measured:
            assert self.llm is not None  # use_llm: _llm_ready() found an LLM
            self._mark, self._ended = self.llm.mark(), None
        self.progress.start(total if max_nodes is None else min(total, max_nodes))
        self._report()
        done = failed = 0
        finished = False
        try:
            for layer in sorted(by_layer):
                nodes = sorted(by_layer[layer])
                for start in range(0, len(nodes), BATCH_NODES):
                    if max_nodes is not None and done >= max_nodes:
                        break
                    batch = nodes[start:start + BATCH_NODES]
                    if max_nodes is not None:
                        batch = batch[:max_nodes - done]
                    self._check_stop()
                    made, errors = self._batch(batch, layer, use_llm)
                    done += made
                    failed += errors
                    if errors and use_llm:
                        use_llm = False  # keep the rest for the retry after the backoff
            finished = True
        except _Stopped:
            log.info("abstract regeneration stopped; the abstracts written so far are kept")
        except _Yielded:
            log.debug("abstract regeneration gave way; the abstracts written so far are kept")
        finally:
            self.progress.stop()
            if measured:
                self._ended = time.monotonic()
            self.last_run = time.time()
            self.last_result = {  # counted per commit: right after an interruption too
                "regenerated": self.progress.done, "failed": self.progress.failed,
                "refused": self.refused - refused,
                "seconds": round(time.perf_counter() - started, 2),
            }
            if not finished:
                self.last_result["interrupted"] = True
        if done and not failed:
            self._backoff.reset()
            if use_llm:
                self.last_error = ""  # Ollama answered again: the old error is history
        return self.last_result

    @property
    def labeller(self) -> str:
        """Who labels branches now: the configured offline method and the rules' revision."""
        return f"{self.config.tree.offline_labels}/{LABEL_RULES}"

    def labels_stale(self) -> bool:
        """Whether the stored tree was labelled by another labeller: an earlier release's
        rules, or another `[tree] offline_labels`."""
        view = self.stores.tree_index.view
        if view.root is None or view.root < 0 or self.stores.tree_missing:
            return False
        if self._labelled_by is None:
            self._labelled_by = self.stores.store.meta().get(LABELLER_KEY, "")
        return self._labelled_by != self.labeller

    def adopt_labeller(self) -> None:
        """Record today's labeller for a knowledge base with no chunks yet (writer thread):
        its first tree is labelled by it, so there is nothing to label again."""
        if not self.stores.tree_index.empty or self.stores.store.chunk_count():
            return  # a loaded tree has chunks: no count at every start
        labeller = self.labeller
        if self.stores.store.meta().get(LABELLER_KEY) != labeller:
            self.stores.store.set_meta_value(LABELLER_KEY, labeller)
        self._labelled_by = labeller

    def interim(self) -> dict[str, Any] | None:
        """While a first ingest runs, an interim tree over what it has committed, when due
        (`Stores.interim_tree`), with offline abstracts and labels, so that the map and the
        topics show something before it ends; the run's report, None when not due."""
        if not self.stores.interim_due() or not self.stores.writer.call(
                self.stores.interim_tree):
            return None
        return self.run(offline=True) | {"leaves": self.stores.tree_index.view.n_leaves}

    def relabel_if_stale(self) -> dict[str, Any]:
        """{"labels": the relabelling's report} when another labeller wrote the stored tree's
        labels, else {} (`maintain`)."""
        return {"labels": self.relabel()} if self.labels_stale() else {}

    def relabel(self) -> dict[str, Any]:
        """Label every branch again with today's labeller, keeping the abstracts (no LLM is
        asked): each node above layer 1, and the root, labels its children bottom-up,
        committing as it goes. The labeller is recorded once every node is done, so a pass
        that was stopped starts again."""
        with self._lock_waiting():
            return self._relabel()

    def _relabel(self) -> dict[str, Any]:
        """One relabelling pass (the caller holds the run lock)."""
        started = time.perf_counter()
        labeller = self.labeller
        view = self.stores.tree_index.view
        by_layer: dict[int, list[int]] = defaultdict(list)
        for node, info in view.nodes.items():
            if info.layer > 1 or node == view.root:
                by_layer[info.layer].append(node)
        self.progress.start(sum(len(nodes) for nodes in by_layer.values()))
        self._report()
        finished = False
        try:
            for layer in sorted(by_layer):
                nodes = sorted(by_layer[layer])
                for start in range(0, len(nodes), BATCH_NODES):
                    self._check_stop()
                    self._relabel_batch(nodes[start:start + BATCH_NODES], layer)
            self.stores.writer.call(
                lambda: self.stores.store.set_meta_value(LABELLER_KEY, labeller))
            self._labelled_by = labeller
            finished = True
        except _Stopped:
            log.info("relabelling stopped; the labels written so far are kept")
        finally:
            self.progress.stop()
        report: dict[str, Any] = {"relabelled": self.progress.done, "labeller": labeller,
                                  "seconds": round(time.perf_counter() - started, 2)}
        if not finished:
            report["interrupted"] = True
        return report

    def _relabel_batch(self, nodes: list[int], layer: int) -> None:
        """Label the children of a batch of same-layer nodes again and store the labels."""
        work = self.stores.writer.call(lambda: self._read(nodes, layer, False, every=True))
        if work is None:
            self.progress.advance(skipped=len(nodes))
            return
        labels = self._labels(work)
        made = self.stores.writer.call(lambda: self._write_labels(work, labels))
        self.progress.advance(done=made, skipped=len(nodes) - made)
        self._report()

    def _write_labels(self, work: Work, labels: dict[int, dict[int, str]]) -> int:
        """Store the labels a batch brings, a child given none losing its old one (writer);
        a node whose children changed meanwhile is dirty, and the abstracts run it causes
        labels its children with today's labeller."""
        stores = self.stores
        made = 0
        with stores.tree_edit():
            live = stores.tree_index.live
            for node in work.nodes:
                if node not in live.children or tuple(live.children[node]) != work.shapes[node]:
                    continue
                given = labels.get(node, {})
                for kid in live.children[node]:
                    if kid > 0:
                        live.set_label(kid, given.get(kid, ""))
                if node == live.root:
                    live.set_label(node, given.get(node, ""))
                made += 1
            with stores.store.transaction():
                tree_rows.write_tree(stores.store, live)
        return made

    def _report(self) -> None:
        """Hand the progress to the caller's callback, if any."""
        if self.on_progress is not None:
            self.on_progress(self._snapshot())

    def _batch(self, nodes: list[int], layer: int, use_llm: bool) -> tuple[int, int]:
        """Abstract a batch of same-layer nodes, committing as it goes; (written, failed).

        Reading the children and writing the abstracts are writer tasks; generating the text
        (the LLM, or the offline extractor) happens outside, so writes go on meanwhile.
        """
        work = self.stores.writer.call(lambda: self._read(nodes, layer, use_llm))
        if work is None:
            self.progress.advance(skipped=len(nodes))
            return 0, 0
        self.progress.advance(skipped=len(nodes) - len(work.nodes))
        labels = self._labels(work)
        if use_llm and self.llm_abstractor is not None:
            return self._with_llm(work, labels)
        return self._offline(work, labels, self._offline_writer(work)), 0

    def _labels(self, work: Work) -> dict[int, dict[int, str]]:
        """The labels a batch's abstracts bring, by the configured method ("keywords": none)."""
        method = self.config.tree.offline_labels
        store = self.stores.store

        def read(ids: Iterable[int]) -> dict[int, str]:
            return {cid: text for cid, (text, _) in store.texts(ids).items()}

        if method == "meaning":
            return meaning.label_batch(work, read, lambda ids: dict(zip(
                *store.present_vectors(np.asarray(ids, np.int64)), strict=True)),
                self.word_vectors)
        if method == "covered":
            return covered.label_batch(work, read)
        return label_batch(work) if method == "contrast" else {}

    def _offline_writer(self, work: Work) -> Callable[[slice], list[str]]:
        """The offline abstracts of a slice of a batch's nodes (labels or keyword lists)."""
        if self.config.tree.offline_labels in ("contrast", "covered", "meaning"):
            return lambda part: offline_abstracts(work, part)
        abstracts = work.layer > 1  # children of layer 1 are passages, above it abstracts
        counts = self.keywords.phrases_of(work.groups, abstracts)
        idf = self.keywords.idf_of(work.groups, counts=counts)  # rarity over the batch, as one call
        return lambda part: self.keywords.abstract_many(
            work.groups[part], None, idf, abstracts, lexical=True, counts=counts[part])

    def _offline(self, work: Work, labels: dict[int, dict[int, str]],
                 write: Callable[[slice], list[str]]) -> int:
        """Write offline abstracts KEYWORD_NODES nodes at a time, committing at least every
        COMMIT_EVERY_S seconds; an interruption keeps what was written."""
        made = 0
        pending: list[tuple[int, str | None]] = []
        since = time.monotonic()
        try:
            for start in range(0, len(work.nodes), KEYWORD_NODES):
                self._check_stop()
                part = slice(start, start + KEYWORD_NODES)
                pending += zip(work.nodes[part], write(part), strict=True)
                if time.monotonic() - since >= COMMIT_EVERY_S:
                    ready, pending, since = pending, [], time.monotonic()
                    made += self._commit(ready, work, labels)
        except BaseException:  # an interruption keeps the offline work done so far
            if pending:
                with contextlib.suppress(Exception):
                    self._commit(pending, work, labels)
            raise
        if pending:
            made += self._commit(pending, work, labels)
        return made

    def _with_llm(self, work: Work, labels: dict[int, dict[int, str]]) -> tuple[int, int]:
        """Ask the LLM node by node, committing each abstract (and the offline labels that
        go with it) as soon as it is written."""
        assert self.llm_abstractor is not None and self.llm is not None
        made = errors = 0
        nodes = work.nodes
        ask = self.llm_abstractor.abstract
        contexts = work.contexts or [[] for _ in nodes]
        offline: Callable[[slice], list[str]] | None = None
        asks = spread(lambda item: ask(item[1], item[2]) if item[1] else "",  # as many as the
                      zip(nodes, work.groups, contexts, strict=True),  # hosts take at once
                      self.llm.width, self._between)
        for number, ((node, _, _), text, exc) in enumerate(asks):
            if isinstance(exc, Ungrounded):
                # the offline abstract stays; the node is clean, so it is asked again only
                # when its children change (no endless retries, no backoff of the whole LLM)
                self.refused += 1
                self.last_refusal = str(exc)
                log.info("LLM abstract refused, keeping the offline one: %s", exc)
                offline = offline or self._offline_writer(work)
                made += self._commit([(node, offline(slice(number, number + 1))[0])], work,
                                     labels)
                continue
            if exc is not None and not isinstance(exc, LLMUnavailable):
                # a junk reply (empty, wordless, wrong format) fails this node only: it stays
                # dirty (with an offline abstract) and is asked again after its own backoff
                self._junk(node, exc)
                self.progress.advance(failed=1)
                offline = offline or self._offline_writer(work)
                self._keep_offline(node, offline(slice(number, number + 1))[0], work, labels)
                self._report()
                continue
            if exc is not None:  # every host failed (down, unreachable): the rest wait
                self._fail(exc)
                errors += 1
                self.progress.advance(failed=1, skipped=len(nodes) - number - 1)
                break
            self._node_retry.pop(node, None)
            made += self._commit([(node, text or "")], work, labels)
        self._report()
        return made, errors

    def _keep_offline(self, node: int, text: str, work: Work,
                      labels: dict[int, dict[int, str]]) -> None:
        """Give a node that failed with the LLM an offline abstract when it has none yet,
        leaving it dirty for the LLM (not counted as done)."""
        if not text or self.stores.writer.call(
                lambda: node in self.stores.tree_index.live.abstracts):
            return
        guided = self.config.tree.node_vectors == "abstract"
        embedded = dict(zip([text], self.embedder.embed([text]), strict=True)) if guided else {}
        work.keep_dirty.add(node)
        self.stores.writer.call(lambda: self._write([node], [text], embedded, work, labels))

    def _commit(self, texts: list[tuple[int, str | None]], work: Work,
                labels: dict[int, dict[int, str]]) -> int:
        """Embed fresh abstracts (when tree search is guided by them), store them in one
        transaction and count the progress."""
        guided = self.config.tree.node_vectors == "abstract"
        fresh = list(dict.fromkeys(t for _, t in texts if t)) if guided else []
        embedded = dict(zip(fresh, self.embedder.embed(fresh), strict=True)) if fresh else {}
        nodes = [n for n, _ in texts]
        made = self.stores.writer.call(
            lambda: self._write(nodes, [t for _, t in texts], embedded, work, labels))
        self.progress.advance(done=made, skipped=len(texts) - made)
        self._report()
        return made

    def _read(self, nodes: list[int], layer: int, use_llm: bool, every: bool = False
              ) -> Work | None:
        """The children's texts (or abstracts) of the nodes still dirty, or of all of them
        (`every`: relabelling), on the writer."""
        live = self.stores.tree_index.live
        view = self.stores.tree_index.view
        nodes = [n for n in nodes if n in live.children and (every or n in live.dirty)
                 and (not use_llm or not self._skip_backed_off or self._node_due(n))]
        shapes = {n: tuple(live.children[n]) for n in nodes}
        contexts: list[list[str]] = []
        kids: list[list[int]] = []
        sizes: list[list[int]] = []
        samples: list[list[list[int]]] = []
        if layer == 1:
            found = self.stores.store.texts(-k for n in nodes for k in live.children[n])
            rows = [[found[-k] for k in live.children[n] if -k in found] for n in nodes]
            groups = [[text for text, _ in row] for row in rows]
            contexts = [[context for _, context in row] for row in rows]
        else:
            kids = [[k for k in live.children[n] if live.abstracts.get(k)] for n in nodes]
            groups = [[live.abstracts[k] for k in row] for row in kids]
            sizes = [[view.nodes[k].leaves if k in view.nodes else 1 for k in row]
                     for row in kids]
            if self.config.tree.offline_labels in ("covered", "meaning"):
                samples = [self._samples(row) for row in kids]
        keep_dirty = {n for n in nodes if self.llm is not None and not use_llm and not every}
        if keep_dirty:  # the LLM is down: offline keywords only where nothing exists yet
            selected = [i for i, n in enumerate(nodes) if n not in live.abstracts]
            nodes = [nodes[i] for i in selected]
            groups = [groups[i] for i in selected]
            contexts = [contexts[i] for i in selected] if contexts else contexts
            kids = [kids[i] for i in selected] if kids else kids
            sizes = [sizes[i] for i in selected] if sizes else sizes
            samples = [samples[i] for i in selected] if samples else samples
        if not nodes:
            return None
        return Work(nodes, groups, shapes, keep_dirty, layer, contexts, kids, sizes, live.root,
                    samples)

    def _samples(self, kids: list[int]) -> list[list[int]]:
        """Chunk ids spread over each child's subtree, for its label's coverage (writer)."""
        live = self.stores.tree_index.live
        nodes = self.stores.tree_index.view.nodes
        size = covered.sample_size(len(kids))
        return [[-key for key in spread_leaves(
            kid, size, live.children.__getitem__,
            lambda n: nodes[n].leaves if n in nodes else 1)] for kid in kids]

    def _write(self, nodes: list[int], texts: list[str | None], embedded: dict[str, Any],
               work: Work, labels: dict[int, dict[int, str]]) -> int:
        """Store the abstracts of nodes whose children did not change meanwhile, and the labels
        that go with them (the children's, the root's own), on the writer."""
        shapes, keep_dirty = work.shapes, work.keep_dirty
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
                for labelled, label in labels.get(node, {}).items():
                    if labelled in live.children:
                        live.set_label(labelled, label)
                if node in keep_dirty:
                    live.dirty.add(node)
                made += 1
            with stores.store.transaction():
                tree_rows.write_tree(stores.store, live)
        return made

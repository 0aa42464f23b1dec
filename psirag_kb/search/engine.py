"""The query engine: one person's question in, ranked result rows from what they may read out.

It owns question embedding, the allowed scope (an Access's grants intersected with the paths a
query asks for), ranking per retriever, fusion, result rows and the merging of adjacent hits.
Multi-round retrieval, auto mode, summaries and the agent are built on it; the KnowledgeBase
facade composes them. Reads take no lock a write holds (see `kb.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from psirag_kb.access import OWNER, Access
from psirag_kb.config import Config
from psirag_kb.errors import ChunkNotFound, KBError
from psirag_kb.ingest.embedding import QueryEmbedder
from psirag_kb.search.adjacent import MARGIN, MAX_DEPTH, merge_adjacent
from psirag_kb.search.contents import below_their_text
from psirag_kb.search.copies import fold_copies
from psirag_kb.search.fusion import certain_hits, fuse, named_hits
from psirag_kb.search.multiround import auto_rank, multi_round
from psirag_kb.search.overview import coverage_leaves, is_global, overview
from psirag_kb.search.phrases import no_match_note, phrase_scope, required
from psirag_kb.search.rerank import Reranker
from psirag_kb.search.retrieval import EVAL_MODES, MODES, rrf
from psirag_kb.search.rows import result_rows
from psirag_kb.search.topicmap import topic_map
from psirag_kb.search.visibility import Visibility
from psirag_kb.storage.records import Ranking
from psirag_kb.storage.scope import Scope, normalise
from psirag_kb.tree.index import CANDIDATES
from psirag_kb.tree.stores import OverStores, Stores
from psirag_kb.tree.view import node_view, path_view

SUMMARY_LEAVES = 18
"""Passages a summary draws from the tree."""
SCOPE_CACHE = 64
"""Scopes of people with grants kept between queries (until the store's next commit), so their
chunk ids are looked up once per commit, not once per query."""

Within = Sequence[str | Path] | Scope
"""The folders and files a query is limited to (or the scope they were resolved to)."""


class QueryEngine(OverStores):
    """Ranked retrieval over the stores for one person at a time (an `Access`)."""

    def __init__(self, config: Config, stores: Stores, query_embedder: QueryEmbedder,
                 reranker: Reranker | None = None) -> None:
        self.config = config
        self.stores = stores
        self.query_embedder = query_embedder
        self.reranker = reranker
        self._scopes: dict[tuple[Access, tuple[str, ...]], tuple[int, Scope]] = {}
        self._scopes_lock = threading.Lock()
        self._visible: dict[Access, Visibility] = {}

    # -- the stores (by name: OverStores) ---------------------------------------------------

    @property
    def dim(self) -> int:
        """Dimension of the vectors."""
        return self.stores.dim

    # -- questions and scopes ---------------------------------------------------------------

    def embed_query(self, text: str) -> np.ndarray:
        """The query's unit vector (float32)."""
        return self.query_embedder.embed_one(text)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of several queries in one batched call."""
        return self.query_embedder.embed_many(texts)

    def model_backlog(self) -> int:
        """Other questions' texts queued for the query model right now."""
        return self.query_embedder.backlog()

    def scope_of(self, within: Within | None, access: Access = OWNER) -> Scope | None:
        """What a query may search: the paths asked for (all when None) intersected with the
        person's grants, with the ids of the chunks below them (one DuckDB lookup, made when a
        retriever first needs them). None means everything: the owner asking for no paths.

        A Scope made for this person is returned as it is; an empty one finds nothing.
        """
        if isinstance(within, Scope):
            if access.everything or within.access == access:
                return within
            return self._scope(access.within(within.paths), access)
        if within is None:
            return None if access.everything else self._scope(access.grants or (), access)
        if isinstance(within, (str, Path)):  # one path, not a sequence of characters
            within = [within]
        return self._scope(access.within(normalise(within)), access)

    def _scope(self, paths: tuple[str, ...], access: Access) -> Scope:
        """A scope over these normalised paths for one person: the owner's made afresh, as
        `--in` always was; a person's with grants kept until the next commit."""
        if access.everything:
            return Scope(paths, lambda: self.store.scope_ids(paths), access)
        key, generation = (access, paths), self.store.commits
        with self._scopes_lock:
            kept = self._scopes.get(key)
            if kept is not None and kept[0] == generation:
                return kept[1]
            scope = Scope(paths, lambda: self.store.scope_ids(paths), access)
            self._scopes.pop(key, None)
            self._scopes[key] = (generation, scope)
            while len(self._scopes) > SCOPE_CACHE:
                self._scopes.pop(next(iter(self._scopes)))
            return scope

    # -- ranking ----------------------------------------------------------------------------

    def rank(self, text: str, mode: str, k: int, within: Within | None = None,
             vector: np.ndarray | None = None, access: Access = OWNER,
             phrases: list[str] | None = None) -> Ranking:
        """`_rank` with the embedding model held (a reembed's switch waits for it)."""
        with self.stores.same_model():
            return self._rank(text, mode, k, within, vector, access, phrases)

    def _rank(self, text: str, mode: str, k: int, within: Within | None = None,
              vector: np.ndarray | None = None, access: Access = OWNER,
              phrases: list[str] | None = None) -> Ranking:
        """Chunk ids for a query in one mode, best first (a stale index is left out); every
        retriever searches only the scope (see `scope_of`) before taking its top k, and only
        chunks holding the `phrases` that must occur (by default the text's own)."""
        if mode not in EVAL_MODES:
            raise KBError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        scope = self.scope_of(within, access)
        paths = None if scope is None else scope.paths
        retrieval = self.config.retrieval
        per = max(k, retrieval.k_per_retriever)
        sparse_ok, dense_ok = "bm25" not in self.stale, "dense" not in self.stale
        tree_ok = not self.stores.tree_missing
        if mode == "tree" and not tree_ok:  # BM25 and the dense index stand in for it
            mode = "hybrid"
        # "quoted text" must occur: BM25 filters by the phrases, the others rank among the
        # chunks holding them (auto and agent pass the text on to each round's rank)
        if phrases is None:
            phrases = required(text)
        if not sparse_ok or mode in ("auto", "agent"):
            phrases = []
        if mode == "sparse" and sparse_ok:  # BM25 filters by the paths: no id lookup
            return Ranking(*self.sparse.search(text, k, paths, phrases))
        if scope is not None and len(scope) == 0:
            return Ranking.empty()
        if scope is not None and self._whole(scope):  # every chunk readable: no filter needed
            ranking = self.rank(text, mode, k, None, vector)
            keep = scope.contains(ranking.ids)  # but never a chunk committed since, unchecked
            return Ranking(ranking.ids[keep], ranking.scores[keep])
        if mode == "agent":  # retrieval of agent mode without an LLM
            return multi_round(self, text, k, within=scope, vector=vector).ranking
        if mode == "auto":
            return auto_rank(self, text, k, scope, vector)
        if phrases:
            scope = phrase_scope(self.sparse.search, text, phrases, paths,
                                 OWNER if scope is None else scope.access)
            if len(scope) == 0:
                return Ranking.empty()
        query = self.embed_query(text) if vector is None else vector
        if mode in ("dense", "sparse"):  # sparse lands here only while BM25 is rebuilt
            if dense_ok:
                return Ranking(*self._near(query, k, scope))
            return self.tree_search(query, k, scope=scope)
        signals = retrieval.certain_first
        bm25 = (Ranking(*self.sparse.search(text, per, paths, phrases))
                if sparse_ok and (mode != "tree" or signals) else None)
        certain = None if bm25 is None else certain_hits(
            text, bm25, signals, retrieval.certain_margin, self.sparse.phrase_hits, paths)
        named = named_hits(text, self.sparse.phrase_hits, paths) if (
            bm25 is not None and "phrase" in signals) else None
        if mode == "tree":  # one list: BM25's certain hits first, BM25 is not fused
            return fuse([self.tree_search(query, k, scope=scope)], retrieval.rrf_k, k, certain,
                        named)
        rankings = [] if bm25 is None else [bm25]
        near = None  # one ANN search serves the dense ranking and the tree's candidates
        if dense_ok and (mode != "hybrid" or retrieval.fuse_dense or not tree_ok):
            near = self._near(query, max(per, CANDIDATES), scope)
            rankings.append(Ranking(near[0][:per], near[1][:per]))
        if (mode == "hybrid" and tree_ok) or not rankings:
            rankings.insert(0, self.tree_search(query, per, near, scope))
        if retrieval.fusion == "rerank" and self.reranker is not None:
            candidates = rrf(rankings, retrieval.rrf_k).ids
            hits = self.store.hits(candidates.tolist())
            candidates = np.array([i for i in candidates.tolist() if i in hits], dtype=np.int64)
            # the cross-encoder reads each candidate's text: it judges exact words itself
            return self.reranker.rerank(text, candidates, [hits[i].text for i in candidates], k)
        return fuse(rankings, retrieval.rrf_k, k, certain, named)

    def _whole(self, scope: Scope) -> bool:
        """Whether a person's scope holds every chunk (one count, kept with the scope)."""
        if scope.access.everything:
            return False  # the owner's `--in` is searched as it always was
        if scope.whole is None:
            scope.whole = len(scope) == self.store.chunk_count()
        return scope.whole

    def _near(self, query: np.ndarray, k: int,
              scope: Scope | None) -> tuple[np.ndarray, np.ndarray]:
        """The dense index's top-k (ids, cosines), within the scope when there is one."""
        if scope is None:
            return self.dense.search(query, k)
        return self.stores.neighbours_within(query, k, scope)

    def tree_search(self, query: np.ndarray, k: int,
                    near: tuple[np.ndarray, np.ndarray] | None = None,
                    scope: Scope | None = None) -> Ranking:
        """Tree retrieval (empty before anything is indexed); `near` are the ANN index's
        candidates when the caller already has them, and the leaves come from the scope."""
        retrieval = self.config.retrieval
        if retrieval.tree_search == "collapsed":
            return self.tree_index.search_collapsed(
                query, retrieval.parent_weight, k, self.config.tree.node_vectors == "abstract",
                near, scope,
            )
        return self.tree_index.search(query, retrieval.tree_k, k, scope)

    def sources(self, ids: np.ndarray) -> list[str]:
        """The source (path or corpus id) of each chunk id, in order."""
        hits = self.store.hits(ids.tolist())
        return [hits[i].source for i in ids.tolist() if i in hits]

    # -- results ----------------------------------------------------------------------------

    def query(self, text: str, mode: str | None = None, k: int | None = None,
              summarize: bool = False, within: Within | None = None,
              access: Access = OWNER) -> dict[str, Any]:
        """`_query` with the embedding model held: a question is embedded and searched with
        one model, never across a reembed's switch."""
        with self.stores.same_model():
            return self._query(text, mode, k, summarize, within, access)

    def _query(self, text: str, mode: str | None = None, k: int | None = None,
               summarize: bool = False, within: Within | None = None,
               access: Access = OWNER) -> dict[str, Any]:
        """Ranked results as the JSON shape the CLI and API return (agent mode and the
        summary's text are composed above, see `kb.py`).

        With `summarize`, 18 leaves (or k) come from the tree alone, in corpus order. With
        `within` (folders or files), only chunks of files under them, and "in" lists them.
        Otherwise, with [retrieval] merge_adjacent, chunks that touch in one file are one result
        (see `merge_adjacent`), and every result lists its chunks in `chunk_ids`.
        """
        text = text.strip()
        if not text:
            raise KBError("the query is empty")
        mode = "summarize" if summarize else (mode or self.config.retrieval.default_mode)
        scope = self.scope_of(within, access)
        merge = self.config.retrieval.merge_adjacent and not summarize
        note = self.tree_note() if mode in ("tree", "summarize") else None
        shown: list[dict[str, Any]] | None = None
        if summarize and note is None and is_global(text):  # the whole collection, a folder
            visible = self.tree_visibility(scope)
            shown = overview(self.tree_index.view, visible)
            results = self._coverage_passages(k or SUMMARY_LEAVES, visible, shown)
        elif summarize:
            results = self._summary_passages(text, k or SUMMARY_LEAVES, scope, note is None)
        elif merge:
            results = self._merged(text, mode, k or self.config.retrieval.k, scope)
        else:
            ranking = self.rank(text, mode, k or self.config.retrieval.k, scope)
            hits = self.store.hits(ranking.ids.tolist())
            results = self._folded([row | {"chunk_ids": [row["chunk_id"]]} for row in
                                    result_rows(below_their_text(ranking, hits, text), hits)])
        result: dict[str, Any] = {"query": text, "mode": mode, "results": results}
        if shown is not None:
            result["overview"] = shown
        if within is not None:
            result["in"] = list(asked(within))
        if self.stale:
            result["degraded"] = sorted(self.stale)
        if not results and (phrases := required(text)):
            note = no_match_note(phrases) if note is None else f"{note}; {no_match_note(phrases)}"
        if note is not None:
            result["note"] = note
        return result

    def _summary_passages(self, text: str, k: int, scope: Scope | None,
                          tree: bool) -> list[dict[str, Any]]:
        """k leaves from the tree (or, without one, the flat retrievers' best), in corpus
        order."""
        if tree:
            ranking = self.tree_search(self.embed_query(text), k, scope=scope)
        else:  # no tree to draw the passages from: the flat retrievers' best ones
            ranking = self.rank(text, "hybrid", k, scope)
        hits = self.store.hits(ranking.ids.tolist())
        position = {i: (hits[i].path, hits[i].ordinal) for i in hits}
        order = sorted(range(len(ranking.ids)),
                       key=lambda j: position.get(int(ranking.ids[j]), ("", 0)))
        return result_rows(Ranking(ranking.ids[order], ranking.scores[order]), hits)

    def tree_visibility(self, scope: Scope | None) -> Visibility | None:
        """What of the tree a scope (a person's grants, the folders asked for) covers; None
        for everything."""
        return None if scope is None else Visibility(self.tree_index.view, scope)

    def _coverage_passages(self, k: int, visible: Visibility | None,
                           shown: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """k leaves covering the tree's top branches, in corpus order; each entry of `shown`
        gains its leaves (`chunk_ids`) and the files ("folder/name") they come from."""
        picked = coverage_leaves(self.tree_index.view, k, visible)
        ids = [i for leaves in picked.values() for i in leaves]
        hits = self.store.hits(ids)
        for entry in shown:
            files = (Path(hits[i].path or hits[i].source) for i in picked.get(entry["node"], [])
                     if i in hits)
            entry["files"] = list(dict.fromkeys(f"{p.parent.name}/{p.name}" for p in files))
            entry["chunk_ids"] = [i for i in picked.get(entry["node"], []) if i in hits]
        order = np.array(sorted((i for i in ids if i in hits),
                                key=lambda i: (hits[i].path, hits[i].ordinal)), np.int64)
        return result_rows(Ranking(order, np.ones(len(order), np.float32)), hits)

    def _merged(self, text: str, mode: str, k: int, scope: Scope | None) -> list[dict[str, Any]]:
        """k results of touching hits merged (see `merge_adjacent`), contents listings below
        the text they point to and copies in other files folded into one result (see
        `below_their_text`, `fold_copies`): ranks MARGIN x k chunks, and twice as many again
        (up to MAX_DEPTH x k) while merging and folding leave fewer than k places."""
        vector = None if mode == "sparse" else self.embed_query(text)
        depth = k * MARGIN
        while True:
            ranking = self.rank(text, mode, depth, scope, vector=vector)
            hits = self.store.hits(ranking.ids.tolist())
            rows = result_rows(below_their_text(ranking, hits, text), hits)
            results = self._folded(merge_adjacent(rows, hits, len(rows)))[:k]
            if len(results) >= k or len(ranking.ids) < depth or depth >= k * MAX_DEPTH:
                return results
            depth *= 2

    def _folded(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows with copies folded, unless [retrieval] fold_copies is off."""
        return fold_copies(rows) if self.config.retrieval.fold_copies else rows

    def tree_note(self) -> str | None:
        """What a tree-mode or summarize query says while the tree is missing or being
        rebuilt (None while it is there)."""
        state = self.stores.tree_state
        if state["state"] == "ok":
            return None
        why = f" ({state['reason']})" if state.get("reason") else ""
        if state["state"] == "rebuilding":
            return (f"the tree is rebuilding{why}: these results come from BM25 and the dense "
                    "index until it is back")
        return (f"the tree is missing{why}: these results come from BM25 and the dense index "
                "until it is rebuilt (by the daemon, `ingest` or `maintain`)")

    # -- browsing and fetching --------------------------------------------------------------

    def visibility(self, access: Access) -> Visibility | None:
        """What of the published tree this person may see (None: everything); kept while the
        view and the person's scope last, so browsing counts their leaves once per commit."""
        scope = self.scope_of(None, access)
        if scope is None:
            return None
        view = self.tree_index.view
        with self._scopes_lock:
            kept = self._visible.get(access)
            if kept is not None and kept.view is view and kept.scope is scope:
                return kept
            visible = self._visible[access] = Visibility(view, scope)
            if len(self._visible) > SCOPE_CACHE:
                self._visible.pop(next(iter(self._visible)))
            return visible

    def node(self, node_id: int | None = None, access: Access = OWNER) -> dict[str, Any]:
        """One abstract node (the root by default): its abstract and its children; a node
        whose subtree holds anything the person may not read is not found."""
        visible = self.visibility(access)
        view = self.tree_index.view if visible is None else visible.view
        return self._noted(node_view(view, node_id, self.store.hits, visible))

    def topic_map(self, node_id: int | None = None, access: Access = OWNER) -> dict[str, Any]:
        """A node, its children and theirs with sizes and sampled files (`topic_map`), only
        what the person may see, as `node`."""
        visible = self.visibility(access)
        view = self.tree_index.view if visible is None else visible.view
        return self._noted(topic_map(view, node_id, self.store.hits, self.store.files_of,
                                     visible))

    def _noted(self, found: dict[str, Any]) -> dict[str, Any]:
        """A node as browsed, with a note while the tree is a first ingest's interim one."""
        if self.stores.interim:
            found["note"] = ("an interim tree over the passages indexed so far: the first ingest "
                             "is still running, and the whole tree is built when it ends")
        return found

    def path_of(self, chunk_id: int, access: Access = OWNER) -> list[dict[str, Any]]:
        """The abstract nodes above a chunk's leaf, root first: id, layer, abstract, dirty
        (only those the person may see)."""
        visible = self.visibility(access)
        view = self.tree_index.view if visible is None else visible.view
        return path_view(view, chunk_id, visible)

    def status_within(self, access: Access) -> dict[str, Any]:
        """What `status` shows a person with grants: their files, chunks and problems, the
        tree as they see it, and whether each index is usable (no paths or sizes of the rest,
        nor the store's generation, which counts every write, theirs or not)."""
        scope = self.scope_of(None, access)
        assert scope is not None  # a person with grants
        tree = Visibility(self.tree_index.view, scope).status()
        problems = [{"path": r.path, "state": r.state, "reason": r.reason}
                    for r in self.store.problems(within=scope.paths)]
        indexes = {name: {"state": entry["state"]}
                   for name, entry in self.stores.index_status().items()}
        return {"data_dir": "", "tree": tree | {"state": self.stores.tree_state["state"]},
                "files": self.store.state_counts(scope.paths), "chunks": len(scope),
                "indexes": indexes, "stores": {},
                "problems": problems, "unavailable": self.store.unavailable(within=scope.paths)}

    def chunk(self, chunk_id: int, neighbours: int = 0,
              access: Access = OWNER) -> dict[str, Any]:
        """One chunk's source, lines, location and full text, with up to `neighbours` chunks
        either side of it in its file (`offset` -1 is the one just before); a chunk the person
        may not read is not found, exactly as one that does not exist."""
        if neighbours < 0:
            raise KBError(f"neighbours must be 0 or more, not {neighbours}")
        rows = self.store.around(chunk_id, neighbours) if 0 < chunk_id < 2**63 else []
        hit = next((row for row in rows if row.id == chunk_id), None)
        if hit is None or not (access.everything or (
                hit.origin == "file" and access.may_read(hit.path))):
            raise ChunkNotFound(f"no chunk {chunk_id}: it was never indexed or its file has "
                                "changed since; search again for current ids")
        lines = {row.id: [row.line_first, row.line_last] if row.line_first is not None else None
                 for row in rows}
        return {
            "chunk_id": hit.id, "source": hit.source, "path": hit.path,
            "lines": lines[hit.id], "location": hit.location, "text": hit.text,
            "neighbours": [{"chunk_id": row.id, "lines": lines[row.id], "location": row.location,
                            "text": row.text, "offset": row.ordinal - hit.ordinal}
                           for row in rows if row.id != hit.id],
        }

    def readable(self, ids: Sequence[int], access: Access = OWNER) -> dict[int, Any]:
        """The hits of these chunk ids that the person may read now (one lookup); a chunk
        gone since, or outside their grants, is left out alike."""
        hits = self.store.hits([int(i) for i in ids if 0 < int(i) < 2**63])
        if access.everything:
            return hits
        return {i: hit for i, hit in hits.items()
                if hit.origin == "file" and access.may_read(hit.path)}

    def original(self, chunk_id: int, access: Access = OWNER) -> dict[str, Any]:
        """The indexed file a chunk comes from ({"path", "source"}), for a download; a chunk the
        person may not read, or one from a corpus record, is not found."""
        rows = self.store.around(chunk_id, 0) if 0 < chunk_id < 2**63 else []
        hit = next((row for row in rows if row.id == chunk_id), None)
        if hit is None or hit.origin != "file" or not access.may_read(hit.path):
            raise ChunkNotFound(f"no file for chunk {chunk_id}: it was never indexed from a "
                                "file you may read, or its file has changed since")
        return {"path": hit.path, "source": hit.source}


def asked(within: Within) -> tuple[str, ...]:
    """The normalised paths a query asked for (what its result's "in" lists)."""
    if isinstance(within, Scope):
        return within.paths
    if isinstance(within, (str, Path)):
        within = [within]
    return normalise(within)

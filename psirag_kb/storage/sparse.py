"""Tantivy BM25 index over chunk text, derived from DuckDB and rebuilt when stale."""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import tantivy

from psirag_kb.errors import StoreError
from psirag_kb.storage.scripts import ANALYZER, segment
from psirag_kb.storage.titles import title_key, title_keys
from psirag_kb.text import BM25_STOP_WORDS

log = logging.getLogger(__name__)

_SYNTAX = re.compile(r"[+\-&|!(){}\[\]^\"~*?:\\/<>=']")
_OPERATORS = re.compile(r"\b(AND|OR|NOT|IN|TO)\b")


def plain_query(text: str) -> str:
    """Turn user text into a query of plain words (no Tantivy syntax, no stopwords unless the
    query has nothing else)."""
    text = _OPERATORS.sub(lambda m: m.group(0).lower(), _SYNTAX.sub(" ", text)).strip()
    words = text.split()
    kept = [w for w in words if w.lower() not in BM25_STOP_WORDS]
    return " ".join(kept or words)


def phrase_words(text: str) -> str:
    """The words of a phrase as the query parser takes them between quotes (no syntax)."""
    return " ".join(_SYNTAX.sub(" ", text).split())


Document = tuple[int, str, str | None]
"""(chunk id, text, path of its file or None for a corpus record) as the index takes it."""


def path_terms(path: str) -> list[str]:
    """A file's path and every folder above it: the `scope` terms a scoped query matches (a
    folder is one term, and `/a/b` is not a term of `/a/bc.md`)."""
    terms = [path]
    while (parent := os.path.dirname(path)) != path:
        terms.append(parent)
        path = parent
    return terms


def _schema() -> tantivy.Schema:
    """id (fast integer) + text (English stemming, CJK runs as bigrams: `segment`) + scope
    (the file's path and its folders, untokenised, indexed only) + title (the chunk's
    document titles as `title_keys`, untokenised, indexed only)."""
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("id", stored=True, indexed=True, fast=True)
    builder.add_text_field("text", stored=False, tokenizer_name="en_stem")
    builder.add_text_field("scope", stored=False, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("title", stored=False, tokenizer_name="raw", index_option="basic")
    return builder.build()


def _document(chunk_id: int, text: str, path: str | None) -> tantivy.Document:
    """The index's document for a chunk (a corpus record has no path, so no scope)."""
    fields: dict = {"id": int(chunk_id), "text": segment(text)}
    if path is not None:
        fields["scope"] = path_terms(path)
    titles = title_keys(text, path)
    if titles:
        fields["title"] = titles
    return tantivy.Document(**fields)


class SparseIndex:
    """A BM25 index whose generation file says which DuckDB generation it reflects.

    The writer thread changes it; any thread searches the searcher of the last commit.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._generation_file = self.folder / "GENERATION"
        self._analyzer_file = self.folder / "ANALYZER"
        self._open()
        self.identity: str | None = None
        """The identity of the database the index was built from (None before it was
        recorded); written with the generation."""
        self._generation = self._read_generation()

    def _open(self, retry: bool = True) -> None:
        """Open (or create) the index and take its single writer; a damaged one starts empty."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.schema = _schema()
        try:
            self.index = tantivy.Index(self.schema, path=str(self.folder))
            # a search opens every segment's postings: a missing .pos file fails only here
            self.index.searcher().search(self.index.parse_query("probe", ["text"]), 1)
            self.writer = self.index.writer(heap_size=50_000_000, num_threads=1)
            self.searcher = self.index.searcher()
        except (ValueError, OSError) as exc:
            if "LockBusy" in str(exc):  # not "lock": meta.json holds "docstore_blocksize"
                raise StoreError(
                    f"the BM25 index {self.folder} is in use by another process"
                ) from exc
            if not retry:
                raise StoreError(f"the BM25 index {self.folder} cannot be created: {exc}") from exc
            # derived data: drop it, and the generation mismatch rebuilds it from DuckDB
            if "schema does not match" in str(exc):
                log.warning("BM25 index %s was written by an older version (no path scopes "
                            "or titles); rebuilding it", self.folder)
            else:
                log.warning("BM25 index %s is damaged (%s); rebuilding it", self.folder, exc)
            self.destroy(self.folder)
            self._open(retry=False)

    def _read_generation(self) -> int:
        """The generation in the GENERATION file ("generation identity"), and its identity;
        -1 (stale: rebuilt from DuckDB) when the ANALYZER file names another tokenisation."""
        try:
            parts = self._generation_file.read_text().split()
            generation = int(parts[0])
        except (OSError, ValueError, IndexError):
            return -1
        self.identity = parts[1] if len(parts) > 1 else None
        analyzer = self.analyzer()
        if generation >= 0 and analyzer != ANALYZER:
            log.warning("BM25 index %s was built with the tokenisation %s, this version uses "
                        "%s (CJK, kana and hangul as bigrams); rebuilding it", self.folder,
                        analyzer or "of an older release", ANALYZER)
            return -1
        return generation

    def analyzer(self) -> str | None:
        """The tokenisation the index's documents were built with (None: an older release)."""
        try:
            return self._analyzer_file.read_text().strip() or None
        except OSError:
            return None

    @property
    def generation(self) -> int:
        """The DuckDB generation this index was last synchronised to (-1 if unknown or stale)."""
        return self._generation

    def _set_generation(self, generation: int) -> None:
        tmp = self._generation_file.with_suffix(".tmp")
        tmp.write_text(f"{generation} {self.identity}" if self.identity else str(generation))
        tmp.replace(self._generation_file)
        self._generation = generation

    def mark_stale(self) -> None:
        """Drop uncommitted changes and record that the index must be rebuilt."""
        self._generation = -1
        try:
            self.writer.rollback()
        except (ValueError, OSError, AttributeError):
            pass
        try:
            self._set_generation(-1)
        except OSError:  # the disk may be full: memory says stale, and start-up compares counts
            log.warning("could not mark the BM25 index stale on disk", exc_info=True)

    def _publish(self) -> None:
        """Make the last commit visible to searches."""
        self.index.reload()
        self.searcher = self.index.searcher()

    def apply(
        self, generation: int, added: Iterable[Document], removed: Iterable[int]
    ) -> None:
        """Delete, then add documents (the change that made `generation`), commit, record it;
        a chunk both removed and added is re-indexed (a renamed file's chunks).

        Raises ValueError when the index is not at the generation before: it missed a change.
        """
        if self._generation != generation - 1:
            raise ValueError(f"the BM25 index is at generation {self._generation}, the change "
                             f"makes {generation}: it missed a change")
        for chunk_id in removed:
            self.writer.delete_documents_by_term("id", int(chunk_id))
        for chunk_id, text, path in added:
            self.writer.add_document(_document(chunk_id, text, path))
        self.writer.commit()
        self._publish()
        self._set_generation(generation)

    def rebuild(self, generation: int, batches: Iterable[list[Document]],
                identity: str | None = None) -> None:
        """Drop everything and index all chunks again (searches see the old index until done);
        with `identity`, record that database's identity."""
        self._set_generation(-1)
        if identity is not None:
            self.identity = identity
        self.writer.delete_all_documents()
        self.writer.commit()
        self._analyzer_file.write_text(ANALYZER)
        for batch in batches:
            for chunk_id, text, path in batch:
                self.writer.add_document(_document(chunk_id, text, path))
        self.writer.commit()
        self._publish()
        self._set_generation(generation)

    def search(self, text: str, k: int, within: Sequence[str] | None = None,
               phrases: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray]:
        """Top-k chunk ids and BM25 scores for a query; with `within` (normalised absolute
        paths), only among chunks of files that are, or lie below, one of them; with
        `phrases`, only among chunks holding every one of them (scored by the words alone)."""
        words = plain_query(text)
        if not words or (within is not None and not within):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        query, _errors = self.index.parse_query_lenient(segment(words), ["text"])
        filters = [self._phrase(p) for p in phrases]
        if within is not None:
            filters.append(tantivy.Query.term_set_query(self.schema, "scope", list(within)))
        return self._hits(query, filters, k)

    def phrase_hits(self, text: str, k: int, within: Sequence[str] | None = None,
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Up to k chunks holding the whole text as one phrase (stopwords and the header
        included, words stemmed as indexed), best first, with their BM25 scores."""
        if not phrase_words(text) or (within is not None and not within):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        filters = [] if within is None else [
            tantivy.Query.term_set_query(self.schema, "scope", list(within))]
        return self._hits(self._phrase(text), filters, k)

    def titled(self, names: Sequence[str], text: str, k: int,
               within: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Up to k chunks of the documents one of the names titles (`title_keys`: one term
        lookup each), ranked by the BM25 of `text` among them, with those scores."""
        keys = list(dict.fromkeys(key for key in map(title_key, names) if key))
        if not keys or (within is not None and not within):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        titled = tantivy.Query.term_set_query(self.schema, "title", keys)
        parts = [(tantivy.Occur.Must, tantivy.Query.const_score_query(titled, 0.0))]
        words = plain_query(text)
        if words:
            query, _errors = self.index.parse_query_lenient(segment(words), ["text"])
            parts.append((tantivy.Occur.Should, query))
        filters = [] if within is None else [
            tantivy.Query.term_set_query(self.schema, "scope", list(within))]
        return self._hits(tantivy.Query.boolean_query(parts), filters, k)

    def _phrase(self, text: str) -> tantivy.Query:
        """The query for chunks holding the text's words in a row."""
        words = phrase_words(text)
        if not words:  # no word at all (punctuation): matches everything
            return tantivy.Query.all_query()
        query, _errors = self.index.parse_query_lenient(f'"{segment(words)}"', ["text"])
        return query

    def _hits(self, query: tantivy.Query, filters: list[tantivy.Query],
              k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ids and scores of a query that must also match each filter (score 0)."""
        if filters:  # filters score 0: BM25 scores stay as they are
            query = tantivy.Query.boolean_query([
                (tantivy.Occur.Must, query),
                *((tantivy.Occur.Must, tantivy.Query.const_score_query(f, 0.0))
                  for f in filters),
            ])
        searcher = self.searcher
        hits = searcher.search(query, k, count=False).hits  # no total count: WAND may skip
        ids = np.array([searcher.doc(addr)["id"][0] for _, addr in hits], dtype=np.int64)
        scores = np.array([score for score, _ in hits], dtype=np.float32)
        return ids, scores

    def adopt(self, identity: str) -> None:
        """Record the identity of the database an index that predates identities matches."""
        self.identity = identity
        self._set_generation(self._generation)

    def count(self) -> int:
        """Number of documents."""
        return int(self.searcher.num_docs)

    def close(self) -> None:
        """Release the writer lock."""
        writer, self.writer = self.writer, None  # type: ignore[assignment]  # closed
        if writer is not None:
            writer.wait_merging_threads()

    @staticmethod
    def destroy(folder: Path) -> None:
        """Delete an index folder (to rebuild it from scratch)."""
        shutil.rmtree(folder, ignore_errors=True)

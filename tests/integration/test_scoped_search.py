"""Scoped search (`within`): real files, the real model, DuckDB, Tantivy and hnswlib.

The data make a post-filter fail: `volcanoes/` holds 120 chunks that match the question far
better than the 8 of `hiking/` (more than any retriever's candidate list of 100), and the
sibling file `hikingtrip.md` is the best match of all while `/…/hiking` is a string prefix of
its path. A scoped query must still fill k from `hiking/` alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import tantivy

from psirag_kb.answer.agent import RetrieveAndAnswer
from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.llm.client import OllamaLLM
from psirag_kb.search.retrieval import EVAL_MODES
from psirag_kb.storage.dense import DenseIndex
from psirag_kb.storage.scope import exact_top
from psirag_kb.storage.sparse import SparseIndex, path_terms
from psirag_kb.tree import stores as stores_module

QUESTION = "volcano eruption with lava flows"
K = 5
PLACES = ["the harbour", "the old mill", "the northern farms", "the pass", "the monastery",
          "the salt flats", "the river delta", "the pine forest", "the ridge", "the vineyards",
          "the airport", "the fishing village"]
LAKES = ["blue lake", "alpine meadow", "glacier lake", "birch grove", "old quarry",
         "mountain hut", "river ford", "waterfall"]


def write_corpus(root: Path) -> None:
    """120 strong matches in volcanoes/, 8 weak ones in hiking/, the best one beside hiking/."""
    (root / "volcanoes").mkdir(parents=True)
    (root / "hiking").mkdir()
    for i in range(120):
        (root / "volcanoes" / f"v{i:03d}.md").write_text(
            f"Volcano eruption report {i}. The volcano erupted again near {PLACES[i % 12]}; "
            "lava flows and lava fountains poured from the volcano, and the eruption sent ash "
            "over the valley.\n")
    for i, lake in enumerate(LAKES):
        (root / "hiking" / f"h{i}.md").write_text(
            f"Hiking diary, day {i + 1}. We walked past an old volcano on the way to the "
            f"{lake} and stopped for lunch by the water.\n")
    (root / "hikingtrip.md").write_text(
        "Volcano eruption with lava flows: the volcano eruption sent lava flows down.\n")


def in_folder(result: dict, folder: Path) -> bool:
    return Path(result["path"]).parent == folder


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scoped") / "docs"
    write_corpus(root)
    return root


def _open(tmp_path_factory, docs: Path, minilm, config: Config | None = None):
    config = (config or Config()).with_data_dir(tmp_path_factory.mktemp("data") / "data")
    config = config.replace("retrieval", fold_copies=False)  # the reports share a template
    kb = KnowledgeBase(config, embedder=minilm)
    kb.ingest([docs])
    return kb


@pytest.fixture(scope="module")
def kb(tmp_path_factory, docs, minilm) -> KnowledgeBase:
    kb = _open(tmp_path_factory, docs, minilm)
    yield kb
    kb.close()


@pytest.fixture(scope="module")
def beam_kb(tmp_path_factory, docs, minilm) -> KnowledgeBase:
    """Beam tree search with one node kept per layer over small nodes: the unscoped beam
    never reaches hiking/."""
    config = Config().replace("retrieval", tree_search="beam", tree_k=1)
    config = config.replace("tree", max_children=8)
    kb = _open(tmp_path_factory, docs, minilm, config)
    yield kb
    kb.close()


# -- every mode fills k from the scope -----------------------------------------------------

@pytest.mark.parametrize("mode", EVAL_MODES)
def test_scoped_query_fills_k_from_the_scope(kb, docs, mode):
    hiking = docs / "hiking"
    everywhere = kb.query(QUESTION, mode=mode, k=K)["results"]
    assert len(everywhere) == K and not any(in_folder(r, hiking) for r in everywhere)
    assert str(docs / "hikingtrip.md") in {r["path"] for r in everywhere}
    result = kb.query(QUESTION, mode=mode, k=K, within=[hiking])
    assert result["in"] == [str(hiking)]
    assert len(result["results"]) == K
    assert all(in_folder(r, hiking) for r in result["results"])
    assert [r["rank"] for r in result["results"]] == list(range(1, K + 1))


@pytest.mark.parametrize("mode", ["tree", "hybrid"])
def test_scoped_beam_search_keeps_descending_to_k_leaves(beam_kb, docs, mode):
    hiking = docs / "hiking"
    query = beam_kb.embed_query(QUESTION)
    unscoped = beam_kb.stores.tree_index.search(query, 1, K)
    paths = {h.path for h in beam_kb.stores.store.hits(unscoped.ids.tolist()).values()}
    assert paths and not any(Path(p).parent == hiking for p in paths)  # a post-filter: none
    result = beam_kb.query(QUESTION, mode=mode, k=K, within=[hiking])
    assert len(result["results"]) == K and all(in_folder(r, hiking) for r in result["results"])
    every = beam_kb.query(QUESTION, mode="tree", k=50, within=[hiking])["results"]
    assert len(every) == len(LAKES)  # past the beam until every leaf of the scope is found


@pytest.mark.parametrize("search", ["exact", "filtered"])
def test_scoped_dense_is_the_exact_top_k_of_the_scope(kb, docs, search, monkeypatch):
    if search == "filtered":  # hnswlib's filter, as for a scope too large to read
        monkeypatch.setattr(stores_module, "exact_scope", lambda m, n: False)
    hiking = docs / "hiking"
    scope = kb.scope_of([hiking])
    assert len(scope) == len(LAKES)
    expected, _ = exact_top(scope.ids, kb.stores.store.vectors(scope.ids),
                            kb.embed_query(QUESTION), K)
    found = kb.rank(QUESTION, "dense", K, within=[hiking])
    assert found.ids.tolist() == expected.tolist()


def test_summarize_and_agent_stay_in_the_scope(kb, docs):
    hiking = docs / "hiking"
    summary = kb.query(QUESTION, summarize=True, within=[hiking])
    assert summary["in"] == [str(hiking)] and summary["status"] == "no_llm"
    assert sorted(r["path"] for r in summary["results"]) == sorted(
        str(hiking / f"h{i}.md") for i in range(len(LAKES)))  # all 8 of 18, in corpus order
    assert {c for node in summary["abstracts"] for c in node["chunk_ids"]} == {
        r["chunk_id"] for r in summary["results"]}
    answer = kb.query(QUESTION, mode="agent", k=K, within=[hiking])
    assert answer["mode"] == "agent" and answer["status"] == "no_llm"
    assert answer["in"] == [str(hiking)]
    assert len(answer["results"]) == K and all(in_folder(r, hiking) for r in answer["results"])
    passages = [p for step in answer["steps"] for p in step["passages"]]
    assert passages and all(Path(p["source"]).parent == hiking for p in passages)
    steps: list[dict] = []
    direct = kb.answer(QUESTION, K, steps.append, within=[str(hiking) + "/"])
    assert direct["in"] == [str(hiking)] and steps
    assert all(in_folder(r, hiking) for r in direct["results"])


def test_the_llm_agent_retrieves_in_the_scope_every_round(kb, docs, fake_ollama):
    hiking = docs / "hiking"
    config = Config().replace("llm", enabled=True, host=fake_ollama.url, timeout_s=10.0)
    agent = RetrieveAndAnswer(kb.engine, OllamaLLM(config.llm), "llama3.1:8b", within=[hiking],
                              grounding=False)  # a placeholder answer
    fake_ollama.script("Thought: nothing yet.\nRetrieve: the crater the trail passed near",
                       "Thought: [2] mentions it.\nAnswer: the hike passed a volcano [2]")
    answer = agent.run(QUESTION, k=K, hops=2)
    assert answer.status == "answered" and len(answer.steps) == 2
    prompts = " ".join(m["content"] for chat in fake_ollama.chats
                       for m in chat.body["messages"] if m["role"] == "user")
    assert "Hiking diary" in prompts and "Volcano eruption" not in prompts
    assert all(Path(p["source"]).parent == hiking for step in answer.steps
               for p in step["passages"])
    assert all(Path(c["path"]).parent == hiking for c in answer.citations)


@pytest.mark.parametrize("mode", EVAL_MODES)
def test_file_scopes_and_several_paths(kb, docs, mode):
    one = docs / "hiking" / "h3.md"
    found = kb.query(QUESTION, mode=mode, k=K, within=[one])["results"]
    assert [r["path"] for r in found] == [str(one)]
    two = [docs / "hiking" / "h3.md", docs / "volcanoes" / "v007.md"]
    found = kb.query(QUESTION, mode=mode, k=K, within=two)["results"]
    assert sorted(r["path"] for r in found) == sorted(map(str, two))
    best = kb.query(QUESTION, mode=mode, k=K, within=[docs / "hiking", docs / "hikingtrip.md"])
    assert best["results"][0]["path"] == str(docs / "hikingtrip.md")
    assert all(in_folder(r, docs / "hiking") for r in best["results"][1:])


@pytest.mark.parametrize("mode", [*EVAL_MODES, "summarize"])
def test_empty_or_unknown_scope_gives_no_results(kb, docs, mode):
    options = {"summarize": True} if mode == "summarize" else {"mode": mode}
    for within, shown in (([], []), ([docs / "nowhere"], [str(docs / "nowhere")])):
        result = kb.query(QUESTION, k=K, within=within, **options)
        assert result["results"] == [] and result["in"] == shown


@pytest.mark.parametrize("mode", EVAL_MODES)
def test_unscoped_results_are_unchanged_by_a_scope_over_everything(kb, docs, mode):
    everywhere = kb.query(QUESTION, mode=mode, k=K)
    assert "in" not in everywhere
    whole = kb.query(QUESTION, mode=mode, k=K, within=[docs.parent])
    assert [r["chunk_id"] for r in whole["results"]] == [
        r["chunk_id"] for r in everywhere["results"]]
    assert [r["score"] for r in whole["results"]] == pytest.approx(
        [r["score"] for r in everywhere["results"]], rel=1e-5)


def test_scope_survives_a_stale_dense_index(kb, docs):
    hiking = docs / "hiking"
    kb.stores.stale["dense"] = {"since": 0.0, "attempts": 0, "retry_at": float("inf")}
    try:
        for mode in ("dense", "hybrid", "tree"):
            found = kb.query(QUESTION, mode=mode, k=K, within=[hiking])["results"]
            assert len(found) == K and all(in_folder(r, hiking) for r in found)
    finally:
        del kb.stores.stale["dense"]


# -- the stores on their own ---------------------------------------------------------------

def test_sparse_scope_terms_leave_bm25_scores_alone(tmp_path):
    docs = [(1, "lava lava volcano", "/a/b/one.md"), (2, "volcano lava", "/a/bc.md"),
            (3, "volcano", "/a/b/deep/two.md"), (4, "lava volcano volcano", None)]
    index = SparseIndex(tmp_path / "new")
    index.apply(0, docs, [])
    old = tantivy.SchemaBuilder()
    old.add_integer_field("id", stored=True, indexed=True, fast=True)
    old.add_text_field("text", stored=False, tokenizer_name="en_stem")
    (tmp_path / "old").mkdir()
    plain = tantivy.Index(old.build(), path=str(tmp_path / "old"))
    writer = plain.writer(heap_size=50_000_000, num_threads=1)
    for chunk_id, text, _ in docs:
        writer.add_document(tantivy.Document(id=chunk_id, text=text))
    writer.commit()
    plain.reload()
    searcher = plain.searcher()
    hits = searcher.search(plain.parse_query("volcano lava", ["text"]), 10).hits
    before = {searcher.doc(addr)["id"][0]: score for score, addr in hits}
    ids, scores = index.search("volcano lava", 10)
    assert dict(zip(ids.tolist(), scores.tolist(), strict=True)) == pytest.approx(before)
    ids, scores = index.search("volcano lava", 10, ["/a/b"])
    assert sorted(ids.tolist()) == [1, 3]  # not /a/bc.md, not the corpus record
    assert scores.tolist() == pytest.approx([before[i] for i in ids.tolist()])
    assert index.search("volcano", 10, ["/a/bc.md"])[0].tolist() == [2]
    assert sorted(index.search("volcano", 10, ["/"])[0].tolist()) == [1, 2, 3]
    assert len(index.search("volcano", 10, [])[0]) == 0
    assert path_terms("/a/b/c.md") == ["/a/b/c.md", "/a/b", "/a", "/"]
    index.close()


def test_dense_filter_returns_allowed_ids_only(tmp_path):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((3000, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(1, 3001, dtype=np.int64)
    index = DenseIndex(tmp_path / "dense", 32)
    index.rebuild(1, ids, vectors)
    query = vectors[0]
    labels, _ = index.search(query, 10)
    raw, _ = index.index.knn_query(query.reshape(1, -1), k=10)
    assert labels.tolist() == raw[0].tolist()  # unscoped: hnswlib as it was
    allowed = np.sort(rng.choice(ids, 300, replace=False))
    found, scores = index.search(query, 10, set(allowed.tolist()))
    exact, best = exact_top(allowed, vectors[allowed - 1], query, 10)
    assert set(found.tolist()) <= set(allowed.tolist()) and len(found) == 10
    assert len(set(found.tolist()) & set(exact.tolist())) >= 9
    assert len(index.search(query, 10, set())[0]) == 0


# -- what changes the scope of stored chunks -----------------------------------------------

def _small(root: Path) -> None:
    for folder in ("x_y", "xzy"):  # `_` would be a LIKE wildcard: x_y/ is not xzy/
        (root / folder).mkdir(parents=True)
        for i in range(3):
            (root / folder / f"n{i}.md").write_text(
                f"Notes {i} from {folder}: the volcano and the lava field.\n")


def test_an_old_sparse_index_without_scopes_is_rebuilt_at_open(config, minilm, tmp_path):
    _small(tmp_path / "docs")
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([tmp_path / "docs"])
        generation, chunks = kb.stores.store.generation, kb.stores.store.chunk_count()
        texts = [(i, t) for batch in kb.stores.store.all_texts() for i, t, _ in batch]
    folder = config.data_dir / "bm25"  # what the previous version left: id + text, in sync
    shutil.rmtree(folder)
    folder.mkdir()
    old = tantivy.SchemaBuilder()
    old.add_integer_field("id", stored=True, indexed=True, fast=True)
    old.add_text_field("text", stored=False, tokenizer_name="en_stem")
    index = tantivy.Index(old.build(), path=str(folder))
    writer = index.writer(heap_size=50_000_000, num_threads=1)
    for chunk_id, text in texts:
        writer.add_document(tantivy.Document(id=chunk_id, text=text))
    writer.commit()
    writer.wait_merging_threads()
    del writer, index
    (folder / "GENERATION").write_text(str(generation))
    with KnowledgeBase(config, embedder=minilm) as kb:
        assert kb.stores.sparse.count() == chunks and kb.stores.sparse.generation == generation
        found = kb.query("volcano lava", mode="sparse", k=10, within=[tmp_path / "docs/x_y"])
        assert sorted(Path(r["path"]).name for r in found["results"]) == [
            "n0.md", "n1.md", "n2.md"]
        assert all(in_folder(r, tmp_path / "docs/x_y") for r in found["results"])


def test_a_renamed_file_moves_to_its_new_scope(config, minilm, tmp_path):
    docs = tmp_path / "docs"
    _small(docs)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([docs])
        assert kb.rename(docs / "xzy/n0.md", docs / "x_y/moved.md")
        assert not kb.stores.stale and kb.stores.sparse.generation == kb.stores.store.generation
        for mode in ("sparse", "dense", "hybrid"):
            inside = kb.query("volcano lava", mode=mode, k=10, within=[docs / "x_y"])
            names = sorted(Path(r["path"]).name for r in inside["results"])
            assert names == ["moved.md", "n0.md", "n1.md", "n2.md"]
            old = kb.query("volcano lava", mode=mode, k=10, within=[docs / "xzy"])
            assert sorted(Path(r["path"]).name for r in old["results"]) == ["n1.md", "n2.md"]

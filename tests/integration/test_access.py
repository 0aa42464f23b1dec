"""Grants enforced inside retrieval, the tree, fetch and status: real files, the real model,
DuckDB, Tantivy and hnswlib.

`eng/` holds 120 chunks that match the question far better than the 8 of `hr/` (more than any
retriever's candidate list), every one carrying the marker KRAKNOVA; `hr/` carries ZEPHYRINE.
Each hr/ diary has a twin of the same name in eng/ that differs only by the marker, so the tree
pairs them under abstract nodes whose keyword abstracts mix both folders (they name Zephyrine):
a person granted one folder must see neither the other folder's passages, paths, counts nor
those abstracts, yet still get k results from their own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psirag_kb.access import Access
from psirag_kb.config import Config
from psirag_kb.errors import AccessDenied, ChunkNotFound, NodeNotFound
from psirag_kb.kb import KnowledgeBase
from psirag_kb.search.retrieval import EVAL_MODES

QUESTION = "volcano eruption with lava flows"
DIARY = "hiking diary: walking past an old volcano to the lake"
K = 5
ENG, HR = "kraknova", "zephyrine"
LAKES = ["blue lake", "alpine meadow", "glacier lake", "birch grove", "old quarry",
         "mountain hut", "river ford", "waterfall"]
MODES = [*EVAL_MODES, "summarize"]


def write_corpus(root: Path) -> None:
    """120 strong matches in eng/, 8 weak ones in hr/, and one broken file in each."""
    (root / "eng").mkdir(parents=True)
    (root / "hr").mkdir()
    for i in range(120):
        (root / "eng" / f"v{i:03d}.md").write_text(
            f"Kraknova volcano eruption report {i}: at vent {i} the kraknova volcano erupted "
            f"again; lava flow {i} and lava fountain {i} poured from the volcano, kraknova ash "
            f"{i} over the valley.\n")  # a number every few words: no report copies another
    for i, lake in enumerate(LAKES):
        for folder, marker in (("hr", "Zephyrine"), ("eng", "Kraknova")):
            (root / folder / f"day{i}.md").write_text(
                f"Hiking diary, day {i + 1}, written by {marker}. We walked past an old volcano "
                f"on the way to the {lake}, stopped for lunch by the water at the {lake}, "
                f"counted the birds over the {lake} and slept in a tent beside the {lake} "
                "until the rain came down the mountain in the early morning.\n")
    (root / "eng" / f"broken-{ENG}.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    (root / "hr" / f"broken-{HR}.pdf").write_bytes(b"%PDF-1.4 not really a pdf")


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("access") / "docs"
    write_corpus(root)
    return root


@pytest.fixture(scope="module")
def kb(tmp_path_factory, docs, minilm) -> KnowledgeBase:
    config = Config().with_data_dir(tmp_path_factory.mktemp("data") / "data")
    kb = KnowledgeBase(config, embedder=minilm)
    kb.ingest([docs])
    kb.regenerate_abstracts(offline=True)
    yield kb
    kb.close()


@pytest.fixture(scope="module")
def people(docs) -> dict[str, Access]:
    return {"hr": Access("ann", "reader", (str(docs / "hr"),)),
            "eng": Access("bob", "reader", (str(docs / "eng"),)),
            "nobody": Access("nil", "reader", ())}


def seen(result: object) -> str:
    """Everything a person would receive, as one lowercase string."""
    return json.dumps(result).lower()


def ask(kb: KnowledgeBase, mode: str, **options) -> dict:
    if mode == "summarize":
        return kb.query(QUESTION, k=K, summarize=True, **options)
    return kb.query(QUESTION, mode=mode, k=K, **options)


def test_the_data_would_leak_without_grants(kb, docs):
    """The owner's top hits all lie in eng/, and the diaries' abstracts mix both folders:
    scoping alone (`within`) still hands a summary of eng/ the words of hr/."""
    for mode in EVAL_MODES:
        top = kb.query(QUESTION, mode=mode, k=K)["results"]
        assert len(top) == K and all("/eng/v" in r["path"] for r in top), mode
    scoped = kb.query(DIARY, summarize=True, within=[docs / "eng"])
    assert HR not in seen(scoped["results"]) and HR in seen(scoped["abstracts"])
    assert ENG in seen(kb.status())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("who, mine, theirs", [("hr", "hr", ENG), ("eng", "eng", HR)])
def test_every_mode_fills_k_from_the_grants_alone(kb, docs, people, mode, who, mine, theirs):
    result = ask(kb, mode, access=people[who])
    assert theirs not in seen(result)
    paths = [r["path"] for r in result["results"]]
    assert paths and all(Path(p).parent == docs / mine for p in paths)
    if mode != "summarize":  # a summary takes every leaf it finds (18), here all 8 of hr/
        assert len(paths) == K
    assert "in" not in result


@pytest.mark.parametrize("mode", ["summarize", "agent", "tree"])
def test_abstracts_that_mix_folders_never_reach_a_reader(kb, people, mode):
    result = kb.query(DIARY, k=K, **({"summarize": True} if mode == "summarize" else
                                      {"mode": mode}), access=people["eng"])
    assert result["results"] and HR not in seen(result)
    if mode == "summarize":  # their own abstracts stay: those over eng/ alone
        owner = kb.query(QUESTION, summarize=True, access=people["eng"])
        assert owner["abstracts"] and ENG in seen(owner["abstracts"])


@pytest.mark.parametrize("mode", MODES)
def test_grants_intersect_the_paths_asked_for(kb, docs, people, mode):
    hr = people["hr"]
    wide = ask(kb, mode, access=hr, within=[docs])
    assert wide["in"] == [str(docs)] and ENG not in seen(wide["results"])
    assert wide["results"] and all("/hr/" in r["path"] for r in wide["results"])
    one = docs / "hr" / "day3.md"
    assert [r["path"] for r in ask(kb, mode, access=hr, within=[one])["results"]] == [str(one)]
    outside = ask(kb, mode, access=hr, within=[docs / "eng"])
    assert outside["results"] == [] and ENG not in seen(outside["results"])


@pytest.mark.parametrize("mode", MODES)
def test_no_grant_reads_nothing(kb, docs, people, mode):
    for within in (None, [docs]):
        result = ask(kb, mode, access=people["nobody"], within=within)
        assert result["results"] == [] and ENG not in seen(result) and HR not in seen(result)


def test_the_llm_agent_sees_only_readable_passages(kb, people, fake_ollama):
    owner_config = kb.config
    kb.config = kb.config.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=10.0,
                                  grounding=False)  # a placeholder answer
    try:
        fake_ollama.script("Thought: nothing yet.\nRetrieve: kraknova lava flows erupting",
                           "Thought: [2] mentions it.\nAnswer: the hike passed a volcano [2]")
        answer = kb.query(QUESTION, mode="agent", k=K, access=people["hr"])
    finally:
        kb.config = owner_config
    assert answer["status"] == "answered" and len(answer["steps"]) == 2
    prompts = " ".join(m["content"] for chat in fake_ollama.chats
                       for m in chat.body["messages"] if m["role"] == "user").lower()
    assert HR in prompts and ENG not in prompts.replace("kraknova lava flows erupting", "")
    assert all("/hr/" in c["path"] for c in answer["citations"])


def test_fetch_outside_the_grants_is_not_found(kb, people):
    owner = kb.query(QUESTION, mode="dense", k=1)["results"][0]
    eng_id = owner["chunk_id"]
    assert kb.chunk(eng_id)["text"] == owner["text"]
    missing = 10**9
    with pytest.raises(ChunkNotFound) as absent:
        kb.chunk(missing)
    for who in ("hr", "nobody"):
        with pytest.raises(ChunkNotFound) as hidden:
            kb.chunk(eng_id, neighbours=2, access=people[who])
        assert str(hidden.value) == str(absent.value).replace(str(missing), str(eng_id))
    assert kb.chunk(eng_id, access=people["eng"])["chunk_id"] == eng_id
    hr_id = kb.query(QUESTION, mode="dense", k=1, access=people["hr"])["results"][0]["chunk_id"]
    assert HR in kb.chunk(hr_id, neighbours=1, access=people["hr"])["text"].lower()


def browse(kb: KnowledgeBase, access: Access) -> tuple[list[dict], list[str]]:
    """Every node a person can open from their root, and the sources of every leaf below."""
    nodes, sources, todo = [], [], [None]
    while todo:
        node = kb.node(todo.pop(), access=access)
        nodes.append(node)
        sources += [c["source"] for c in node["children"] if c["kind"] == "leaf"]
        todo += [c["id"] for c in node["children"] if c["kind"] == "node"]
    return nodes, sources


def test_browse_shows_only_wholly_readable_nodes(kb, docs, people):
    root = kb.node()
    assert root["id"] > 0 and root["leaves"] == 136
    hr = kb.node(access=people["hr"])  # the real root mixes folders: a virtual one
    assert hr["id"] == 0 and hr["abstract"] == "" and hr["leaves"] == len(LAKES)
    nodes, sources = browse(kb, people["hr"])
    assert ENG not in seen(nodes) and sorted(sources) == sorted(
        str(docs / "hr" / f"day{i}.md") for i in range(len(LAKES)))
    nodes, sources = browse(kb, people["eng"])
    assert HR not in seen(nodes) and len(sources) == 128
    with pytest.raises(NodeNotFound) as hidden:
        kb.node(root["id"], access=people["hr"])
    with pytest.raises(NodeNotFound) as absent:
        kb.node(10**9)
    assert str(hidden.value) == str(absent.value).replace(str(10**9), str(root["id"]))
    assert kb.node(access=people["nobody"])["children"] == []
    twin = kb.query(DIARY, mode="dense", k=1, access=people["eng"])["results"][0]["chunk_id"]
    assert HR in seen(kb.path_of(twin))  # the owner sees the mixed abstracts
    assert HR not in seen(kb.path_of(twin, access=people["eng"]))  # a reader of eng/ does not
    eng_id = kb.query(QUESTION, mode="dense", k=1)["results"][0]["chunk_id"]
    with pytest.raises(NodeNotFound):
        kb.path_of(eng_id, access=people["hr"])


def test_status_counts_only_what_the_person_may_read(kb, docs, people):
    owner = kb.status()
    assert owner["files"]["indexed"] == 136 and len(owner["problems"]) == 2, owner["files"]
    hr = kb.status(access=people["hr"])
    assert ENG not in seen(hr) and "/eng" not in seen(hr)
    assert hr["chunks"] == len(LAKES) and hr["files"]["indexed"] == len(LAKES)
    assert [p["path"] for p in hr["problems"]] == [str(docs / "hr" / f"broken-{HR}.pdf")]
    assert hr["tree"]["leaves"] == len(LAKES) and hr["tree"]["abstract_nodes"] == 0
    nobody = kb.status(access=people["nobody"])
    assert nobody["chunks"] == 0 and sum(nobody["files"].values()) == 0
    assert nobody["problems"] == [] and nobody["tree"]["leaves"] == 0


def test_reindex_only_inside_an_editors_grants(kb, docs, people):
    editor = Access("eve", "editor", (str(docs / "hr"),))
    for who, path in ((people["hr"], docs / "hr"), (editor, docs / "eng"),
                      (editor, docs / "eng" / "day1.md"), (people["nobody"], docs)):
        with pytest.raises(AccessDenied):
            kb.ingest([path], access=who)
        with pytest.raises(AccessDenied):
            kb.remove([path], access=who)
    report = kb.ingest([docs / "hr"], access=editor)
    assert report.added == report.removed == 0 and report.unchanged >= len(LAKES)
    assert kb.status()["files"]["indexed"] == 136


def test_a_commit_reaches_a_reader_at_once(kb, docs, people):
    hr = people["hr"]
    before = kb.status(access=hr)["chunks"]
    kb.query(QUESTION, mode="dense", k=K, access=hr)  # the reader's scope is kept ...
    new = docs / "hr" / "new.md"
    new.write_text("Zephyrine notes: the volcano eruption sent lava flows over the new road.\n")
    try:
        kb.ingest([new])  # ... until the next commit
        assert kb.status(access=hr)["chunks"] == before + 1
        assert kb.query(QUESTION, mode="dense", k=1, access=hr)["results"][0]["path"] == str(new)
        _, sources = browse(kb, hr)
        assert str(new) in sources
    finally:
        new.unlink()
        kb.ingest([new])
    assert kb.status(access=hr)["chunks"] == before


@pytest.mark.parametrize("mode", EVAL_MODES)
def test_a_grant_over_everything_reads_as_the_owner(kb, docs, mode):
    everyone = Access("all", "reader", (str(docs),))
    assert [r["chunk_id"] for r in kb.query(QUESTION, mode=mode, k=K, access=everyone)[
        "results"]] == [r["chunk_id"] for r in kb.query(QUESTION, mode=mode, k=K)["results"]]


def test_a_scope_over_everything_never_returns_a_chunk_committed_since(kb, docs, tmp_path):
    everyone = Access("all", "reader", (str(docs),))
    scope = kb.engine.scope_of(None, everyone)
    assert kb.engine._whole(scope)  # searched unfiltered, as the owner's queries are
    outside = tmp_path / "outside.md"
    outside.write_text("Volcano eruption with lava flows: the volcano eruption with lava flows.\n")
    try:
        kb.ingest([outside])  # a commit between the scope's count and its search
        assert kb.query(QUESTION, mode="dense", k=1)["results"][0]["path"] == str(outside)
        for mode in EVAL_MODES:
            found = kb.engine.rank(QUESTION, mode, K, scope, access=everyone)
            paths = {h.path for h in kb.stores.store.hits(found.ids.tolist()).values()}
            assert paths and str(outside) not in paths, mode
    finally:
        kb.remove([outside])


@pytest.mark.parametrize("mode", ["auto", "hybrid", "tree", "dense", "sparse"])
def test_a_quoted_phrase_stays_within_the_grants(kb, docs, people, mode):
    """Quotes narrow a person's scope, never widen it: a phrase both folders hold gives hr/'s
    diaries alone, one only eng/ holds gives nothing and says so."""
    result = kb.query('"past an old volcano" lake', mode=mode, k=K, access=people["hr"])
    paths = [r["path"] for r in result["results"]]
    assert paths and all(Path(p).parent == docs / "hr" for p in paths)
    assert ENG not in seen(result)
    result = kb.query('"lava fountains poured"', mode=mode, k=K, access=people["hr"])
    assert result["results"] == [] and "lava fountains poured" in result["note"]
    assert ENG not in seen(result)

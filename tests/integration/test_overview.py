"""Questions about the whole collection are answered from the tree's top branches."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from psirag_kb.kb import KnowledgeBase
from psirag_kb.search.overview import is_global

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "docs"
FILES = [  # the sample folder's three main subjects (and a note that misled word similarity)
    "python/library-weakref.rst", "python/pydoc-gc.txt", "python/c-api-memory-management.rst",
    "web/flask-quickstart.rst", "web/flask-blueprints.rst", "web/flask-templating.rst",
    "licenses/Apache-2.0.txt", "licenses/MPL-2.0.txt", "licenses/BSD-3-Clause.txt",
    "notes/computer-scientists.txt",
]
QUESTION = "what is this knowledge base about?"


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("overview") / "docs"
    for name in FILES:
        (folder / Path(name).parent).mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE / name, folder / name)
    return folder


@pytest.fixture
def kb(config, minilm, sample):
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([sample])
        kb.regenerate_abstracts()
        yield kb


def names_the_subjects(text: str) -> bool:
    low = text.lower()
    return "python" in low and "flask" in low and "licen" in low


@pytest.mark.parametrize("question", [
    QUESTION, "What is this about?", "What topics does this folder cover?",
    "Summarise the folder", "summarize everything", "Give me an overview of the collection",
])
def test_global_questions_are_recognised(question: str) -> None:
    assert is_global(question)


@pytest.mark.parametrize("question", [
    "How does Python manage memory for objects?", "What is a Flask blueprint about?",
    "Summarise the demons", "What topics of Flask apps need a blueprint?",
    "Which licence allows patent use?",
])
def test_questions_about_facts_are_not_global(question: str) -> None:
    assert not is_global(question)


def test_the_summary_of_the_sample_folder_names_its_subjects_without_an_llm(kb) -> None:
    result = kb.query(QUESTION, summarize=True)
    assert result["summary"] and names_the_subjects(result["summary"]), result["summary"]
    nodes = [c["node"] for c in result["nodes"]]
    cited = [c["chunk_id"] for c in result["citations"]]
    assert cited == [r["chunk_id"] for r in result["results"]]
    assert nodes and nodes == [e["node"] for e in result["overview"]]
    # the passages cover every top branch, not the ones sharing words with the question
    view = kb.stores.tree_index.view
    tops = set(nodes)
    covered = set()
    for row in result["results"]:
        node = int(view.leaf_parent[row["chunk_id"]])
        while node not in tops and view.nodes[node].parent is not None:
            node = view.nodes[node].parent
        covered.add(node)
    assert covered == tops


def test_a_global_question_in_agent_mode_cites_the_nodes(kb) -> None:
    answer = kb.query("What topics does this folder cover?", mode="agent")
    assert answer["status"] == "answered" and names_the_subjects(answer["answer"])
    assert answer["nodes"] and all(c["chunk_id"] for c in answer["citations"])


def test_an_llm_summary_is_kept_only_when_the_branches_support_it(config, minilm, sample,
                                                                   fake_ollama) -> None:
    config = config.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=10.0)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([sample])
        kb.regenerate_abstracts(offline=True)
        # what SmolLM2 wrote from passages picked by word similarity
        fake_ollama.script("The work and productivity of computer scientists at Google.")
        refused = kb.query(QUESTION, summarize=True)
        assert "refused" in refused["message"] and names_the_subjects(refused["summary"])
        labels = [e["label"] for e in refused["overview"]]
        written = f"Summary: {labels[0]} [1]; {labels[-1]} [{len(labels)}]."
        fake_ollama.script(written)
        kept = kb.query(QUESTION, summarize=True)
        assert kept["status"] == "summarized", kept["message"]
        assert kept["summary"] == written[9:]
        assert [c["number"] for c in kept["nodes"]] == [1, len(labels)]
        under = {i for e in (kept["overview"][0], kept["overview"][-1]) for i in e["chunk_ids"]}
        assert {c["chunk_id"] for c in kept["citations"]} == under
        system = fake_ollama.chats[-1].body["messages"][-1]["content"]
        assert all(label in system for label in labels)  # the LLM read the top branches

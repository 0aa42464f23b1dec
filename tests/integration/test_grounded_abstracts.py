"""LLM abstracts are stored only when their children's text supports them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fake_ollama import JUNK

from psirag_kb.kb import KnowledgeBase

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "docs"
FILES = ["licenses/MPL-2.0.txt", "licenses/Pallets-BSD-3-Clause.txt", "data/debian-releases.csv"]
INVENTED = [  # what SmolLM2-135M wrote for the sample folder's licence nodes
    "Limitation of Liability, including hotels",
    "The official Debian 12 package version is Ubuntu-Debian, including Ubuntu and Fedora",
    "CERN licence, https://www.openldap-zlib2018_345679/",
]
GROUNDED = "Mozilla Public License, Covered Software, Contributor"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "docs"
    out.mkdir()
    for name in FILES:
        shutil.copy(SAMPLE / name, out / Path(name).name)
    return out


def test_invented_abstracts_are_refused_and_the_offline_ones_stay(config, minilm, folder,
                                                                   fake_ollama):
    asked = []

    def reply(body: dict) -> str:
        text = body["messages"][-1]["content"]
        asked.append(text)
        if "Mozilla Public License" in text and "Covered Software" in text:
            return GROUNDED
        return INVENTED[len(asked) % len(INVENTED)]

    fake_ollama.script(fn=reply)
    config = config.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=5.0)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        report = kb.regenerate_abstracts()
        live = kb.stores.tree_index.live
        assert not live.dirty and report["failed"] == 0
        stored = " ".join(live.abstracts.values()).lower()
        for word in ("hotel", "ubuntu", "fedora", "openldap-zlib2018", "cern"):
            assert word not in stored
        assert all(live.abstracts.values())  # every refused node kept an offline abstract
        assert GROUNDED in live.abstracts.values()  # a supported abstract is taken
        status = kb.status()["abstracts"]
        assert status["refused"] == report["refused"] >= len(INVENTED) - 1
        assert "not support" in status["last_refusal"]
        labels = dict(live.labels)
        # a refused node is not asked again until its children change
        before = len(asked)
        kb.regenerate_abstracts()
        assert len(asked) == before and dict(live.labels) == labels


def test_junk_replies_fail_their_nodes_only(config, minilm, folder, fake_ollama):
    # a small model's junk reply (12 in a real run) must not pause the whole LLM
    junk: dict[str, bool] = {}  # per prompt, decided at first sight: every other node is junk

    def reply(body: dict) -> str:
        text = body["messages"][-1]["content"]
        if junk.setdefault(text, len(junk) % 2 == 0):
            return JUNK
        words = [w for w in text.split() if w.isalpha() and w.islower() and len(w) > 4]
        return ", ".join(dict.fromkeys(words[:6]))

    fake_ollama.script(fn=reply)
    config = config.replace("llm", enabled=True, host=fake_ollama.url, timeout_s=5.0)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest([folder])
        kb.regenerate_abstracts(offline=True)
        offline = dict(kb.stores.tree_index.live.abstracts)
        report = kb.regenerate_abstracts()
        live = kb.stores.tree_index.live
        bad = {n for n in live.children if live.abstracts[n] == offline[n]}
        good = set(live.children) - bad
        assert sum(junk.values()) >= 2 and len(good) == len(junk) - sum(junk.values()) >= 2
        assert live.dirty == bad  # the junk nodes stay dirty with their offline abstracts
        assert report["failed"] == len(bad) and report["regenerated"] == len(good)
        status = kb.status()["abstracts"]
        assert status["junk"] == len(bad) and "unusable" in status["last_junk"]
        assert status["nodes_backed_off"] == len(bad)
        assert all(h["backoffs"] == 0 for h in status["hosts"])  # the host was never paused
        job = kb.abstract_job
        assert job.llm_due() is False  # only backed-off nodes are dirty: nothing for the refresher
        asked = len(fake_ollama.chats)
        job.run(skip_backed_off=True)
        assert len(fake_ollama.chats) == asked
        fake_ollama.script(fn=lambda body: "Mozilla Public License")
        kb.regenerate_abstracts()  # an explicit run asks them again
        assert len(fake_ollama.chats) > asked

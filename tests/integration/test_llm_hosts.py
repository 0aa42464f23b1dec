"""LLM work spread over several Ollama hosts: a failing one is backed off, the rest go on."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from psirag_kb.config import Config, LLMConfig
from psirag_kb.errors import ConfigError, LLMError
from psirag_kb.kb import KnowledgeBase
from psirag_kb.llm.hosts import LLMPool
from psirag_kb.status_text import abstracts_line
from tests.fake_ollama import FakeOllama

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_small"
MODEL = "llama3.1:8b"
HELLO = [{"role": "user", "content": "hello"}]


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def keyword_reply(body: dict) -> str:
    words = body["messages"][-1]["content"].split()
    return f"llm view of {words[0] if words else 'nothing'}, llm themes"


@pytest.fixture
def two_hosts():
    servers = [FakeOllama(), FakeOllama()]
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    lines = (FIXTURES / "corpus.jsonl").read_text().splitlines()[:60]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("failure", ["dead port", "http 500"])
def test_abstracts_come_from_the_healthy_host_when_one_fails(config, minilm, small_corpus,
                                                             two_hosts, failure):
    healthy, failing = two_hosts
    healthy.script(fn=keyword_reply)
    bad_url = closed_port_url() if failure == "dead port" else failing.url
    failing.script(mode="error")
    config = config.replace("tree", max_children=4).replace(
        "llm", enabled=True, grounding=False, hosts=[bad_url, healthy.url], host_concurrency=1,
        timeout_s=5.0)  # the scripted replies are placeholders, not grounded abstracts
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        live = kb.stores.tree_index.live
        nodes = set(live.children)
        report = kb.regenerate_abstracts()
        assert report["regenerated"] == len(nodes) and report["failed"] == 0
        assert not live.dirty
        assert all(live.abstracts[n].startswith("llm view of") for n in nodes)
        assert len(healthy.chats) == len(nodes)  # one chat per node, all on the healthy host
        status = kb.status()["abstracts"]
        hosts = {h["host"]: h for h in status["hosts"]}
        assert set(hosts) == {bad_url, healthy.url}
        assert hosts[bad_url]["backoffs"] >= 1 and hosts[bad_url]["answered"] == 0
        assert hosts[bad_url]["last_error"]
        assert hosts[healthy.url]["answered"] == len(nodes)
        assert hosts[healthy.url]["rate_per_s"] > 0 and hosts[bad_url]["rate_per_s"] == 0
        assert hosts[healthy.url]["backoffs"] == 0
        line = abstracts_line(status)
        assert f"host {healthy.url}: " in line and "chats/s" in line and "backed off" in line


def test_two_healthy_hosts_share_the_abstracts(config, minilm, small_corpus, two_hosts):
    for server in two_hosts:
        server.script(fn=keyword_reply, mode="slow", delay=0.05)
    config = config.replace("tree", max_children=4).replace(
        "llm", enabled=True, grounding=False, hosts=[s.url for s in two_hosts], timeout_s=5.0)
    with KnowledgeBase(config, embedder=minilm) as kb:
        kb.ingest_jsonl(small_corpus)
        nodes = set(kb.stores.tree_index.live.children)
        assert kb.regenerate_abstracts()["regenerated"] == len(nodes)
        counts = [len(s.chats) for s in two_hosts]
        assert sum(counts) == len(nodes) and min(counts) > 0, counts
        rates = [h["rate_per_s"] for h in kb.status()["abstracts"]["hosts"]]
        assert all(rate > 0 for rate in rates)


def test_agent_chats_go_to_a_live_host_and_every_host_failing_is_one_error(two_hosts):
    healthy, failing = two_hosts
    healthy.script(fn=lambda body: "from the healthy host")
    failing.script(mode="error")
    pool = LLMPool(LLMConfig(enabled=True, hosts=(failing.url, healthy.url), timeout_s=5.0))
    pool.check(MODEL)
    answers = [pool.chat(MODEL, HELLO) for _ in range(4)]
    assert answers == ["from the healthy host"] * 4
    failed = {h["host"]: h for h in pool.report()}[failing.url]
    assert failed["backoffs"] == 1 and failed["backed_off_s"] > 0  # asked once, then skipped
    assert len(failing.chats) == 1 and len(healthy.chats) == 4
    healthy.script(mode="error")
    with pytest.raises(LLMError, match="every Ollama host failed"):
        pool.chat(MODEL, HELLO)


def test_host_concurrency_bounds_the_chats_in_flight(two_hosts):
    gate = threading.Event()
    for server in two_hosts:
        server.script(fn=lambda body: (gate.wait(10), "done")[1])
    pool = LLMPool(LLMConfig(enabled=True, hosts=tuple(s.url for s in two_hosts),
                             host_concurrency=2, timeout_s=20.0))
    assert pool.width == 4
    threads = [threading.Thread(target=pool.chat, args=(MODEL, HELLO)) for _ in range(6)]
    for thread in threads:
        thread.start()
    pause = threading.Event()
    for _ in range(200):  # poll (10 s at most) until four chats are in flight on the servers
        if sum(len(s.chats) for s in two_hosts) >= 4:
            break
        pause.wait(0.05)
    busy = [h["busy"] for h in pool.report()]
    assert busy == [2, 2]  # two wait for a slot
    gate.set()
    for thread in threads:
        thread.join(20)
    assert sum(h["answered"] for h in pool.report()) == 6


@pytest.mark.parametrize("values, problem", [
    ({"hosts": ["http://a:1"], "host": "http://b:1"}, "either"),
    ({"hosts": ["a:11434"]}, "not an http"),
    ({"hosts": ["http://a:1", "http://a:1/"]}, "twice"),
    ({"hosts": ["http://a:1"], "host_concurrency": 0}, "positive"),
])
def test_hosts_config_is_strict(config, values, problem):
    with pytest.raises(ConfigError, match=problem):
        config.replace("llm", **values)


def test_agent_answers_through_the_live_host(two_hosts, tmp_path):
    from conftest import FakeEmbedder

    healthy = two_hosts[1]
    healthy.script({"action": "answer", "text": "pole to pole", "cited": [1]})
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "tern.txt").write_text("The arctic tern flies from pole to pole.\n")
    config = Config().with_data_dir(tmp_path / "data").replace(
        "llm", enabled=True, grounding=False, hosts=[closed_port_url(), healthy.url],
        timeout_s=10.0)
    with KnowledgeBase(config, embedder=FakeEmbedder()) as kb:
        kb.ingest([notes])
        result = kb.answer("Where does the arctic tern fly?", k=3)
    assert result["status"] == "answered" and result["answer"] == "pole to pole"
    assert len(healthy.chats) == 1

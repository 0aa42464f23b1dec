"""Ollama faults seen by a running daemon: down, dying mid-run, slow, junk; the agent's errors.

A real Daemon runs in a thread over a watched folder (fake embedder, real stores, scheduler and
HTTP API) with [llm] enabled and pointed at the scripted fake server of tests/fake_ollama.py.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import api, wait_for
from fake_ollama import JUNK, FakeOllama
from waiting import wait_until

import psirag_kb.abstracts.job as abstraction
from psirag_kb.abstracts.writers import _EXAMPLE_KEYWORDS, looks_like_junk
from psirag_kb.config import Config
from psirag_kb.service.daemon import Daemon

TIMEOUT_S = 0.5
"""[llm] timeout_s for every daemon here: a slow server fails fast."""
NOTES = 12
WORDS = ["harbour", "glacier", "orchard", "volcano", "lighthouse", "meadow",
         "canyon", "lagoon", "tundra", "savanna", "fjord", "prairie"]


def query_ok(daemon: Daemon, word: str = "glacier") -> bool:
    """A sparse query answers 200 with the note that holds the word on top."""
    status, body = api(daemon, "POST", "/api/query", {"text": word, "mode": "sparse", "k": 3})
    assert status == 200, body
    return bool(body["results"]) and word in body["results"][0]["text"]


def answer_lines(daemon: Daemon, text: str) -> tuple[int, list[dict[str, Any]]]:
    """POST /api/answer; the HTTP status and every NDJSON line."""
    request = urllib.request.Request(daemon.api.url + "/api/answer",
                                     data=json.dumps({"text": text}).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {daemon.api.token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, [json.loads(line) for line in response if line.strip()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree(daemon: Daemon) -> tuple[set[int], dict[int, str], set[int]]:
    """(abstract nodes, their abstracts, dirty nodes), read on the KB's writer thread."""
    kb = daemon.kb

    def read() -> tuple[set[int], dict[int, str], set[int]]:
        live = kb.stores.tree_index.live
        return set(live.children), dict(live.abstracts), set(live.dirty)

    return kb.stores.writer.call(read)


def assert_no_junk(daemon: Daemon, *replies: str) -> None:
    """No stored abstract is a junk reply or fails looks_like_junk ("" means none yet)."""
    for node, text in tree(daemon)[1].items():
        assert text not in (JUNK, *replies), (node, text)
        assert text == "" or not looks_like_junk(text), (node, text)


def keyword_reply(body: dict[str, Any]) -> str:
    """An LLM keyword abstract naming a word of the prompt's last message."""
    last = body["messages"][-1]["content"].lower()
    found = [w for w in WORDS if w in last] or ["misc"]
    return f"llm view of {found[0]}, llm themes"


def is_llm(text: str) -> bool:
    return text.startswith("llm view of ")


@pytest.fixture(autouse=True)
def short_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry the LLM after 0.05 s (then up to 0.2 s) instead of 30 s."""
    monkeypatch.setattr(abstraction, "BACKOFF_S", (0.05, 0.2))


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for n, word in enumerate(WORDS[:NOTES]):
        (folder / f"note{n:02d}.md").write_text(
            f"The {word} note number {n} describes the {word} in detail.\n")
    return folder


def llm_config(config: Config, docs: Path, url: str, **watch: Any) -> Config:
    """The LLM at `url`; abstracts are written by `maintain` alone (the daemon's refresher,
    tested in tests/integration/test_abstracts_on_ingest.py, stays out of the way)."""
    watch.setdefault("abstracts_quiet_s", 3600.0)
    config = config.replace("watch", folders=[str(docs)], quiet_period_s=0.2, **watch)
    config = config.replace("api", port=0)
    config = config.replace("tree", max_children=3)  # 12 leaves: several layers of nodes
    # placeholder replies ("llm view of ..."): the grounding check would refuse them
    return config.replace("llm", enabled=True, host=url, timeout_s=TIMEOUT_S, grounding=False)


def start(config: Config, embedder: Any) -> Daemon:
    """A started daemon whose notes are all indexed and whose tree has several nodes."""
    daemon = Daemon(config, embedder=embedder)
    daemon.start()
    try:
        wait_for(lambda: api(daemon, "GET", "/api/status")[1]["files"]["indexed"] == NOTES)
        wait_for(lambda: daemon.watcher.queue_size == 0)
        assert len(tree(daemon)[0]) >= 4
    except BaseException:
        daemon.stop()
        raise
    return daemon


@pytest.fixture
def running(config: Config, docs: Path, fake_embedder, fake_ollama: FakeOllama
            ) -> Iterator[Daemon]:
    """A daemon with the LLM enabled at the fake server; maintain only runs when called."""
    fake_ollama.script(fn=keyword_reply)
    daemon = start(llm_config(config, docs, fake_ollama.url), fake_embedder)
    yield daemon
    daemon.stop()


def maintain_in_background(daemon: Daemon) -> tuple[threading.Thread, dict[str, Any]]:
    """Run kb.maintain() in a thread; the report lands in the returned dict."""
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(daemon.kb.maintain()), daemon=True)
    thread.start()
    return thread, out


def maintain_with_llm(daemon: Daemon, fake: FakeOllama) -> dict[str, Any]:
    """Run maintain until a run reaches the LLM (the backoff has passed); its report."""
    def attempt() -> dict[str, Any] | None:
        before = len(fake.chats)
        report = daemon.kb.maintain()["abstracts"]
        return report if len(fake.chats) > before else None

    return wait_for(attempt)


def test_down_at_start_then_up_through_the_scheduled_job(config: Config, docs: Path,
                                                         fake_embedder) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    daemon = start(llm_config(config, docs, url, maintain_interval_s=0.3), fake_embedder)
    fake: FakeOllama | None = None
    try:
        assert query_ok(daemon)
        nodes = tree(daemon)[0]

        def placeholders() -> bool:
            _, abstracts, dirty = tree(daemon)
            return set(abstracts) >= nodes and dirty >= nodes

        wait_for(placeholders)  # offline keywords meanwhile, every node still due for the LLM
        abstracts = tree(daemon)[1]
        assert all(text and not is_llm(text) for text in abstracts.values())
        assert_no_junk(daemon)
        status = api(daemon, "GET", "/api/status")[1]
        assert "not reachable" in status["abstracts"]["last_error"]
        assert status["abstracts"]["dirty"] == len(nodes)
        def maintain_job() -> dict[str, Any]:
            status = api(daemon, "GET", "/api/status")[1]
            return next(j for j in status["daemon"]["jobs"] if j["name"] == "maintain")

        # the placeholders may be written by the ingest before the job's first run has ended
        job = wait_for(lambda: (lambda j: j if j["runs"] >= 1 else None)(maintain_job()))
        assert "error" not in job
        code, root = api(daemon, "GET", "/api/tree")
        assert code == 200 and root["dirty"] is True and root["abstract"]
        assert query_ok(daemon, "lagoon")

        fake = FakeOllama(port=port).script(fn=keyword_reply)

        def regenerated() -> bool:
            _, abstracts, dirty = tree(daemon)
            return not dirty and all(is_llm(abstracts[n]) for n in nodes)

        wait_for(regenerated)  # the scheduled job, after the (shortened) backoff
        assert fake.chats
        status = api(daemon, "GET", "/api/status")[1]
        assert status["abstracts"]["dirty"] == 0
        assert status["abstracts"]["last_error"] == ""  # recovered: no stale error shown
        code, root = api(daemon, "GET", "/api/tree")
        assert code == 200 and root["dirty"] is False and is_llm(root["abstract"])
        assert query_ok(daemon)
    finally:
        daemon.stop()
        if fake is not None:
            fake.stop()


@pytest.mark.parametrize("then", ["close", "error"])
def test_down_in_the_middle_of_a_run(running: Daemon, fake_ollama: FakeOllama,
                                     then: str) -> None:
    daemon = running
    nodes = tree(daemon)[0]
    fake_ollama.script(fn=keyword_reply, fail_after=2, then=then)
    thread, out = maintain_in_background(daemon)
    while thread.is_alive():
        assert query_ok(daemon)
        thread.join(0.05)
    report = out["abstracts"]
    assert report["regenerated"] >= 2 and report["failed"] >= 1, report
    assert len(fake_ollama.chats) == 3  # two answers, one failure, then no more asking
    _, abstracts, dirty = tree(daemon)
    done = {n: t for n, t in abstracts.items() if n not in dirty}
    assert len(done) == 2 and all(is_llm(t) for t in done.values())
    assert dirty == nodes - set(done)  # the rest: offline placeholders at most, still due
    assert_no_junk(daemon)
    error = api(daemon, "GET", "/api/status")[1]["abstracts"]["last_error"]
    assert "failed" in error and "Ollama" in error

    fake_ollama.script(fn=keyword_reply)  # back up: the rest is retried after the backoff
    maintain_with_llm(daemon, fake_ollama)
    _, abstracts, dirty = tree(daemon)
    assert not dirty and all(is_llm(abstracts[n]) for n in nodes)
    assert all(abstracts[n] == text for n, text in done.items())
    assert query_ok(daemon)


def test_progress_over_http_and_a_stop_keeps_the_finished_nodes(
        config: Config, docs: Path, fake_embedder, running: Daemon,
        fake_ollama: FakeOllama) -> None:
    daemon = running
    nodes = tree(daemon)[0]
    fake_ollama.script(fn=keyword_reply, mode="slow", delay=0.1)  # slow, within the timeout
    thread, out = maintain_in_background(daemon)

    def two_done() -> dict[str, Any] | None:
        shown = api(daemon, "GET", "/api/status")[1]["abstracts"]
        return shown if shown["running"] and shown["done"] >= 2 else None

    shown = wait_for(two_done)
    assert shown["total"] == len(nodes) and shown["rate_per_s"] > 0 and shown["eta_s"] > 0
    assert shown["dirty"] <= len(nodes) - shown["done"]  # each abstract committed at once
    daemon.kb.abstract_job.stop()  # what a stopping daemon asks before waiting for its jobs
    thread.join(10)
    assert not thread.is_alive() and out["abstracts"]["interrupted"]
    kept = out["abstracts"]["regenerated"]
    assert 2 <= kept < len(nodes)
    daemon.stop()
    again = start(llm_config(config, docs, fake_ollama.url), fake_embedder)
    try:
        _, abstracts, dirty = tree(again)
        assert len(nodes - dirty) == kept and all(is_llm(abstracts[n]) for n in nodes - dirty)
        assert api(again, "GET", "/api/status")[1]["abstracts"]["running"] is False
    finally:
        again.stop()


def test_slow_beyond_the_timeout(running: Daemon, fake_ollama: FakeOllama) -> None:
    daemon = running
    nodes = tree(daemon)[0]
    fake_ollama.script(fn=keyword_reply, mode="slow", delay=30.0)
    thread, out = maintain_in_background(daemon)

    def ended() -> bool:
        assert query_ok(daemon)  # queries are answered all along
        thread.join(0.05)
        return not thread.is_alive()

    wait_until(ended, 15 * TIMEOUT_S, 0,
               message="maintain to end on a server slower than [llm] timeout_s")
    assert out["abstracts"]["failed"] >= 1
    assert len(fake_ollama.chats) == 1  # one timed-out request, then no more asking
    assert tree(daemon)[2] == nodes
    assert not any(is_llm(t) for t in tree(daemon)[1].values())
    status = api(daemon, "GET", "/api/status")[1]
    assert "did not answer" in status["abstracts"]["last_error"]
    assert api(daemon, "GET", "/api/health")[0] == 200

    fake_ollama.script(fn=keyword_reply)
    maintain_with_llm(daemon, fake_ollama)
    assert not tree(daemon)[2]


JUNK_REPLIES = {
    "junk": JUNK,
    "empty": "",
    "blank": "   \n ",
    "refusal": "I'm sorry, but I cannot help with that.",
    "preamble": "Here are the key phrases:",
    "error": "Error: CUDA out of memory",
}


def test_junk_is_never_stored_and_retried(running: Daemon, fake_ollama: FakeOllama) -> None:
    daemon = running
    nodes = tree(daemon)[0]
    for name, reply in JUNK_REPLIES.items():
        fake_ollama.script(fn=lambda body, reply=reply: reply)
        report = maintain_with_llm(daemon, fake_ollama)
        assert report["failed"] >= 1, (name, report)
        _, abstracts, dirty = tree(daemon)
        assert dirty == nodes, name
        assert not any(is_llm(t) for t in abstracts.values())
        assert_no_junk(daemon, *(r for r in JUNK_REPLIES.values() if r.strip()))
        error = api(daemon, "GET", "/api/status")[1]["abstracts"]["last_error"]
        assert "empty reply" in error or "unusable" in error, (name, error)
        assert query_ok(daemon)
    fake_ollama.script(fn=keyword_reply)
    maintain_with_llm(daemon, fake_ollama)
    _, abstracts, dirty = tree(daemon)
    assert not dirty and all(is_llm(abstracts[n]) for n in nodes)


def test_a_copy_of_the_example_is_refused_once_and_the_offline_abstract_stays(
        running: Daemon, fake_ollama: FakeOllama) -> None:
    daemon = running  # a small model copying the prompt's one-shot example
    nodes = tree(daemon)[0]
    fake_ollama.script(fn=lambda body: _EXAMPLE_KEYWORDS)
    report = maintain_with_llm(daemon, fake_ollama)
    assert report["failed"] == 0 and report["refused"] == len(nodes), report
    _, abstracts, dirty = tree(daemon)
    assert not dirty and all(abstracts[n] and not is_llm(abstracts[n]) for n in nodes)
    assert_no_junk(daemon, _EXAMPLE_KEYWORDS)
    status = api(daemon, "GET", "/api/status")[1]["abstracts"]
    assert status["refused"] == len(nodes) and not status["last_error"]
    assert "copies the prompt's example" in status["last_refusal"]
    asked = len(fake_ollama.chats)
    daemon.kb.maintain()  # temperature 0: the same children would get the same copy
    assert len(fake_ollama.chats) == asked and query_ok(daemon)


def test_summative_junk_is_never_stored(config: Config, docs: Path, fake_embedder,
                                        fake_ollama: FakeOllama) -> None:
    config = llm_config(config, docs, fake_ollama.url).replace("tree", abstract_kind="summative")
    daemon = start(config, fake_embedder)
    try:
        nodes = tree(daemon)[0]
        for reply in ("Summary:", "Here is a summary of the documents:\n\n", "**Summary:** ...",
                      "I cannot summarise these documents."):
            fake_ollama.script(fn=lambda body, reply=reply: reply)
            assert maintain_with_llm(daemon, fake_ollama)["failed"] >= 1, reply
            assert tree(daemon)[2] == nodes
            assert_no_junk(daemon, reply)
        fake_ollama.script(fn=lambda body: "Summary: Notes about landscapes.")
        maintain_with_llm(daemon, fake_ollama)
        _, abstracts, dirty = tree(daemon)
        assert not dirty and set(abstracts.values()) == {"Notes about landscapes."}
    finally:
        daemon.stop()


@pytest.mark.parametrize("fault", ["down", "slow", "error", "close"])
def test_answer_reports_the_llm_failure_and_the_server_lives(
        config: Config, docs: Path, fake_embedder, fake_ollama: FakeOllama, fault: str) -> None:
    if fault == "down":
        url = f"http://127.0.0.1:{free_port()}"
        expected = "not reachable"
    else:
        url = fake_ollama.url
        fake_ollama.script(mode="slow" if fault == "slow" else fault, delay=30.0)
        expected = {"slow": "did not answer", "error": "HTTP 500",
                    "close": "connection to Ollama"}[fault]
    daemon = start(llm_config(config, docs, url), fake_embedder)
    try:
        status, lines = answer_lines(daemon, "Which note describes the glacier?")
        assert status == 200 and lines, lines
        final = lines[-1]
        assert set(final) == {"answer"}, final
        answer = final["answer"]
        assert answer["status"] == "no_llm" and answer["answer"] is None
        assert expected in answer["message"], answer["message"]
        assert answer["results"]  # passages retrieved without the LLM
        assert all("step" in line for line in lines[:-1])
        assert api(daemon, "GET", "/api/health")[0] == 200
        assert query_ok(daemon)
    finally:
        daemon.stop()

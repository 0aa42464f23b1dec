"""Stored conversations on the real stores and model: a follow-up found through the
conversation, only its owner opens it (anyone else gets the answer of an id that does not
exist), it survives a restart of the KnowledgeBase and of the daemon, reopened passages follow
the grants of now, a removed person's conversations go, and keep_days prunes old ones.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import api, wait_for

from psirag_kb.access import Access
from psirag_kb.cli import main
from psirag_kb.config import Config
from psirag_kb.errors import ConversationNotFound, KBError
from psirag_kb.kb import KnowledgeBase
from psirag_kb.people import People
from psirag_kb.service.daemon import Daemon
from psirag_kb.storage.conversations import StoredTurn

TOOLS = {
    "helgrind": ("Helgrind: a thread error detector",
                 "Helgrind is a Valgrind tool for detecting synchronisation errors in C, C++ "
                 "and Fortran programs that use the POSIX pthreads threading primitives.",
                 "Helgrind Command-line Options",
                 "--free-is-write=no|yes controls whether freeing memory counts as writing it. "
                 "--track-lockorders=no|yes checks lock acquisition orders."),
    "massif": ("Massif: a heap profiler",
               "Massif measures how much heap memory your program uses, including the extra "
               "bytes allocated for book-keeping and alignment.",
               "Running ms_print",
               "ms_print draws the graph of heap snapshots that massif recorded over time."),
}
RELEASE = ("# Release notes 2.6.3\n\nFixes since 2.6.2: the command-line options of blame and "
           "merge-file, and what their options print in the error messages.\n")


def manual(title: str, overview: str, heading: str, body: str) -> str:
    return f"# {title}\n\n## Overview\n\n{overview}\n\n## {heading}\n\n{body}\n"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = tmp_path_factory.mktemp("conversations") / "docs"
    for name, parts in TOOLS.items():
        (docs / "tools").mkdir(parents=True, exist_ok=True)
        (docs / "tools" / f"{name}.md").write_text(manual(*parts))
    (docs / "notes").mkdir()
    (docs / "notes" / "release-2.6.3.md").write_text(RELEASE)
    return docs


def test_stored_conversation_flow(folders: Path, tmp_path: Path, minilm: Any) -> None:
    config = Config().with_data_dir(tmp_path / "data").replace("conversations", keep_days=2)
    alice = Access("alice", "reader", (str(folders),))
    bob = Access("bob", "reader", (str(folders),))
    with KnowledgeBase(config, minilm) as kb:
        kb.ingest([folders])
        talk = kb.new_conversation(access=alice)
        assert talk["turns"] == 0 and len(talk["id"]) >= 20
        first = kb.ask("What is Helgrind?", conversation=talk["id"], k=3, access=alice)
        assert first["rewrite"] == "as_is" and first["turn"] == 1
        follow = kb.ask("What are its command-line options?", conversation=talk["id"], k=3,
                        access=alice)
        assert follow["rewrite"] == "offline" and "Helgrind" in follow["searched"]
        assert Path(follow["results"][0]["path"]).name == "helgrind.md"
        alone = kb.query("What are its command-line options?", k=3, access=alice)
        assert follow["searched"] != alone["query"]
        # nobody else opens it, continues it, renames or deletes it: the same answer as for
        # an id that never existed
        with pytest.raises(ConversationNotFound) as foreign:
            kb.conversation(talk["id"], access=bob)
        for attempt in (lambda: kb.ask("and massif?", conversation=talk["id"], access=bob),
                        lambda: kb.rename_conversation(talk["id"], "mine", access=bob),
                        lambda: kb.delete_conversation(talk["id"], access=bob)):
            with pytest.raises(ConversationNotFound):
                attempt()
        assert kb.conversations(access=bob) == {"conversations": []}
        kept = kb.new_conversation("bob's", access=bob)["id"]
        old = kb.new_conversation("old", access=bob)["id"]
        long_ago = time.time() - 3 * 86400
        kb.stores.writer.call(lambda: kb.talks.add_turn(old, "bob", StoredTurn(
            "What is Massif?", "What is Massif?", "as_is", "auto", None, "found", (), (),
            long_ago)))
    with KnowledgeBase(config, minilm) as kb:  # a restart on the same data directory
        listed = kb.conversations(access=alice)["conversations"]
        assert [c["id"] for c in listed] == [talk["id"]]
        assert listed[0]["title"] == "What is Helgrind?" and listed[0]["turns"] == 2
        reopened = kb.conversation(talk["id"], access=alice)
        assert [t["turn"] for t in reopened["turns"]] == [1, 2]
        assert [t["searched"] for t in reopened["turns"]] == [first["searched"],
                                                               follow["searched"]]
        cited = reopened["turns"][1]["passages"]
        assert [p["chunk_id"] for p in cited] == [r["chunk_id"] for r in follow["results"]]
        assert not any(p.get("withheld") for p in cited)
        # a third turn resolved against the stored ones
        third = kb.ask("And massif?", conversation=talk["id"], k=3, access=alice)
        assert third["turn"] == 3 and "massif" in third["searched"].lower()
        # the grants of now: alice loses the tools folder, its passages are withheld
        narrowed = Access("alice", "reader", (str(folders / "notes"),))
        again = kb.conversation(talk["id"], access=narrowed)["turns"][1]
        hidden = [p for p in again["passages"] if p.get("withheld")]
        assert hidden and all(set(p) == {"chunk_id", "rank", "withheld"} for p in hidden)
        assert again["withheld"] is True and again["answer"] is None
        shown = str(kb.conversation(talk["id"], access=narrowed))
        assert "pthreads" not in shown and "free-is-write" not in shown  # no withheld text
        # rename, prune by age (keep_days = 2), the owners of now, delete
        assert kb.rename_conversation(talk["id"], "Valgrind tools",
                                      access=alice)["title"] == "Valgrind tools"
        assert kb.prune_conversations(["alice", "bob"]) == {"pruned": 1}
        assert [c["id"] for c in kb.conversations(access=bob)["conversations"]] == [kept]
        assert kb.prune_conversations(["bob"]) == {"pruned": 1}  # alice was removed
        assert kb.conversations(access=alice) == {"conversations": []}
        with pytest.raises(ConversationNotFound) as missing:
            kb.conversation(talk["id"], access=alice)
        assert str(missing.value) == str(foreign.value)
        assert kb.delete_conversation(kept, access=bob) == {"deleted": kept}
        with pytest.raises(KBError):
            kb.ask("x?", conversation=kept, history=[], access=bob)


@pytest.fixture
def served(folders: Path, tmp_path: Path, minilm: Any) -> Iterator[tuple[Config, dict[str, str]]]:
    config = Config().with_data_dir(tmp_path / "data")
    config = config.replace("watch", folders=[str(folders)], quiet_period_s=0.2)
    config = config.replace("api", port=0, person_requests_per_minute=100_000)
    config = config.replace("web", enabled=False)
    people = People(config.data_dir)
    tokens = {name: people.add(name, "reader", [str(folders)]) for name in ("ana", "bo")}
    yield config, tokens


def start(config: Config, minilm: Any) -> Daemon:
    daemon = Daemon(config, embedder=minilm)
    daemon.start()
    wait_for(lambda: api(daemon, "POST", "/api/query", {"text": "Helgrind", "mode": "sparse"}
                         )[1].get("results"), 120)
    return daemon


def test_conversations_over_the_api_survive_a_daemon_restart_and_go_with_the_person(
        served: tuple[Config, dict[str, str]], minilm: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    config, tokens = served
    daemon = start(config, minilm)
    try:
        # the CLI through the daemon: chat on a pipe, then query --conversation, conversations
        cli = ["--data-dir", str(config.data_dir)]
        monkeypatch.setattr("sys.stdin", io.StringIO("What is Helgrind?\n\n"
                                                     "What are its command-line options?\n"))
        assert main([*cli, "chat", "-k", "2"]) == 0
        out = capsys.readouterr().out
        assert out.count("Q: ") == 2 and "searched: Helgrind command-line options" in out
        assert main([*cli, "conversations", "--json"]) == 0
        (mine,) = json.loads(capsys.readouterr().out)["conversations"]
        assert mine["turns"] == 2 and mine["title"] == "What is Helgrind?"
        assert main([*cli, "query", "And Massif?", "--conversation", mine["id"], "--json"]) == 0
        assert "Massif" in json.loads(capsys.readouterr().out)["searched"]
        assert main([*cli, "conversations", "show", mine["id"]]) == 0
        assert "3. And Massif?" in capsys.readouterr().out
        assert main([*cli, "query", "x", "--conversation", "nope"]) == 1
        assert "no conversation 'nope'" in capsys.readouterr().err
        status, talk = api(daemon, "POST", "/api/conversations", {}, token=tokens["ana"])
        assert status == 200
        path = f"/api/conversations/{talk['id']}"
        for question in ("What is Massif?", "How does it draw its graph?"):
            status, turn = api(daemon, "POST", path + "/turns", {"q": question, "k": 3},
                               token=tokens["ana"])
            assert status == 200, turn
        assert turn["rewrite"] == "offline" and "Massif" in turn["searched"]
        assert Path(turn["results"][0]["path"]).name == "massif.md"
        status, stateless = api(daemon, "POST", "/api/ask", {
            "q": "How does it draw its graph?", "k": 3,
            "history": [{"role": "user", "content": "What is Massif?"},
                        {"role": "assistant", "content": "A heap profiler."}]},
            token=tokens["bo"])
        assert status == 200 and stateless["searched"] == turn["searched"]
        assert stateless["conversation"] is None
        assert api(daemon, "GET", "/api/conversations", token=tokens["bo"])[1] == {
            "conversations": []}
        foreign = api(daemon, "GET", path, token=tokens["bo"])
        never = api(daemon, "GET", "/api/conversations/" + "x" * 22, token=tokens["bo"])
        assert foreign[0] == never[0] == 404
        assert foreign[1]["error"].replace(talk["id"], "x" * 22) == never[1]["error"]
        assert api(daemon, "PATCH", path, {"title": "heap"}, token=tokens["bo"])[0] == 404
        assert api(daemon, "DELETE", path, token=tokens["bo"])[0] == 404
        assert api(daemon, "PATCH", path, {"title": "heap"}, token=tokens["ana"])[0] == 200
        status, bo_talk = api(daemon, "POST", "/api/conversations", {"title": "bo's"},
                              token=tokens["bo"])
    finally:
        daemon.stop()
    daemon = start(config, minilm)  # a restart: both conversations are there
    try:
        status, reopened = api(daemon, "GET", path, token=tokens["ana"])
        assert status == 200 and reopened["title"] == "heap" and len(reopened["turns"]) == 2
        assert reopened["turns"][1]["searched"] == turn["searched"]
        assert api(daemon, "DELETE", "/api/users/ana")[0] == 200  # the owner's token: admin
        assert api(daemon, "GET", path, token=tokens["bo"])[0] == 404
        assert daemon.kb.talks.owners() == ["bo", "owner"]  # the CLI's: the owner's
        status, listed = api(daemon, "GET", "/api/conversations", token=tokens["bo"])
        assert [c["id"] for c in listed["conversations"]] == [bo_talk["id"]]
    finally:
        daemon.stop()

"""The conversations tables (schema 5): added to a version-4 database on opening, owner-checked
reads and writes, and writes only on the writer thread."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import duckdb
import pytest

from psirag_kb.errors import ConversationNotFound, StoreError
from psirag_kb.storage.conversations import Conversations, StoredTurn, title_of
from psirag_kb.storage.migrations import SCHEMA_VERSION
from psirag_kb.storage.store import Store


def test_a_version_4_database_gains_the_tables(tmp_path: Path) -> None:
    path = tmp_path / "kb.duckdb"
    Store(path, "m", lambda: 8).close()
    db = duckdb.connect(str(path))
    db.execute("DROP TABLE turns")
    db.execute("DROP TABLE conversations")
    db.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    db.close()
    store = Store(path, "m", lambda: 8)
    try:
        assert store._meta("schema_version") == str(SCHEMA_VERSION)
        assert Conversations(store).listed("anyone") == []
    finally:
        store.close()


def test_owner_checked_reads_and_writes(tmp_path: Path) -> None:
    store = Store(tmp_path / "kb.duckdb", "m", lambda: 8)
    talks = Conversations(store)
    try:
        mine = talks.create("ana")["id"]
        assert talks.add_turn(mine, "ana", StoredTurn("What is X?", "", "as_is", "auto", None,
                                                      "found", (3, 1), (), 10.0)) == 1
        assert talks.add_turn(mine, "ana", StoredTurn("And Y?", "X Y", "offline", "agent",
                                                      "Y [1]", "answered", (7,), (1,))) == 2
        assert talks.summary(mine, "ana")["title"] == "What is X?"
        turns = talks.turns(mine, "ana")
        assert [t.chunk_ids for t in turns] == [(3, 1), (7,)] and turns[1].numbers == (1,)
        for attempt in (lambda: talks.turns(mine, "bo"), lambda: talks.rename(mine, "bo", "t"),
                        lambda: talks.delete(mine, "bo"), lambda: talks.add_turn(
                            mine, "bo", turns[0])):
            with pytest.raises(ConversationNotFound):
                attempt()
        assert len(talks.turns(mine, "ana")) == 2  # nothing changed by bo's attempts
        talks.rename(mine, "ana", "  a\n title  ")
        assert talks.summary(mine, "ana")["title"] == "a title"
        other = talks.create("bo", "x" * 300)
        assert len(other["title"]) == len(title_of("x" * 300)) <= 120
        assert talks.prune(before=0.0, people={"ana": 0.0, "bo": 0.0}) == 0
        later = talks.summary(mine, "ana")["created"] + 1
        assert talks.prune(before=0.0, people={"ana": later, "bo": 0.0}) == 1  # a new ana
        assert talks.owners() == ["bo"]
        mine = talks.create("ana")["id"]
        assert talks.prune(before=0.0, people={"bo": 0.0}) == 1  # ana is gone
        assert talks.owners() == ["bo"]
        assert talks.delete_owner("bo") == 1 and talks.owners() == []
        store.owner = threading.Thread()  # another thread writes now
        with pytest.raises(StoreError):
            talks.create("ana")
    finally:
        store.close()


def test_ids_are_safe_on_a_command_line() -> None:
    from psirag_kb.storage.conversations import new_id

    ids = [new_id() for _ in range(2000)]  # a URL-safe id opened with "-" one time in 64
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)

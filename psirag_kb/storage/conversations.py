"""Conversations in DuckDB: each person's conversations and their turns.

Rows are written on the stores' one writer thread (the facade hands every write to it) and read
from any thread through a cursor of its own. Every read and write names the owner: a
conversation of someone else is not found, exactly as one that does not exist.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import duckdb

from psirag_kb.errors import ConversationNotFound, StoreError
from psirag_kb.storage.sql import scalar

TITLE_CHARS = 120
"""A title (given, or the first question) is cut to this many characters."""
LISTED = 500
"""Conversations a list shows at most (the most recently continued first)."""


def create_conversation_tables(db: duckdb.DuckDBPyConnection) -> None:
    """The two tables and their lookup indexes (idempotent; run inside a transaction)."""
    db.execute("""CREATE TABLE IF NOT EXISTS conversations (
        id VARCHAR, owner VARCHAR, title VARCHAR, created DOUBLE, updated DOUBLE)""")
    db.execute("""CREATE TABLE IF NOT EXISTS turns (
        conversation VARCHAR, ord INTEGER, question VARCHAR, searched VARCHAR,
        rewrite VARCHAR, mode VARCHAR, answer VARCHAR, status VARCHAR, chunk_ids BIGINT[],
        numbers INTEGER[], asked DOUBLE)""")
    db.execute("CREATE INDEX IF NOT EXISTS conversations_id ON conversations (id)")
    db.execute("CREATE INDEX IF NOT EXISTS conversations_owner ON conversations (owner)")
    db.execute("CREATE INDEX IF NOT EXISTS turns_conversation ON turns (conversation)")


def new_id() -> str:
    """An unguessable conversation id: 128 random bits in hex (never starting with "-", which
    a command line would take for an option: `--conversation -x...`)."""
    return secrets.token_hex(16)


def title_of(text: str) -> str:
    """A title on one line, cut to TITLE_CHARS."""
    line = " ".join(str(text).split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


@dataclass(frozen=True)
class StoredTurn:
    """One turn as stored: what was asked, what was searched, and what came back."""

    question: str
    searched: str
    rewrite: str
    """How the searched query was made: as_is, offline or llm."""
    mode: str
    answer: str | None
    status: str
    chunk_ids: tuple[int, ...] = ()
    """The passages cited (an answer's citations, else the results), best first."""
    numbers: tuple[int, ...] = ()
    """The citation number of each passage in the answer's text ([n]); () for results."""
    at: float = field(default_factory=time.time)


class Conversations:
    """The conversations and turns tables of one database (see the module's docstring)."""

    def __init__(self, store: Any) -> None:
        """`store`: the `Store` whose connection (`db`) and writer thread (`owner`) to use."""
        self.store = store

    @property
    def db(self) -> duckdb.DuckDBPyConnection:
        """The store's connection (owner thread)."""
        return self.store.db

    @property
    def owner_thread(self) -> threading.Thread:
        """The thread that writes (the stores' writer)."""
        return self.store.owner

    def _read(self) -> duckdb.DuckDBPyConnection:
        if threading.current_thread() is self.owner_thread:
            return self.db
        return self.db.cursor()

    def _write(self, sql: str, params: list[Any]) -> int:
        """One statement in its own transaction on the writer thread; rows it changed."""
        if threading.current_thread() is not self.owner_thread:
            raise StoreError("a conversation write outside the knowledge base's writer thread")
        self.db.execute("BEGIN")
        try:
            row = self.db.execute(sql, params).fetchone()
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return int(row[0]) if row and row[0] is not None else 0

    # -- reads (any thread) -----------------------------------------------------------------

    def listed(self, owner: str, limit: int = LISTED) -> list[dict[str, Any]]:
        """The owner's conversations, the most recently continued first."""
        rows = self._read().execute(
            """SELECT c.id, c.title, c.created, c.updated,
                      (SELECT count(*) FROM turns t WHERE t.conversation = c.id)
               FROM conversations c WHERE c.owner = ?
               ORDER BY c.updated DESC, c.id LIMIT ?""", [owner, int(limit)]).fetchall()
        return [{"id": r[0], "title": r[1], "created": r[2], "updated": r[3], "turns": r[4]}
                for r in rows]

    def summary(self, conversation: str, owner: str) -> dict[str, Any]:
        """One conversation's id, title, created, updated and turn count (not found unless
        it is the owner's)."""
        row = self._read().execute(
            """SELECT c.id, c.title, c.created, c.updated,
                      (SELECT count(*) FROM turns t WHERE t.conversation = c.id)
               FROM conversations c WHERE c.id = ? AND c.owner = ?""",
            [str(conversation), owner]).fetchone()
        if row is None:
            raise _not_found(conversation)
        return {"id": row[0], "title": row[1], "created": row[2], "updated": row[3],
                "turns": row[4]}

    def turns(self, conversation: str, owner: str, last: int | None = None) -> list[StoredTurn]:
        """The turns of the owner's conversation (its `last` ones only when given), oldest
        first."""
        self.summary(conversation, owner)  # not found unless it is theirs
        rows = self._read().execute(
            """SELECT * FROM (
                   SELECT question, searched, rewrite, mode, answer, status, chunk_ids, numbers,
                          asked, ord FROM turns WHERE conversation = ?
                   ORDER BY ord DESC LIMIT ?) ORDER BY ord""",
            [conversation, 2**62 if last is None else int(last)]).fetchall()
        return [StoredTurn(r[0], r[1], r[2], r[3], r[4], r[5],
                           tuple(int(i) for i in (r[6] or ())),
                           tuple(int(n) for n in (r[7] or ())), r[8]) for r in rows]

    def owners(self) -> list[str]:
        """Everyone who has a conversation."""
        return [r[0] for r in self._read().execute(
            "SELECT DISTINCT owner FROM conversations ORDER BY owner").fetchall()]

    # -- writes (the writer thread) ---------------------------------------------------------

    def create(self, owner: str, title: str = "") -> dict[str, Any]:
        """A new, empty conversation of the owner's."""
        now = time.time()
        conversation = new_id()
        self._write("INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
                    [conversation, owner, title_of(title), now, now])
        return {"id": conversation, "title": title_of(title), "created": now, "updated": now,
                "turns": 0}

    def add_turn(self, conversation: str, owner: str, turn: StoredTurn) -> int:
        """Append a turn (the conversation's title becomes the first question when it has
        none); returns the turn's number, from 1."""
        if threading.current_thread() is not self.owner_thread:
            raise StoreError("a conversation write outside the knowledge base's writer thread")
        db = self.db
        db.execute("BEGIN")
        try:
            found = db.execute("SELECT title FROM conversations WHERE id = ? AND owner = ?",
                               [conversation, owner]).fetchone()
            if found is None:
                raise _not_found(conversation)
            number = scalar(db, "SELECT coalesce(max(ord), 0) + 1 FROM turns "
                            "WHERE conversation = ?", [conversation])
            db.execute("INSERT INTO turns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       [conversation, number, turn.question, turn.searched, turn.rewrite,
                        turn.mode, turn.answer, turn.status, list(turn.chunk_ids),
                        list(turn.numbers), turn.at])
            title = found[0] or title_of(turn.question)
            db.execute("UPDATE conversations SET updated = ?, title = ? WHERE id = ?",
                       [turn.at, title, conversation])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return int(number)

    def rename(self, conversation: str, owner: str, title: str) -> None:
        """Give the owner's conversation a new title."""
        changed = self._write(
            "UPDATE conversations SET title = ? WHERE id = ? AND owner = ? RETURNING 1",
            [title_of(title), str(conversation), owner])
        if not changed:
            raise _not_found(conversation)

    def delete(self, conversation: str, owner: str) -> None:
        """Delete the owner's conversation and its turns."""
        if not self._delete("c.id = ? AND c.owner = ?", [str(conversation), owner]):
            raise _not_found(conversation)

    def delete_owner(self, owner: str) -> int:
        """Delete all of one person's conversations; returns how many."""
        return self._delete("c.owner = ?", [owner])

    def prune(self, before: float, people: Mapping[str, float] | None = None) -> int:
        """Delete conversations last continued before `before` (a time), and, when `people`
        (name -> when the person was added) is given, those of anyone not in it or begun
        before that person was added (a namesake's); returns how many."""
        removed = self._delete("c.updated < ?", [float(before)])
        if people is not None:
            names = sorted(people)
            removed += self._delete(
                """c.id IN (SELECT c2.id FROM conversations c2 LEFT JOIN (
                       SELECT unnest(?::VARCHAR[]) AS name, unnest(?::DOUBLE[]) AS since) p
                       ON p.name = c2.owner
                   WHERE p.name IS NULL OR c2.created < p.since)""",
                [names, [float(people[n]) for n in names]])
        return removed

    def _delete(self, where: str, params: list[Any]) -> int:
        """Delete the conversations matching `where` (over `c`) with their turns."""
        if threading.current_thread() is not self.owner_thread:
            raise StoreError("a conversation write outside the knowledge base's writer thread")
        db = self.db
        db.execute("BEGIN")
        try:
            ids = [r[0] for r in db.execute(
                f"SELECT c.id FROM conversations c WHERE {where}", params).fetchall()]
            if ids:
                db.execute("DELETE FROM turns WHERE list_contains(?::VARCHAR[], conversation)",
                           [ids])
                db.execute("DELETE FROM conversations WHERE list_contains(?::VARCHAR[], id)",
                           [ids])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return len(ids)


def _not_found(conversation: object) -> ConversationNotFound:
    """The one answer for an id that does not exist and for someone else's."""
    shown = str(conversation)[:64]
    return ConversationNotFound(f"no conversation {shown!r}: it does not exist or was deleted")

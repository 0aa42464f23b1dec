"""The HTTP API's 2xx response models (documentation: the answers carry more fields than these
name, and are sent as the knowledge base returns them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from psirag_kb.serving.shapes import Location

__all__ = ["Reply"]


class Reply(BaseModel):
    """A JSON object answered with 200; the fields named are the ones always present."""

    model_config = ConfigDict(extra="allow")


class Health(Reply):
    """{ok, state} for anyone; with the admin token or an admin's or a monitor's also pid,
    data_dir (granted everything) and, while the daemon starts, the reason."""

    ok: bool
    pid: int | None = None
    data_dir: str | None = None
    state: str | None = None
    reason: str | None = None


class Status(Reply):
    """Files, chunks, tree and daemon state within the caller's grants."""

    files: dict[str, int]
    """Files by state: indexed, skipped, failed (unavailable when there are some)."""
    daemon: dict[str, Any] | None = None


class Copy(Reply):
    """Another file holding a passage found (the same manual as HTML and as PDF)."""

    source: str
    path: str | None = None
    chunk_id: int
    lines: list[int] | None = None
    location: Location | None = None


class Passage(Reply):
    """One passage found."""

    source: str
    chunk_id: int
    text: str
    lines: list[int] | None = None
    location: Location | None = None
    """Where it is in its document: a page, a slide, a sheet's rows, paragraphs under a
    heading... (None for a plain text file: see `lines`)."""
    also_in: list[Copy] | None = None
    """The other copies of this passage (other files holding the same text), when any."""


class QueryResult(Reply):
    """Ranked passages for a question (an answer with citations in agent mode)."""

    query: str
    mode: str
    results: list[Passage] | None = None


class TreeChild(Reply):
    """A child in a tree node: an abstract node ("node": its label and whether its abstract
    is stale) or a leaf ("leaf": its chunk's id, text, source and place)."""

    id: int
    kind: Literal["node", "leaf"]
    leaves: int
    abstract: str
    label: str | None = None
    dirty: bool | None = None
    source: str | None = None
    lines: list[int] | None = None
    location: Location | None = None


class TreeStep(Reply):
    """An abstract node on the way from the root to a chunk."""

    id: int
    layer: int
    abstract: str
    label: str
    dirty: bool


class TreeNode(TreeStep):
    """A tree node with its children (id 0: a root over what one person may see)."""

    parent: int | None
    leaves: int
    children: list[TreeChild]
    note: str | None = None
    """Said while the tree is an interim one over the passages a first ingest has indexed so
    far (the whole tree is built when it ends)."""


class TreePath(Reply):
    """The tree nodes above a chunk, root first."""

    chunk_id: int
    path: list[TreeStep]


class Chunk(Reply):
    """One chunk's text and location, with its neighbours in the file."""

    chunk_id: int
    text: str | None = None
    source: str | None = None
    lines: list[int] | None = None
    location: Location | None = None
    neighbours: list[dict[str, Any]] | None = None


class Problem(Reply):
    """A file skipped or failed, or indexed with a note."""

    path: str
    state: str
    reason: str


class IngestReport(Reply):
    """What a reindex read, changed and removed ({removed: 0} alone for a path that is gone
    and was never indexed)."""

    added: int | None = None
    updated: int | None = None
    unchanged: int | None = None
    removed: int
    renamed: int | None = None
    skipped: int | None = None
    failed: int | None = None
    chunks_embedded: int | None = None
    chunks_kept: int | None = None
    unavailable: int | None = None
    restored: int | None = None
    problems: list[Problem] | None = None
    seconds: dict[str, float] | None = None
    tree_build: dict[str, Any] | None = None
    compute: dict[str, Any] | None = None
    abstracts: dict[str, Any] | None = None
    """The offline abstracts of the tree nodes the reindex changed."""


class Removed(Reply):
    """How many files were removed from the index."""

    removed: int


class AnswerLine(Reply):
    """One NDJSON line of a streamed answer: {step}, then {answer} or {error}."""

    step: dict[str, Any] | None = None
    answer: dict[str, Any] | None = None
    error: str | None = None


class MaintainStarted(Reply):
    """The daemon's pid and the maintain job's runs ended so far."""

    pid: int
    runs: int


class Person(Reply):
    """A person: name, role and grants."""

    name: str
    role: str | None = None
    grants: list[str] | None = None


class People(Reply):
    """The people with their roles and grants."""

    users: list[Person]


class NewToken(Reply):
    """A token, shown this once."""

    name: str
    token: str


class Revoked(Reply):
    """The name of what was revoked."""

    revoked: str


class Conversation(Reply):
    """A conversation (with its turns when one is read)."""

    id: str
    title: str
    created: float
    updated: float
    turns: int | list[dict[str, Any]]


class Conversations(Reply):
    """The caller's conversations, most recently continued first."""

    conversations: list[Conversation]


class Deleted(Reply):
    """The id of what was deleted."""

    deleted: str


class Turn(Reply):
    """The query or answer object plus the question asked and what was searched."""

    question: str
    searched: str | None = None
    rewrite: Any = None


class TokenInfo(Reply):
    """A personal token, never its secret."""

    name: str
    created: float | None = None
    last_used: float | None = None


class Tokens(Reply):
    """The caller's personal tokens."""

    tokens: list[TokenInfo]


class Ready(Reply):
    """{ready: true, state: serving}, or {ready: false, state} with 503 and Retry-After; the
    reasons only for the admin token, an admin or a monitor."""

    ready: bool
    state: str | None = None
    reasons: list[str] | None = None


class Backup(Reply):
    """What a backup copied."""

    path: str
    generation: int | None = None
    chunks: int | None = None
    bytes: int | None = None


class ReembedStatus(Reply):
    """The reembed's status."""

    model: str | None = None
    state: str | None = None
    done: int | None = None
    total: int | None = None


class OpenAPIDocument(Reply):
    """An OpenAPI 3.1 document."""

    openapi: str
    paths: dict[str, Any]


class Model(Reply):
    """OpenAI's model object."""

    id: str
    object: str
    created: int
    owned_by: str


class ModelList(Reply):
    """OpenAI's model list."""

    object: str
    data: list[Model]


class ChatCompletion(Reply):
    """A chat.completion (or chat.completion.chunk events, then [DONE]), with its sources in
    `citations`."""

    id: str
    object: str
    model: str
    choices: list[dict[str, Any]]
    citations: list[dict[str, Any]] | None = None

"""The table of operations: each one's name, method, typed path, role, request and response
models and the app method it calls; the HTTP routes, the OpenAPI document and the clients are
made from it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel

from psirag_kb.serving import requests as rq
from psirag_kb.serving import responses as rs

__all__ = ["OPS", "NotFound", "Op", "op"]

Role = Literal["open", "reader", "editor", "admin", "monitor"]
PARAM_TYPES: dict[str, str] = {"str": r"[^/]+", "int": r"\d{1,18}", "signed": r"-?\d{1,18}"}
"""A path parameter's type -> the pattern its segment must match (else 404)."""
_PARAM = re.compile(r"\{([a-z_][a-z0-9_]*)(?::(str|int|signed))?\}")


class NotFound(Exception):
    """A path parameter that is not of its type (answered 404 "no <noun> <segment>")."""


@dataclass(frozen=True)
class Op:
    """One operation of the HTTP API."""

    name: str
    """Its operationId and the handler's name for a route that is not a plain call."""
    method: str
    path: str
    """The path with typed parameters: `/api/tree/{node_id:signed}`."""
    summary: str
    role: Role = "reader"
    """Who may call it: open (no token), reader and up, admin, or admin and monitor."""
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    response: type[BaseModel] | None = rs.Reply
    media: str = "application/json"
    target: str | None = None
    """The app method it calls with the path parameters, the request's args() and the
    caller's access; None when a handler of its name serves it."""
    args: dict[str, str] = field(default_factory=dict)
    """A path parameter's name -> the app method's argument it is passed as."""
    fixed: dict[str, Any] = field(default_factory=dict)
    """Arguments the app method is always given (the tree's root: node_id None)."""
    forwarded: bool = False
    """The daemon passes it to the knowledge base as is (with the caller's access)."""
    noun: str = ""
    """What a typed path parameter names, for its 404 ("tree node")."""
    errors: Literal["json", "openai"] = "json"
    checked: str = ""
    """The API's 403 message when the caller's role is not the op's ({name}, {role});
    empty when the operation itself checks who calls it."""
    client: str = ""
    """The clients' method that calls it, when not named after its target (`health`,
    `users`); operations sharing a method are told apart by `action`, else by the path
    parameters given (the one with the most of them, all given, is called)."""
    action: str = ""
    """The method's first argument that picks this operation (`users("add", ...)`)."""
    positional: tuple[str, ...] = ()
    """The method's positional arguments, when not the path parameters, then the body's or
    the query string's fields."""
    timeout: Literal["default", "short", "long", "llm"] = "default"
    """How long an HTTP client waits: short (health), long (a copy or a reindex of the whole
    knowledge base) or llm (the daemon's LLM calls); see `slow_if`."""
    slow_if: dict[str, Any] = field(default_factory=dict)
    """When given, `timeout` applies only if one of these arguments has its value."""
    paths: tuple[str, ...] = ()
    """Arguments that are paths on the client's machine: made absolute before they are sent."""
    folders: tuple[str, ...] = ()
    """Arguments that are lists of folders: made absolute unless the daemon is remote, left
    out when empty."""
    defaults: dict[str, Any] = field(default_factory=dict)
    """What an HTTP client sends for these arguments when they are not given."""
    sparse: bool = False
    """An HTTP client leaves out the arguments that are empty or false."""
    unwrap: str = ""
    """The field of the answer an HTTP client returns (the whole answer when empty)."""
    local: bool = False
    """The knowledge base has its target with the same arguments: an in-process client calls
    it (as it does a forwarded one)."""

    @property
    def params(self) -> dict[str, str]:
        """Path parameter name -> type."""
        return {m.group(1): m.group(2) or "str" for m in _PARAM.finditer(self.path)}

    @property
    def template(self) -> str:
        """The path without parameter types (OpenAPI's and Starlette's form)."""
        return _PARAM.sub(lambda m: "{" + m.group(1) + "}", self.path)

    def bind(self, raw: dict[str, str]) -> dict[str, Any]:
        """The path parameters as the app method's arguments (NotFound when one is not of
        its type)."""
        out: dict[str, Any] = dict(self.fixed)
        for name, kind in self.params.items():
            value = raw[name]
            if not re.fullmatch(PARAM_TYPES[kind], value):
                raise NotFound(f"no {self.noun or name} {value}")
            out[self.args.get(name, name)] = value if kind == "str" else int(value)
        return out

    def url(self, args: dict[str, Any]) -> str:
        """The path with the app method's arguments in place of its parameters (quoted)."""
        def filled(match: re.Match[str]) -> str:
            value = args.pop(self.args.get(match.group(1), match.group(1)))
            return quote(str(value), safe="")

        return _PARAM.sub(filled, self.path)

    def refusal(self, name: str, role: str) -> str | None:
        """The API's 403 message for a caller of `role`, or None when it may go on (an
        operation that checks its callers itself is reached by every role but monitor)."""
        if role == "monitor" and self.role not in ("open", "monitor"):
            return f"{name} is a monitor: metrics and health only"
        if self.checked and role not in _ADMITTED.get(self.role, (role,)):
            return self.checked.format(name=name, role=role)
        return None


_ADMITTED = {"admin": ("admin",), "monitor": ("admin", "monitor")}
_PEOPLE = "{name} is a {role}; only an admin manages people"
_USERS: dict[str, Any] = {"client": "users", "positional": ("action", "name", "role", "read")}
_ASK: dict[str, Any] = {"local": True, "timeout": "llm", "folders": ("within",),
                        "positional": ("question", "conversation", "history", "mode", "k",
                                       "within")}
OPS: tuple[Op, ...] = (
    Op("health", "GET", "/api/health", "Is the daemon up: 200 with its state word (\"serving\", "
       "or while it starts \"starting\", \"waiting\", \"restoring\", \"migrating\"), open "
       "to anyone; the pid and the reason only for an admin or a monitor.", role="open",
       response=rs.Health, client="health", timeout="short"),
    Op("status", "GET", "/api/status", "Files, chunks, tree and daemon state within the "
       "caller's grants.", response=rs.Status, target="status", local=True),
    Op("query", "POST", "/api/query", "Search: ranked passages for a question.",
       body=rq.QueryBody, response=rs.QueryResult, target="query", local=True, timeout="llm",
       slow_if={"mode": "agent", "summarize": True}, folders=("within",),
       defaults={"summarize": False}),
    Op("tree", "GET", "/api/tree", "The abstract tree's root and its children.",
       response=rs.TreeNode, target="node", fixed={"node_id": None}, local=True),
    Op("node", "GET", "/api/tree/{node_id:signed}", "One tree node and its children.",
       noun="tree node", response=rs.TreeNode, target="node", local=True),
    Op("path", "GET", "/api/path/{chunk_id:int}", "The tree path from the root to a chunk.",
       noun="chunk", response=rs.TreePath, target="path", unwrap="path"),
    Op("chunk", "GET", "/api/chunk/{chunk_id:int}", "One chunk's text and location, with up "
       "to 20 neighbours each side.", noun="chunk", query=rq.ChunkQuery, response=rs.Chunk,
       target="chunk", local=True, defaults={"neighbours": 0}),
    Op("reindex", "POST", "/api/reindex", "Read a file or folder again now (an editor within "
       "their grants).", role="editor", body=rq.PathBody, response=rs.IngestReport,
       target="reindex", timeout="long", paths=("path",)),
    Op("forget", "POST", "/api/forget", "Remove a file or folder from the index (an editor "
       "within their grants).", role="editor", body=rq.PathBody, response=rs.Removed,
       target="forget", timeout="long", paths=("path",)),
    Op("answer", "POST", "/api/answer", "The agent's answer, streamed: one {step} line per "
       "step, then {answer} or {error}.", body=rq.AnswerBody, response=rs.AnswerLine,
       media="application/x-ndjson"),
    Op("maintain", "POST", "/api/maintain", "Run the tree's maintenance now (an admin).",
       role="admin", response=rs.MaintainStarted, target="maintain"),
    Op("users_list", "GET", "/api/users", "The people and their roles and grants (admins).",
       role="admin", response=rs.People, checked=_PEOPLE, **_USERS, action="list"),
    Op("users_add", "POST", "/api/users", "Add a person; the answer holds their token, shown "
       "once (admins).", role="admin", body=rq.UserBody, response=rs.NewToken,
       checked=_PEOPLE, **_USERS, action="add", defaults={"read": []}),
    Op("users_revoke", "DELETE", "/api/users/{name}", "Remove a person and their token "
       "(admins).", role="admin", response=rs.Revoked, checked=_PEOPLE, **_USERS,
       action="revoke"),
    Op("users_rotate", "POST", "/api/users/{name}/rotate", "A new token for a person, the old "
       "one stops (admins).", role="admin", response=rs.NewToken, checked=_PEOPLE, **_USERS,
       action="rotate"),
    Op("users_grant", "POST", "/api/users/{name}/grant", "Let a person read more paths "
       "(admins).", role="admin", body=rq.GrantBody, response=rs.Person, checked=_PEOPLE,
       **_USERS, action="grant", defaults={"read": []}),
    Op("users_ungrant", "POST", "/api/users/{name}/ungrant", "Take paths from a person's "
       "grants (admins).", role="admin", body=rq.GrantBody, response=rs.Person,
       checked=_PEOPLE, **_USERS, action="ungrant", defaults={"read": []}),
    Op("conversations", "GET", "/api/conversations", "The caller's conversations, most "
       "recently continued first.", response=rs.Conversations, target="conversations",
       forwarded=True),
    Op("conversation_new", "POST", "/api/conversations", "Start a conversation (the title "
       "defaults to its first question).", body=rq.TitleBody, response=rs.Conversation,
       target="new_conversation", forwarded=True),
    Op("conversation_read", "GET", "/api/conversations/{conversation_id}", "One of the "
       "caller's conversations with its turns (passages re-checked against the grants of "
       "now).", response=rs.Conversation, target="conversation",
       args={"conversation_id": "conversation"}, local=True),
    Op("conversation_rename", "PATCH", "/api/conversations/{conversation_id}", "Rename a "
       "conversation.", body=rq.RenameBody, response=rs.Conversation,
       target="rename_conversation", args={"conversation_id": "conversation"},
       forwarded=True),
    Op("conversation_delete", "DELETE", "/api/conversations/{conversation_id}", "Delete a "
       "conversation.", response=rs.Deleted, target="delete_conversation",
       args={"conversation_id": "conversation"}, forwarded=True),
    Op("conversation_turn", "POST", "/api/conversations/{conversation_id}/turns", "Ask the "
       "next question of a conversation (a follow-up is resolved against its earlier turns; "
       "the turn is stored).", body=rq.TurnBody, response=rs.Turn, target="ask",
       args={"conversation_id": "conversation"}, **_ASK),
    Op("ask", "POST", "/api/ask", "A question after the earlier turns given in the body (a "
       "follow-up resolved, nothing stored).", body=rq.AskBody, response=rs.Turn,
       target="ask", **_ASK, defaults={"history": []}),
    Op("my_tokens", "GET", "/api/me/tokens", "The caller's own personal tokens (never the "
       "tokens).", response=rs.Tokens),
    Op("my_token_make", "POST", "/api/me/tokens", "Make a personal token for the caller "
       "(shown once).", body=rq.NameBody, response=rs.NewToken),
    Op("my_token_revoke", "DELETE", "/api/me/tokens/{name}", "Revoke one of the caller's "
       "personal tokens (at once).", noun="token", response=rs.Revoked),
    Op("ready", "GET", "/api/ready", "Readiness: 200 when the stores are open and no derived "
       "index is stale, else 503 with Retry-After and the state word (\"rebuilding\" an index, "
       "or one of the starting states of /api/health); the reasons only for an admin or a "
       "monitor (liveness is /api/health).", role="open", response=rs.Ready),
    Op("metrics_text", "GET", "/metrics", "Prometheus metrics (text format) for an admin or a "
       "monitor.", role="monitor", response=None, media="text/plain",
       checked="{name} is a {role}; metrics are for an admin or a monitor"),
    Op("backup", "POST", "/api/backup", "Copy the knowledge base while it serves into the "
       "folder `name` under the daemon's [backup] dir (an admin only; 409 when no [backup] dir "
       "is configured or the name is taken).", role="admin",
       body=rq.BackupBody, response=rs.Backup, target="backup", timeout="long"),
    Op("reembed", "POST", "/api/reembed", "Embed everything again with another model in the "
       "background (or cancel the running reembed); an admin only. `model` is a model's name "
       "or a folder inside the daemon's [embedding] models_dir (400 for a folder elsewhere, "
       "409 when no models_dir is configured).", role="admin",
       body=rq.ReembedBody, response=rs.ReembedStatus, target="reembed", sparse=True),
    Op("openapi", "GET", "/api/openapi.json", "This API's OpenAPI 3.1 description, generated "
       "from its table of operations.", response=rs.OpenAPIDocument),
    Op("v1_models", "GET", "/v1/models", "OpenAI-compatible: the one model, this knowledge "
       "base.", errors="openai", response=rs.ModelList),
    Op("v1_model", "GET", "/v1/models/{model}", "OpenAI-compatible: one model.",
       errors="openai", noun="model", response=rs.Model),
    Op("v1_chat", "POST", "/v1/chat/completions", "OpenAI-compatible chat: the last user "
       "message asked after the earlier turns, answered from the caller's folders (streamed "
       "as server-sent events with stream: true); the sources in a top-level `citations`.",
       errors="openai", body=rq.ChatBody, response=rs.ChatCompletion),
)
_BY_NAME = {entry.name: entry for entry in OPS}
MONITOR_PATHS = tuple(entry.path for entry in OPS if entry.role in ("open", "monitor"))
"""All that a person of role monitor may ask for."""
OPEN_PATHS = tuple(entry.path for entry in OPS if entry.role == "open")
"""Served without a token (their handlers show an anonymous caller less)."""


def op(name: str) -> Op:
    """The operation of that name."""
    return _BY_NAME[name]


def _unique(table: tuple[Op, ...]) -> None:
    """Refuse two operations for one method and path."""
    seen: set[tuple[str, str]] = set()
    for entry in table:
        key = (entry.method, re.sub(r"\{[^}]*\}", "{}", entry.path))
        if key in seen:
            raise ValueError(f"two operations for {entry.method} {entry.path}")
        seen.add(key)


_unique(OPS)

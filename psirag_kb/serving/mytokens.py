"""A person's own tokens, /api/me/tokens[/{name}]: the table's rows my_tokens, my_token_make and
my_token_revoke over `MyTokens`, served alike by the API and by the page's origin. Each server
finds its caller and reads the JSON body its own way; the checks, the calls, the audit records
and the answers (statuses and error texts) are these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psirag_kb.access import Access
from psirag_kb.people import MyTokens, PeopleError, UnknownPerson
from psirag_kb.serving.ops import Op, op
from psirag_kb.serving.requests import Body, Invalid, parse

__all__ = ["OPS", "Answer", "Audited", "by_path", "not_allowed", "serve"]

OPS: tuple[Op, ...] = (op("my_tokens"), op("my_token_make"), op("my_token_revoke"))
"""The operations, as the table declares them (method, path, body model)."""

ACTIONS = {"my_token_make": "token make", "my_token_revoke": "token revoke"}
"""An operation that changes something -> its action in audit.jsonl."""

Audited = Callable[[Access, str, str], None]
"""Records a change before it is made: (who, its action, the token's name)."""


@dataclass(frozen=True)
class Answer:
    """An operation's JSON answer and its status."""

    status: int
    payload: dict[str, Any]


def by_path() -> dict[str, dict[str, Op]]:
    """Each path of the operations (Starlette's form) -> its operations by method."""
    paths: dict[str, dict[str, Op]] = {}
    for entry in OPS:
        paths.setdefault(entry.template, {})[entry.method] = entry
    return paths


def not_allowed(method: str, path: str, by_method: dict[str, Op]) -> Answer:
    """The 405 for a method the path has no operation for (the API's text)."""
    return Answer(405, {"error": f"{method} is not allowed on {path}; use "
                                 f"{', '.join(sorted(by_method))}"})


def serve(mine: MyTokens, entry: Op, access: Access, params: dict[str, Any], body: Any,
          audited: Audited) -> Answer:
    """One of the operations for `access` (params: the path's, body: the decoded JSON body of
    an operation that has one): the table's refusal of the caller's role, then the body checked
    by the row's model, the change audited, the call; a person's refusal is 400, an unknown
    person or token 404 (blocking: the API runs it on a worker thread)."""
    refusal = entry.refusal(access.name, access.role)
    if refusal is not None:
        return Answer(403, {"error": refusal})
    try:
        if entry.name == "my_tokens":
            return Answer(200, mine.list(access))
        if entry.name == "my_token_make":
            assert entry.body is not None and issubclass(entry.body, Body)
            name = parse(entry.body, body).args()["name"]
            audited(access, ACTIONS[entry.name], name)
            return Answer(200, mine.make(access, name))
        if entry.name == "my_token_revoke":
            audited(access, ACTIONS[entry.name], params["name"])
            return Answer(200, mine.revoke(access, params["name"]))
    except Invalid as exc:
        return Answer(400, {"error": str(exc)})
    except UnknownPerson as exc:
        return Answer(404, {"error": str(exc)})
    except PeopleError as exc:
        return Answer(400, {"error": str(exc)})
    raise ValueError(f"{entry.name} is not one of the personal-token operations")

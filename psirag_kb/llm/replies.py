"""The agent's two reply protocols: JSON constrained by a schema, and Answer:/Retrieve: lines."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

ACTIONS = ("answer", "retrieve", "not_mentioned")
MAX_CITED = 8
"""Passage numbers one reply may cite."""

_FINAL = re.compile(
    r"^[ \t>*_#-]*(?:(?:the|my)\s+)?(?:final\s+)?(answer|retrieve|query)(?:[ \t*_]+is)?"
    r"[ \t*_]*(?:[:=–—]|-(?=[ \t]))[ \t*_]*(.*?)[ \t*_]*$",
    re.IGNORECASE | re.MULTILINE,
)
"""A final line: "Answer: X", "The answer is: X", "Answer - X", "**Final answer**: X", ..."""
_ANSWER_IS = re.compile(r"^[ \t>*_#-]*(?:the|my)\s+(?:final\s+)?(answer)\s+is\s+(.+?)[ \t*_.]*$",
                        re.IGNORECASE | re.MULTILINE)
"""A final line without a separator: "The answer is Delhi"."""
_CITED = re.compile(r"\[(\d{1,3})\]")
_UNANSWERABLE = re.compile(
    r"^(?:the answer is:? )?(not mentioned|not (?:stated|given|provided|found|known|available)|"
    r"unknown|none|n/?a|"
    r"(?:it )?cannot be (?:determined|answered|found)|no (?:answer|information)"
    r"(?: (?:is )?(?:given|provided|available))?)\W*$",
    re.IGNORECASE,
)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass
class Decision:
    """What one reply asks for: answer, retrieve or not_mentioned, its text and cited numbers."""

    action: str
    text: str
    cited: list[int] = field(default_factory=list)


class ReplyError(ValueError):
    """A reply that follows neither protocol; the message says what is wrong with it."""


class NotJSON(ReplyError):
    """A structured reply that is not JSON at all: the server ignored `format`."""


def schema(numbers: int, may_retrieve: bool) -> dict[str, Any]:
    """The JSON schema of one structured reply, given the passage numbers 1..`numbers` shown.

    The server enforces it while decoding: only shown passages can be cited, and with no
    retrieval left, "retrieve" cannot be chosen.
    """
    actions = list(ACTIONS if may_retrieve else ("answer", "not_mentioned"))
    item: dict[str, Any] = {"type": "integer"}
    if numbers > 0:
        item["enum"] = list(range(1, numbers + 1))
    return {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": actions},
            "text": {"type": "string"},
            "cited": {"type": "array", "items": item, "maxItems": MAX_CITED},
        },
        "required": ["action", "text", "cited"],
    }


def unanswerable(answer: str) -> bool:
    """Whether an answer says the documents do not contain it."""
    return bool(_UNANSWERABLE.match(answer.strip()))


def cited_numbers(values: Any, numbers: int) -> list[int]:
    """Distinct passage numbers among `values` that lie in 1..`numbers`, in order."""
    found = []
    for value in values if isinstance(values, list) else []:
        if isinstance(value, bool):
            continue
        if isinstance(value, str) and value.strip().strip("[]").isdigit():
            value = int(value.strip().strip("[]"))
        if isinstance(value, int) and 1 <= value <= numbers and value not in found:
            found.append(value)
    return found


def parse_json(reply: str, numbers: int) -> Decision:
    """The decision of a structured reply; ReplyError (NotJSON) for one that cannot be used.

    Citations outside 1..`numbers` are dropped; an answer saying the documents do not tell
    ("Not mentioned") becomes not_mentioned; an answer with no citations still answers.
    """
    text = reply.strip()
    fenced = _FENCE.match(text)
    text = fenced.group(1) if fenced else text
    if not text.startswith("{"):
        raise NotJSON(f"the reply is not a JSON object: {text[:60]!r}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ReplyError(f"the reply is not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ReplyError("the reply is not a JSON object")
    action = str(data.get("action", "")).strip().lower().replace(" ", "_")
    if action not in ACTIONS:
        raise ReplyError(f"unknown action {data.get('action')!r}: use one of {', '.join(ACTIONS)}")
    said = data.get("text")
    said = " ".join(said.split()).strip('"“”') if isinstance(said, str) else ""
    cited = cited_numbers(data.get("cited"), numbers)
    if action == "answer" and (not said or unanswerable(said)):
        action = "not_mentioned"
    if action == "retrieve" and not said:
        raise ReplyError("a retrieve action needs a query in \"text\"")
    if action == "not_mentioned":
        return Decision(action, "", [])
    return Decision(action, said, cited)


def parse_reply(reply: str) -> tuple[str, str] | None:
    """("answer" | "retrieve", text) from the last Answer:/Retrieve: line, or None."""
    found = [m for pattern in (_FINAL, _ANSWER_IS) for m in pattern.finditer(reply)
             if m.group(2).strip()]
    if not found:
        return None
    last = max(found, key=lambda m: m.start())
    action = "retrieve" if last.group(1).lower() == "query" else last.group(1).lower()
    return action, last.group(2).strip().strip('"“”').strip()


def parse_text(reply: str, numbers: int) -> Decision:
    """The decision of a text-protocol reply; ReplyError when it has no final line."""
    parsed = parse_reply(reply)
    if parsed is None:
        raise ReplyError("the reply ended with neither \"Answer:\" nor \"Retrieve:\"")
    action, said = parsed
    if action == "answer" and unanswerable(said):
        return Decision("not_mentioned", "", [])
    return Decision(action, said, cited_numbers(_CITED.findall(reply), numbers))


def as_json(decision: Decision) -> str:
    """A decision written as the structured protocol's reply."""
    return json.dumps({"action": decision.action, "text": decision.text,
                       "cited": decision.cited})


def as_text(decision: Decision) -> str:
    """A decision written as the text protocol's final line (with its citations)."""
    cited = " ".join(f"[{n}]" for n in decision.cited)
    thought = f"Thought: I rely on {cited}.\n" if cited else ""
    if decision.action == "retrieve":
        return f"{thought}Retrieve: {decision.text}"
    if decision.action == "not_mentioned":
        return "Answer: Not mentioned"
    return f"{thought}Answer: {decision.text}"

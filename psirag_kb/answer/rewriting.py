"""Follow-ups rewritten by the LLM: the earlier turns and the new question in, one standalone
search query out (JSON constrained by a schema, as the agent's replies are).

The rewrite is checked by `search.followup.resolve` (every content word must occur in the
history or the question); a failure of the LLM or an unreadable reply gives None, and the
offline rewrite is used instead.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from psirag_kb.answer.agent import llm_for
from psirag_kb.config import LLMConfig
from psirag_kb.errors import LLMError
from psirag_kb.search.followup import Rewriter, Turn

log = logging.getLogger(__name__)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}},
    "required": ["query"],
    "additionalProperties": False,
}
"""The structured reply: {"query": "..."}."""
SYSTEM = (
    "You turn the last question of a conversation into one standalone search query. Replace "
    "pronouns and references to earlier turns by what they refer to. Use only words from the "
    "conversation. Do not answer the question. Reply with JSON: {\"query\": \"...\"}."
)
PLAIN = "Reply with one line: Query: <the standalone search query>."
"""The request when the server gives no structured output."""
TURNS = 4
"""Earlier turns the LLM sees."""
ANSWER_CHARS = 400
"""Characters of an earlier answer the LLM sees."""
NUM_PREDICT = 64
_PLAIN_REPLY = re.compile(r"^\s*query\s*:\s*(.+)$", re.I | re.M)


def llm_rewriter(config: LLMConfig) -> Rewriter | None:
    """A rewriter asking [llm] agent_model, or None when no LLM is configured."""
    llm, _why = llm_for(config)
    if llm is None:
        return None
    model = config.agent_model

    def rewrite(history: Sequence[Turn], question: str) -> str | None:
        structured = config.structured and llm.structured(model)
        messages = prompt(history, question, structured)
        try:
            reply = llm.chat(model, messages, num_predict=NUM_PREDICT,
                             **({"schema": SCHEMA} if structured else {}))
        except LLMError as exc:
            log.info("follow-up not rewritten by the LLM (%s): the offline rewrite is used", exc)
            return None
        return parsed(reply)

    return rewrite


def prompt(history: Sequence[Turn], question: str, structured: bool) -> list[dict[str, str]]:
    """The chat messages: the instructions, the earlier turns, the new question."""
    lines = []
    for turn in history[-TURNS:]:
        lines.append(f"User: {turn.question}")
        if turn.answer:
            lines.append(f"Assistant: {' '.join(turn.answer.split())[:ANSWER_CHARS]}")
        if turn.headers:
            lines.append(f"(passages found: {'; '.join(turn.headers[:3])})")
    lines.append(f"Last question: {question}")
    system = SYSTEM if structured else f"{SYSTEM.rsplit(' Reply', 1)[0]} {PLAIN}"
    return [{"role": "system", "content": system},
            {"role": "user", "content": "\n".join(lines)}]


def parsed(reply: str) -> str | None:
    """The query of a reply ({"query"} JSON, or a "Query:" line), None when it has none."""
    text = reply.strip()
    try:
        value = json.loads(text)
    except ValueError:
        match = _PLAIN_REPLY.search(text)
        return " ".join(match.group(1).split()) if match else None
    if isinstance(value, dict) and isinstance(value.get("query"), str):
        query = " ".join(value["query"].split())
        return query or None
    return None

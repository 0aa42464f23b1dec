"""Summaries: tree passages in corpus order, written up by the LLM or shown with their abstracts."""

from __future__ import annotations

import logging
import re
from typing import Any

from psirag_kb.access import OWNER, Access
from psirag_kb.answer import agent_prompts as prompts
from psirag_kb.answer.agent import citation, llm_for
from psirag_kb.errors import KBError, LLMError

log = logging.getLogger(__name__)

NUM_CTX = 8192
"""Context window for up to ~20 passages of ~100 tokens plus the instructions."""
NUM_PREDICT = 400
"""Tokens a summary may use (SUMMARY_WORDS words and some slack)."""
_CITED = re.compile(r"\[(\d{1,3})\]")


def covering_abstracts(engine: Any, results: list[dict[str, Any]],
                       access: Access = OWNER) -> list[dict[str, Any]]:
    """The abstract of each passage's parent node, once per node, in passage order (for a
    person who may not read every leaf below a parent, that parent's abstract is left out)."""
    nodes: dict[int, dict[str, Any]] = {}
    for result in results:
        try:
            path = engine.path_of(int(result["chunk_id"]), access)
        except KBError:
            continue
        if path:
            parent = path[-1]
            entry = nodes.setdefault(parent["id"], {"node": parent["id"], "layer": parent["layer"],
                                                     "abstract": parent["abstract"],
                                                     "chunk_ids": []})
            entry["chunk_ids"].append(result["chunk_id"])
    return list(nodes.values())


def add_summary(engine: Any, result: dict[str, Any], llm: Any | None = None,
                access: Access = OWNER) -> dict[str, Any]:
    """Add "abstracts", and a written "summary" with "citations" when an LLM answers.

    `result` is a summarize query's result for the person `access` stands for: passages from
    the tree alone in corpus order, all of which they may read (the LLM sees only those).
    """
    passages = result["results"]
    result["abstracts"] = covering_abstracts(engine, passages, access)
    result.update(summary=None, citations=[], message="")
    reason = ""
    if llm is None:
        llm, reason = llm_for(engine.config.llm)
    if llm is None:
        result.update(status="no_llm", message=reason)
        return result
    if not passages:
        result.update(status="empty", message="nothing is indexed that matches the request")
        return result
    numbered = list(enumerate(passages, start=1))
    model = engine.config.llm.agent_model
    try:
        reply = llm.chat(model, prompts.summary_messages(result["query"], numbered),
                         num_ctx=NUM_CTX, num_predict=NUM_PREDICT)
    except LLMError as exc:
        log.warning("summary failed: %s", exc)
        result.update(status="no_llm", message=f"{exc}; showing the passages and abstracts")
        return result
    text = reply.strip()
    text = re.sub(r"^\s*summary\s*:\s*", "", text, flags=re.IGNORECASE)
    cited = [int(n) for n in _CITED.findall(text) if 1 <= int(n) <= len(passages)]
    chosen = [passages[n - 1] for n in dict.fromkeys(cited)] or passages
    result.update(
        status="summarized", summary=text,
        citations=[citation(p) for p in chosen],
    )
    return result

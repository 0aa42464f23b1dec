"""Summaries: tree passages in corpus order, written up by the LLM or shown with their abstracts."""

from __future__ import annotations

import logging
import re
from typing import Any

from psirag_kb.access import OWNER, Access
from psirag_kb.answer import agent_prompts as prompts
from psirag_kb.answer.agent import citation, llm_for
from psirag_kb.errors import KBError, LLMError
from psirag_kb.llm.grounding import check_abstract
from psirag_kb.search.overview import overview_text

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
    if "overview" in result:
        return _overview_summary(engine, result, llm, reason)
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


def _node_citation(entry: dict[str, Any], number: int) -> dict[str, Any]:
    """A citation of a tree node: its id, label and size."""
    return {"node": entry["node"], "label": entry["label"], "leaves": entry["leaves"],
            "number": number}


def _entry_text(entry: dict[str, Any]) -> str:
    """What the LLM reads of one top branch: its label, abstract and topics."""
    topics = "; ".join(entry["topics"])
    return f"{entry['label']}. {entry['abstract']}" + (f" Topics: {topics}." if topics else "")


def _overview_summary(engine: Any, result: dict[str, Any], llm: Any | None,
                      reason: str) -> dict[str, Any]:
    """A global question's summary from the top branches' labels and abstracts, citing the
    nodes: written by the LLM when one answers and its text is grounded in them, else
    composed from the labels."""
    entries = result["overview"]
    offline = overview_text(entries)
    passages = {int(p["chunk_id"]): p for p in result["results"]}

    def cite(numbers: list[int]) -> dict[str, Any]:
        """The nodes numbered so, and the passages under them as citations."""
        chosen = [entries[n - 1] for n in numbers]
        ids = {i for e in chosen for i in e.get("chunk_ids", [])}
        return {"nodes": [_node_citation(e, n) for n, e in zip(numbers, chosen, strict=True)],
                "citations": [citation(p) for i, p in passages.items() if i in ids]}

    result.update(status="overview", summary=offline, **cite(list(range(1, len(entries) + 1))),
                  message=reason or "composed from the tree's top branches")
    if llm is None or not entries:
        return result
    texts = [_entry_text(e) for e in entries]
    numbered = [(n, {"text": t}) for n, t in enumerate(texts, start=1)]
    try:
        reply = llm.chat(engine.config.llm.agent_model,
                         prompts.summary_messages(result["query"], numbered),
                         num_ctx=NUM_CTX, num_predict=NUM_PREDICT)
    except LLMError as exc:
        log.warning("overview summary failed: %s", exc)
        result["message"] = f"{exc}; composed from the tree's top branches"
        return result
    text = re.sub(r"^\s*summary\s*:\s*", "", reply.strip(), flags=re.IGNORECASE)
    verdict = check_abstract(_CITED.sub(" ", text), texts)
    if engine.config.llm.grounding and not verdict:
        result["message"] = (f"the model's summary was refused ({verdict.reason}); composed "
                             "from the tree's top branches")
        return result
    cited = [int(n) for n in _CITED.findall(text) if 1 <= int(n) <= len(entries)]
    chosen = list(dict.fromkeys(cited)) or list(range(1, len(entries) + 1))
    result.update(status="summarized", summary=text, **cite(chosen), message="")
    return result

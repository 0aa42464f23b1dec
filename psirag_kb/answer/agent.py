"""Retrieve-and-answer agent (paper Algorithm 3) with a hard retrieval cap and cited answers."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from psirag_kb.answer import agent_prompts as prompts
from psirag_kb.config import LLMConfig
from psirag_kb.errors import LLMError
from psirag_kb.llm.client import FormatRefused
from psirag_kb.llm.grounding import check_answer, restates
from psirag_kb.llm.replies import (
    Decision,
    NotJSON,
    ReplyError,
    as_json,
    as_text,
    parse_json,
    parse_text,
    schema,
)
from psirag_kb.search.multiround import multi_round, predict_hops

log = logging.getLogger(__name__)

NUM_CTX = 8192
"""Context window asked of Ollama: instructions, up to four rounds of passages and replies."""
NUM_PREDICT = 512
"""Tokens a reply may use (a bounded Thought plus the final line, or one JSON object)."""
NOT_MENTIONED = "Not mentioned"
STATUSES = ("answered", "not_mentioned", "error", "no_llm")

OnStep = Callable[[dict[str, Any]], None]


@dataclass
class Answer:
    """An answer with the passages it rests on and the retrieval steps taken."""

    query: str
    answer: str | None
    status: str
    citations: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    hops: int = 1
    message: str = ""
    results: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of `query --mode agent --json` and the API."""
        return {"mode": "agent", **asdict(self)}


@lru_cache(maxsize=4)
def _client(config: LLMConfig) -> Any:
    """One Ollama wrapper (over [llm] hosts) per LLM configuration, shared by answers and
    summaries."""
    from psirag_kb.llm.hosts import LLMPool

    return LLMPool(config)


def llm_for(config: LLMConfig) -> tuple[Any | None, str]:
    """(the LLM, "") when [llm] is enabled, else (None, why not)."""
    if not config.enabled:
        return None, ("no LLM is configured ([llm] enabled = false in config.toml; enable it "
                      "and run `ollama serve` for written answers)")
    return _client(config), ""


def answer_question(engine: Any, question: str, k: int | None = None,
                    on_step: OnStep | None = None, within: Any | None = None) -> Answer:
    """Agent mode over the query engine with the LLM its config names (or none); with `within`
    (paths, or the Scope they resolve to: a person's grants and what they asked for), every
    retrieval searches only there, so the LLM only ever sees passages the person may read."""
    llm, reason = llm_for(engine.config.llm)
    agent = RetrieveAndAnswer(engine, llm, engine.config.llm.agent_model, reason=reason,
                              within=within, structured=engine.config.llm.structured,
                              grounding=engine.config.llm.grounding)
    return agent.run(question, k, on_step)


def citation(passage: dict[str, Any], number: int | None = None) -> dict[str, Any]:
    """A citation: source, line range (files) or None (corpus records), location (a page, a
    slide, a sheet's rows; None for text files), chunk id and text."""
    cited = {key: passage.get(key)
             for key in ("source", "lines", "location", "chunk_id", "text", "path")}
    if number is not None:
        cited["number"] = number
    return cited


def ranked(passages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Passages renumbered 1.. in the result shape of the other modes."""
    return [{**p, "rank": i} for i, p in enumerate(passages, start=1)]


class _Context:
    """Passages seen so far, numbered in arrival order, with the best score each reached."""

    def __init__(self) -> None:
        self.numbered: dict[int, dict[str, Any]] = {}
        self.number_of: dict[int, int] = {}
        self.best: dict[int, tuple[float, int]] = {}

    def add(self, results: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
        """Record one retrieval; returns the passages new to the context with their numbers."""
        new = []
        for rank, result in enumerate(results, start=1):
            chunk = int(result["chunk_id"])
            score = (float(result["score"]), -rank)
            if chunk not in self.number_of:
                number = len(self.numbered) + 1
                self.numbered[number], self.number_of[chunk] = result, number
                new.append((number, result))
            self.best[chunk] = max(self.best.get(chunk, score), score)
        return new

    def by_score(self) -> list[dict[str, Any]]:
        """All passages, best score first (the max-score list), ties by arrival."""
        order = sorted(self.number_of, key=lambda c: (-self.best[c][0], -self.best[c][1],
                                                      self.number_of[c]))
        return [self.numbered[self.number_of[c]] for c in order]


class _Conversation:
    """The chat so far, kept as turns so it can be written in either reply protocol."""

    def __init__(self, structured: bool) -> None:
        self.structured = structured
        """JSON replies constrained by a schema (else the Answer:/Retrieve: text protocol)."""
        self.turns: list[tuple[str, Any]] = []

    def ask(self, question: str, docs: str, remaining: int) -> None:
        """A user turn: new documents, the question and the retrieval budget."""
        self.turns.append(("turn", (question, docs, remaining)))

    def refuse(self) -> None:
        """A user turn saying that the retrieval asked for at the cap was not run."""
        self.turns.append(("refuse", None))

    def refuse_echo(self) -> None:
        """A user turn saying that a retrieval of the question itself was not run."""
        self.turns.append(("echo", None))

    def replied(self, reply: str, decision: Decision) -> None:
        """The assistant's reply and what it decided."""
        self.turns.append(("reply", (reply, self.structured, decision)))

    def messages(self) -> list[dict[str, str]]:
        """The chat in the current protocol (replies given in the other one are rewritten)."""
        structured = self.structured
        out = [{"role": "system", "content": prompts.agent_system(structured)}]
        for kind, value in self.turns:
            if kind == "turn":
                question, docs, remaining = value
                out.append({"role": "user",
                            "content": prompts.agent_turn(question, docs, remaining, structured)})
            elif kind == "refuse":
                out.append({"role": "user", "content": prompts.no_retrieval_left(structured)})
            elif kind == "echo":
                out.append({"role": "user", "content": prompts.query_is_question(structured)})
            else:
                reply, was_structured, decision = value
                if was_structured != structured:
                    reply = as_json(decision) if structured else as_text(decision)
                out.append({"role": "assistant", "content": reply})
        return out


class RetrieveAndAnswer:
    """Algorithm 3: hybrid retrieval, then answer or ask for a reorganised query, up to a cap."""

    def __init__(self, engine: Any, llm: Any | None, model: str, hops_model: Any | None = None,
                 reason: str = "", within: Any | None = None, structured: bool = True,
                 grounding: bool = True) -> None:
        self.engine, self.model = engine, model
        self.llm: Any = llm
        """The LLM client (None: no LLM, multi-round retrieval alone)."""
        self.hops_model = hops_model
        self.reason = reason or "no LLM is configured ([llm] enabled = false)"
        self.within = within
        """The folders and files every retrieval is limited to (None: everything)."""
        self.structured = structured
        """Ask for JSON replies constrained by a schema; the text protocol when refused."""
        self.grounding = grounding
        """Refuse answers the passages do not support (they become not_mentioned)."""

    def hops(self, question: str) -> int:
        """Predicted hops (1..4): its minus one is the number of extra retrievals allowed."""
        if self.hops_model is not None and getattr(self.hops_model, "dim", None) == self.engine.dim:
            return int(self.hops_model.predict(question, self.engine.embed_query(question)))
        return predict_hops(self.engine, question)

    def _retrieve(self, text: str, k: int) -> list[dict[str, Any]]:
        """Hybrid top-k from the query engine (within the scope, when there is one)."""
        scoped = {} if self.within is None else {"within": self.within}
        return self.engine.query(text, mode="hybrid", k=k, **scoped)["results"]

    def run(self, question: str, k: int | None = None, on_step: OnStep | None = None,
            hops: int | None = None) -> Answer:
        """Answer a question; without a reachable LLM, retrieve over several rounds instead."""
        question = " ".join(question.split())
        k = k or self.engine.config.retrieval.k
        hops = max(1, min(4, hops if hops is not None else self.hops(question)))
        if self.llm is None:
            return self.fallback(question, k, hops, self.reason, on_step)
        try:
            self.llm.check(self.model)
        except LLMError as exc:
            return self.fallback(question, k, hops, str(exc), on_step)
        steps: list[dict[str, Any]] = []
        try:
            return self._loop(question, k, hops, steps, on_step)
        except LLMError as exc:
            log.warning("the agent's LLM failed: %s", exc)
            return self.fallback(question, k, hops, f"{exc} (failed after {len(steps)} "
                                 "step(s); showing passages retrieved without the LLM)",
                                 on_step, steps)

    def _loop(self, question: str, k: int, hops: int, steps: list[dict[str, Any]],
              on_step: OnStep | None) -> Answer:
        """The agent's conversation; appends each step to `steps` as it completes."""
        context = _Context()
        remaining = hops - 1
        query = question
        results = self._retrieve(query, k)
        new = context.add(results)
        talk = _Conversation(self.structured and self.llm.structured(self.model))
        while True:
            docs = prompts.documents(new) if new else prompts.NOTHING_NEW.format(
                numbers=", ".join(f"[{context.number_of[int(r['chunk_id'])]}]"
                                  for r in results) or "none")
            talk.ask(question, docs, remaining)
            step: dict[str, Any] = {"query": query, "passages": _ids(new), "remaining": remaining}
            steps.append(step)
            numbers = len(context.numbered)
            decision = self._reply(talk, step, numbers, remaining > 0)
            if decision is not None and decision.action == "retrieve" and remaining <= 0:
                step["refused"] = decision.text  # the cap is enforced here, not left to the model
                talk.refuse()
                decision = self._reply(talk, step, numbers, False)
            if decision is not None and decision.action == "retrieve" and restates(
                    decision.text, question):
                step["echo"] = decision.text  # the question again: the same documents, a hop lost
                talk.refuse_echo()
                decision = self._reply(talk, step, numbers, remaining > 0)
                if decision is not None and decision.action == "retrieve" and restates(
                        decision.text, question):
                    step["action"] = "not_mentioned"
                    _emit(on_step, step)
                    return self._finish(question, NOT_MENTIONED, "not_mentioned", context,
                                        steps, hops, decision, "the model asked twice to "
                                        "retrieve the question itself")
            step["action"] = decision.action if decision else "error"
            _emit(on_step, step)
            if decision is None:
                return self._finish(question, None, "error", context, steps, hops, None,
                                    f"the model's reply could not be used, twice "
                                    f"({step.get('problem', '')}); the raw reply is in the "
                                    "last step")
            if decision.action == "answer":
                refused = self._ungrounded(question, decision, context)
                if refused:
                    step["refused_answer"] = decision.text
                    return self._finish(question, NOT_MENTIONED, "not_mentioned", context,
                                        steps, hops, decision, f"the model's answer was "
                                        f"refused: {refused}; these are the passages found")
                return self._finish(question, decision.text, "answered", context, steps, hops,
                                    decision)
            if decision.action == "not_mentioned":
                return self._finish(question, NOT_MENTIONED, "not_mentioned", context, steps,
                                    hops, decision)
            if remaining <= 0:
                return self._finish(question, NOT_MENTIONED, "not_mentioned", context, steps,
                                    hops, decision, "the model asked to retrieve again with no "
                                    "retrievals left")
            remaining -= 1
            query = decision.text
            results = self._retrieve(query, k)
            new = context.add(results)

    def _ungrounded(self, question: str, decision: Decision, context: _Context) -> str:
        """Why an answer is not supported by the passages it cites (all, when it cites none),
        or "" when it is (or grounding is off)."""
        if not self.grounding:
            return ""
        cited = [context.numbered[n] for n in decision.cited if n in context.numbered]
        texts = [str(p.get("text", "")) for p in cited or context.numbered.values()]
        verdict = check_answer(decision.text, question, texts, prompts.EXAMPLE_ENTITIES)
        return "" if verdict else verdict.reason

    def _reply(self, talk: _Conversation, step: dict[str, Any], numbers: int,
               may_retrieve: bool) -> Decision | None:
        """Ask; a reply that cannot be used is retried once with a reminder of the protocol."""
        reply, decision, problem = self._ask(talk, numbers, may_retrieve)
        if decision is None:
            step.setdefault("unparseable", []).append(reply)
            reply, decision, problem = self._ask(talk, numbers, may_retrieve, (reply, problem))
        step["reply"] = reply
        step["protocol"] = "json" if talk.structured else "text"
        if decision is None:
            step["problem"] = problem
        else:
            talk.replied(reply, decision)
        return decision

    def _ask(self, talk: _Conversation, numbers: int, may_retrieve: bool,
             retry: tuple[str, str] | None = None) -> tuple[str, Decision | None, str]:
        """One chat turn: (reply, its decision or None, what was wrong with it).

        A server that refuses `format`, or ignores it (the reply is not JSON at all), gets the
        turn again in the text protocol, and the model is remembered as text-only.
        """
        while True:
            messages = talk.messages()
            if retry is not None:
                messages += [{"role": "assistant", "content": retry[0]}, {
                    "role": "user", "content": prompts.format_reminder(retry[1], talk.structured)}]
            if not talk.structured:
                reply = self._chat(messages)
                try:
                    return reply, parse_text(reply, numbers), ""
                except ReplyError as exc:
                    return reply, None, str(exc)
            try:
                reply = self._chat(messages, schema(numbers, may_retrieve))
            except FormatRefused as exc:
                log.info("structured output refused, using the text protocol: %s", exc)
                talk.structured = False
                continue
            try:
                return reply, parse_json(reply, numbers), ""
            except NotJSON:
                self.llm.refuse_format(self.model)  # the server ignored `format`
                talk.structured = False
            except ReplyError as exc:
                return reply, None, str(exc)

    def _chat(self, messages: list[dict[str, str]], reply_schema: dict[str, Any] | None = None
              ) -> str:
        """One chat at temperature 0, constrained to `reply_schema` when given."""
        extra = {} if reply_schema is None else {"schema": reply_schema}
        return self.llm.chat(self.model, messages, num_ctx=NUM_CTX, num_predict=NUM_PREDICT,
                             **extra)

    def _finish(self, question: str, answer: str | None, status: str, context: _Context,
                steps: list[dict[str, Any]], hops: int, decision: Decision | None,
                message: str = "") -> Answer:
        """The Answer: cited passages when the reply names them, else every passage given."""
        passages = context.by_score()
        if status == "answered":
            cited = decision.cited if decision is not None else []
            chosen = [context.numbered[n] for n in cited if n in context.numbered] or passages
            citations = [citation(p, context.number_of[int(p["chunk_id"])]) for p in chosen]
        else:
            citations = []
        results = ranked(chosen if status == "answered" else passages)
        return Answer(question, answer, status, citations, steps, hops, message, results)

    def fallback(self, question: str, k: int, hops: int, reason: str,
                 on_step: OnStep | None = None, steps: list[dict[str, Any]] | None = None
                 ) -> Answer:
        """Multi-round retrieval without an LLM: status no_llm, the passages as citations."""
        rounds = multi_round(self.engine, question, k, rounds=hops, within=self.within)
        steps = list(steps or [])
        for step in rounds.steps:
            steps.append(step)
            _emit(on_step, step)
        return Answer(question, None, "no_llm", [citation(r) for r in rounds.results], steps,
                      hops, f"{reason}; these are passages from {len(rounds.steps)} "
                      "retrieval(s) without an LLM", rounds.results)


def _ids(passages: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The compact form of passages in a step: number, chunk id and source."""
    return [{"number": n, "chunk_id": p["chunk_id"], "source": p["source"]} for n, p in passages]


def _emit(on_step: OnStep | None, step: dict[str, Any]) -> None:
    """Stream a finished step to the caller's callback, if any."""
    if on_step is not None:
        on_step(dict(step))

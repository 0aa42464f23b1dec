"""Retrieve-and-answer agent (paper Algorithm 3) with a hard retrieval cap and cited answers."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from psirag_kb.answer import agent_prompts as prompts
from psirag_kb.config import LLMConfig
from psirag_kb.errors import LLMError
from psirag_kb.search.multiround import multi_round, predict_hops

log = logging.getLogger(__name__)

NUM_CTX = 8192
"""Context window asked of Ollama: instructions, up to four rounds of passages and replies."""
NUM_PREDICT = 512
"""Tokens a reply may use (a bounded Thought plus the final line)."""
NOT_MENTIONED = "Not mentioned"
STATUSES = ("answered", "not_mentioned", "error", "no_llm")

_FINAL = re.compile(
    r"^[ \t>*_#-]*(answer|retrieve)[ \t*_]*:[ \t*_]*(.*?)[ \t*_]*$", re.IGNORECASE | re.MULTILINE
)
_CITED = re.compile(r"\[(\d{1,3})\]")
_UNANSWERABLE = re.compile(
    r"^(not mentioned|not (?:stated|given|provided|found|known)|unknown|none|n/?a|"
    r"(?:it )?cannot be (?:determined|answered|found)|no (?:answer|information)"
    r"(?: (?:is )?(?:given|provided|available))?)\W*$",
    re.IGNORECASE,
)

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
    """One Ollama wrapper per LLM configuration, shared by answers and summaries."""
    from psirag_kb.answer.llm import OllamaLLM

    return OllamaLLM(config)


def llm_for(config: LLMConfig) -> tuple[Any | None, str]:
    """(the LLM, "") when [llm] is enabled, else (None, why not)."""
    if not config.enabled:
        return None, ("no LLM is configured ([llm] enabled = false in config.toml; enable it "
                      "and run `ollama serve` for written answers)")
    return _client(config), ""


def answer_question(kb: Any, question: str, k: int | None = None,
                    on_step: OnStep | None = None, within: Any | None = None) -> Answer:
    """Agent mode for a knowledge base with the LLM its config names (or none); with `within`
    (paths, or the Scope they resolve to), every retrieval searches only there."""
    llm, reason = llm_for(kb.config.llm)
    agent = RetrieveAndAnswer(kb, llm, kb.config.llm.agent_model, reason=reason, within=within)
    return agent.run(question, k, on_step)


def parse_reply(reply: str) -> tuple[str, str] | None:
    """("answer" | "retrieve", text) from the last Answer:/Retrieve: line, or None."""
    found = [m for m in _FINAL.finditer(reply) if m.group(2).strip()]
    if not found:
        return None
    last = found[-1]
    return last.group(1).lower(), last.group(2).strip().strip('"“”').strip()


def unanswerable(answer: str) -> bool:
    """Whether an answer says the documents do not contain it."""
    return bool(_UNANSWERABLE.match(answer.strip()))


def citation(passage: dict[str, Any], number: int | None = None) -> dict[str, Any]:
    """A citation: source, line range (files) or None (corpus records), chunk id and text."""
    cited = {key: passage.get(key) for key in ("source", "lines", "chunk_id", "text", "path")}
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


class RetrieveAndAnswer:
    """Algorithm 3: hybrid retrieval, then answer or ask for a reorganised query, up to a cap."""

    def __init__(self, kb: Any, llm: Any | None, model: str, hops_model: Any | None = None,
                 reason: str = "", within: Any | None = None) -> None:
        self.kb, self.llm, self.model = kb, llm, model
        self.hops_model = hops_model
        self.reason = reason or "no LLM is configured ([llm] enabled = false)"
        self.within = within
        """The folders and files every retrieval is limited to (None: everything)."""

    def hops(self, question: str) -> int:
        """Predicted hops (1..4): its minus one is the number of extra retrievals allowed."""
        if self.hops_model is not None and getattr(self.hops_model, "dim", None) == self.kb.dim:
            return int(self.hops_model.predict(question, self.kb.embed_query(question)))
        return predict_hops(self.kb, question)

    def _retrieve(self, text: str, k: int) -> list[dict[str, Any]]:
        """Hybrid top-k through the facade (within the scope, when there is one)."""
        scoped = {} if self.within is None else {"within": self.within}
        return self.kb.query(text, mode="hybrid", k=k, **scoped)["results"]

    def run(self, question: str, k: int | None = None, on_step: OnStep | None = None,
            hops: int | None = None) -> Answer:
        """Answer a question; without a reachable LLM, retrieve over several rounds instead."""
        question = " ".join(question.split())
        k = k or self.kb.config.retrieval.k
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

    def _ask(self, messages: list[dict[str, str]]) -> str:
        """One chat turn at temperature 0."""
        return self.llm.chat(self.model, messages, num_ctx=NUM_CTX, num_predict=NUM_PREDICT)

    def _loop(self, question: str, k: int, hops: int, steps: list[dict[str, Any]],
              on_step: OnStep | None) -> Answer:
        """The agent's conversation; appends each step to `steps` as it completes."""
        context = _Context()
        remaining = hops - 1
        query = question
        results = self._retrieve(query, k)
        new = context.add(results)
        messages = [{"role": "system", "content": prompts.agent_system()}]
        while True:
            docs = prompts.documents(new) if new else prompts.NOTHING_NEW.format(
                numbers=", ".join(f"[{context.number_of[int(r['chunk_id'])]}]"
                                  for r in results) or "none")
            messages.append({"role": "user",
                             "content": prompts.agent_turn(question, docs, remaining)})
            step: dict[str, Any] = {"query": query, "passages": _ids(new), "remaining": remaining}
            steps.append(step)
            reply, parsed = self._reply(messages, step)
            if parsed is not None and parsed[0] == "retrieve" and remaining <= 0:
                step["refused"] = parsed[1]  # the cap is enforced here, not left to the model
                messages += [{"role": "assistant", "content": reply},
                             {"role": "user", "content": prompts.NO_RETRIEVAL_LEFT}]
                reply, parsed = self._reply(messages, step)
            step["action"] = parsed[0] if parsed else "error"
            _emit(on_step, step)
            if parsed is None:
                return self._finish(question, None, "error", context, steps, hops, reply,
                                    "the model's reply ended with neither \"Answer:\" nor "
                                    "\"Retrieve:\", twice; the raw reply is in the last step")
            action, text = parsed
            if action == "answer":
                if unanswerable(text):
                    return self._finish(question, NOT_MENTIONED, "not_mentioned", context,
                                        steps, hops, reply)
                return self._finish(question, text, "answered", context, steps, hops, reply)
            if remaining <= 0:
                return self._finish(question, NOT_MENTIONED, "not_mentioned", context, steps,
                                    hops, reply, "the model asked to retrieve again with no "
                                    "retrievals left")
            messages.append({"role": "assistant", "content": reply})
            remaining -= 1
            query = text
            results = self._retrieve(query, k)
            new = context.add(results)

    def _reply(self, messages: list[dict[str, str]], step: dict[str, Any]
               ) -> tuple[str, tuple[str, str] | None]:
        """Ask; an unparseable reply is retried once with a reminder of the format."""
        reply = self._ask(messages)
        parsed = parse_reply(reply)
        if parsed is None:
            step.setdefault("unparseable", []).append(reply)
            retry = [*messages, {"role": "assistant", "content": reply},
                     {"role": "user", "content": prompts.FORMAT_REMINDER}]
            reply = self._ask(retry)
            parsed = parse_reply(reply)
        step["reply"] = reply
        return reply, parsed

    def _finish(self, question: str, answer: str | None, status: str, context: _Context,
                steps: list[dict[str, Any]], hops: int, reply: str, message: str = ""
                ) -> Answer:
        """The Answer: cited passages when the reply names them, else every passage given."""
        passages = context.by_score()
        cited = [int(n) for n in _CITED.findall(reply) if int(n) in context.numbered]
        if status == "answered":
            chosen = [context.numbered[n] for n in dict.fromkeys(cited)] or passages
            citations = [citation(p, context.number_of[int(p["chunk_id"])]) for p in chosen]
        else:
            citations = []
        results = ranked(chosen if status == "answered" else passages)
        return Answer(question, answer, status, citations, steps, hops, message, results)

    def fallback(self, question: str, k: int, hops: int, reason: str,
                 on_step: OnStep | None = None, steps: list[dict[str, Any]] | None = None
                 ) -> Answer:
        """Multi-round retrieval without an LLM: status no_llm, the passages as citations."""
        rounds = multi_round(self.kb, question, k, rounds=hops, within=self.within)
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

"""OpenAI's chat-completions format over the knowledge base: a request's `messages` read as a
conversation, and an answer (or the passages found) written back as a completion or as
server-sent chunks, with the sources as a top-level `citations` list."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["MODEL", "ChatRequest", "ChunkStream", "chunks", "completion", "models", "parse",
           "reply"]

MODEL = "psirag-kb"
"""The one model the endpoint lists: this knowledge base, as the caller may read it."""
CREATED = 1_700_000_000
"""The model's `created` time in /v1/models (a fixed epoch second)."""
MAX_MESSAGES = 200
ROLES = ("system", "developer", "user", "assistant", "tool")
IGNORED = frozenset({
    "temperature", "top_p", "n", "stop", "max_tokens", "max_completion_tokens",
    "presence_penalty", "frequency_penalty", "logit_bias", "user", "seed", "stream_options",
    "response_format", "tools", "tool_choice", "parallel_tool_calls", "logprobs",
    "top_logprobs", "metadata", "store", "reasoning_effort", "modalities", "service_tier",
})
"""Request fields chat apps send that do not change what the knowledge base answers."""


@dataclass(frozen=True)
class ChatRequest:
    """A chat-completions request: the last user message, the turns before it, streaming."""

    model: str
    question: str
    history: list[dict[str, str]]
    stream: bool


def text_of(content: Any, where: str) -> str:
    """A message's content as text (a string, or the text parts of a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise ValueError(f"{where}.content parts must be objects with a type")
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise ValueError(f"{where}.content text parts need a string text")
                parts.append(part["text"])
        return "\n".join(parts)
    if content is None:
        return ""
    raise ValueError(f"{where}.content must be a string or a list of parts")


def parse(body: Any) -> ChatRequest:
    """A request body read strictly enough to say what is wrong (ValueError), loosely enough
    for what chat apps add (sampling options are accepted and ignored)."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    unknown = sorted(set(body) - IGNORED - {"model", "messages", "stream"})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError("field 'model' must name a model (see GET /v1/models)")
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise ValueError("field 'stream' must be a boolean")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("field 'messages' must be a non-empty list")
    if len(messages) > MAX_MESSAGES:
        raise ValueError(f"field 'messages' holds at most {MAX_MESSAGES} messages")
    read: list[dict[str, str]] = []
    for number, message in enumerate(messages):
        where = f"messages[{number}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise ValueError(f"{where} must be an object with a role of {', '.join(ROLES)}")
        if message["role"] in ("tool", "developer"):
            continue  # neither a question nor an answer of the conversation
        read.append({"role": message["role"],
                     "content": text_of(message.get("content"), where)})
    if not read or read[-1]["role"] != "user":
        raise ValueError("the last message must be the user's question")
    question = read[-1]["content"].strip()
    if not question:
        raise ValueError("the last user message is empty")
    return ChatRequest(model, question, read[:-1], bool(stream))


def models() -> dict[str, Any]:
    """The /v1/models list."""
    return {"object": "list", "data": [model_entry()]}


def model_entry() -> dict[str, Any]:
    """The one model's entry."""
    return {"id": MODEL, "object": "model", "created": CREATED, "owned_by": "psirag-kb"}


def citations(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The sources of an ask result: the cited passages, else the passages found."""
    rows = result.get("citations") or result.get("results") or []
    out = []
    for number, row in enumerate(rows, start=1):
        out.append({"number": row.get("number") or number, "source": row.get("source"),
                    "lines": row.get("lines"), "location": row.get("location"),
                    "chunk_id": row.get("chunk_id"), "text": row.get("text") or ""})
    return out


def reply(result: dict[str, Any]) -> str:
    """The assistant's message: the agent's answer with its numbered sources, or the passages
    found as Markdown (their text fenced, so a document's markup is never rendered)."""
    cited = citations(result)
    lines: list[str] = []
    searched = str(result.get("searched") or result.get("query") or "")
    if result.get("rewrite") not in (None, "as_is") and searched:
        lines += [f"searched: {_code(searched)}", ""]
    answer = result.get("answer")
    if result.get("status") in ("answered", "summarized") and isinstance(answer, str):
        lines += [answer.strip(), ""]
        if cited:
            lines.append("Sources:")
            lines += [f"[{c['number']}] {_where(c)}" for c in cited]
        return "\n".join(lines).strip()
    if not cited:
        why = result.get("message") or "Nothing in your folders matches this question."
        return "\n".join([*lines, str(why)]).strip()
    note = "Passages found"
    if result.get("status") == "no_llm":
        note += " (no LLM is configured, so there is no written answer)"
    lines += [f"{note}:", ""]
    for entry in cited:
        lines += [f"**[{entry['number']}]** {_where(entry)}", _fence(entry["text"]), ""]
    return "\n".join(lines).strip()


def _where(entry: dict[str, Any]) -> str:
    """A passage's file and place, as inline code (a path is never rendered as markup)."""
    place = [_code(str(entry.get("source") or "?"))]
    lines = entry.get("lines")
    if isinstance(lines, list | tuple) and len(lines) == 2:
        place.append(f"lines {lines[0]}-{lines[1]}")
    if entry.get("location"):
        place.append(_code(str(entry["location"])))
    return ", ".join(place)


def _code(text: str) -> str:
    """Inline code that no backtick in `text` can close early."""
    text = " ".join(text.split())
    run = max((len(found) for found in _runs(text)), default=0)
    fence = "`" * (run + 1)
    return f"{fence} {text} {fence}" if run else f"`{text}`"


def _runs(text: str) -> list[str]:
    """The runs of backticks in `text`."""
    out, current = [], ""
    for char in text:
        if char == "`":
            current += char
        elif current:
            out.append(current)
            current = ""
    if current:
        out.append(current)
    return out


def _fence(text: str) -> str:
    """A fenced code block longer than any backtick run in `text`."""
    longest = max((len(run) for run in _runs(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def completion(request: ChatRequest, result: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed chat.completion with the sources beside the choices."""
    return {
        "id": _id(), "object": "chat.completion", "created": int(time.time()),
        "model": request.model,
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": reply(result)}}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "citations": citations(result), **_extra(result),
    }


class ChunkStream:
    """A reply as server-sent chat.completion.chunk events: the role at once, then the text
    in pieces, the sources in the last chunk, and `data: [DONE]`."""

    DONE = b"data: [DONE]\n\n"
    KEEP_ALIVE = b": working\n\n"
    """A comment line: clients ignore it, proxies see the stream is alive."""

    def __init__(self, request: ChatRequest, piece_chars: int = 400) -> None:
        self.request = request
        self.piece_chars = piece_chars
        self.ident, self.created = _id(), int(time.time())

    def event(self, delta: dict[str, Any], finish: str | None = None,
              **extra: Any) -> bytes:
        """One chunk."""
        chunk = {"id": self.ident, "object": "chat.completion.chunk", "created": self.created,
                 "model": self.request.model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                              "logprobs": None}], **extra}
        return b"data: " + json.dumps(chunk).encode("utf-8") + b"\n\n"

    def first(self) -> bytes:
        """The chunk that opens the assistant's message."""
        return self.event({"role": "assistant", "content": ""})

    def rest(self, result: dict[str, Any]) -> Iterator[bytes]:
        """The reply's text in pieces, the final chunk with the sources, then [DONE]."""
        text = reply(result)
        for start in range(0, len(text), self.piece_chars):
            yield self.event({"content": text[start:start + self.piece_chars]})
        yield self.event({}, "stop", citations=citations(result), **_extra(result))
        yield self.DONE

    def failed(self, message: str, kind: str = "invalid_request_error") -> Iterator[bytes]:
        """An error after the stream began, as OpenAI sends one (an `error` event), then
        [DONE]."""
        error = {"error": {"message": message, "type": kind, "code": None, "param": None}}
        yield b"data: " + json.dumps(error).encode("utf-8") + b"\n\n"
        yield self.DONE


def chunks(request: ChatRequest, result: dict[str, Any]) -> Iterator[bytes]:
    """A whole reply as server-sent chunks (see ChunkStream)."""
    stream = ChunkStream(request)
    yield stream.first()
    yield from stream.rest(result)


def _extra(result: dict[str, Any]) -> dict[str, Any]:
    """What the knowledge base adds beside OpenAI's fields: the query searched and how."""
    return {"psirag": {"searched": result.get("searched") or result.get("query"),
                       "rewrite": result.get("rewrite"), "status": result.get("status")}}


def _id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)

"""Ollama client wrapper: deterministic chat, availability checks and clear errors."""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any

from psirag_kb.config import LLMConfig
from psirag_kb.errors import LLMError, LLMUnavailable

log = logging.getLogger(__name__)

DEFAULT_HOST = "http://127.0.0.1:11434"
AVAILABILITY_TTL_S = 30.0
REPEAT_PENALTY = 1.3
"""Repeat penalty of every generation: small models otherwise loop on a phrase."""
_FORMAT_WORDS = re.compile(r"format|schema|grammar", re.IGNORECASE)


class FormatRefused(LLMError):
    """The server refused structured output (a JSON schema in `format`): use the text protocol."""


def ollama_host(config: LLMConfig) -> str:
    """The Ollama URL: the configured host, else $OLLAMA_HOST, else the local default."""
    return config.host or os.environ.get("OLLAMA_HOST", "") or DEFAULT_HOST


def _installed(model: str, names: set[str]) -> bool:
    """True when `model` is among the installed names (a missing tag means `latest`)."""
    wanted = model if ":" in model else f"{model}:latest"
    return model in names or wanted in names


class OllamaLLM:
    """A thin, thread-safe wrapper over `ollama.Client` that turns every failure into LLMError."""

    def __init__(self, config: LLMConfig, host: str = "") -> None:
        """`host`: the server's URL (default: the one `ollama_host` gives)."""
        import ollama  # imported lazily: pydantic makes it slow to import

        self.config = config
        self.host = host or ollama_host(config)
        self._client = ollama.Client(host=self.host, timeout=config.timeout_s)
        self._lock = threading.Lock()
        self._checked: dict[str, tuple[float, bool]] = {}
        self._plain: set[str] = set()

    def _unreachable(self) -> LLMUnavailable:
        """The error for a server that cannot be contacted."""
        return LLMUnavailable(
            f"Ollama at {self.host} is not reachable: start it with `ollama serve`, "
            "or set [llm] enabled = false"
        )

    def _missing(self, model: str) -> LLMUnavailable:
        """The error for a model the server does not have."""
        return LLMUnavailable(
            f"Ollama at {self.host}: model {model} is not installed: run `ollama pull {model}`"
        )

    def _translate(self, exc: Exception, model: str, what: str) -> LLMUnavailable:
        """Map a client, transport or decoding exception to one LLMError with the fix."""
        import httpx
        import ollama

        if isinstance(exc, ollama.ResponseError):
            text = str(exc.error)
            if exc.status_code == 404 or "not found" in text.lower():
                return self._missing(model)
            return LLMUnavailable(
                f"Ollama at {self.host} failed during {what} with model {model}: "
                f"{text} (HTTP {exc.status_code})"
            )
        if isinstance(exc, httpx.TimeoutException):
            return LLMUnavailable(
                f"Ollama at {self.host} did not answer {what} with model {model} within "
                f"{self.config.timeout_s:g} s: raise [llm] timeout_s or use a smaller model"
            )
        if isinstance(exc, ConnectionError | httpx.ConnectError):
            return self._unreachable()
        if isinstance(exc, httpx.HTTPError):
            return LLMUnavailable(
                f"connection to Ollama at {self.host} failed during {what}: {exc!r}; "
                "check that the server is healthy (`ollama serve`)"
            )
        return LLMUnavailable(f"Ollama at {self.host} sent an unreadable reply to {what}: {exc}")

    def _errors(self) -> tuple[type[Exception], ...]:
        """Exception types the client raises for transport and protocol failures."""
        import httpx
        import ollama
        import pydantic

        return (ollama.ResponseError, httpx.HTTPError, ConnectionError,
                pydantic.ValidationError, ValueError)

    def check(self, model: str) -> None:
        """Raise LLMError unless the server answers and has `model` installed."""
        try:
            listing = self._client.list()
        except self._errors() as exc:
            error = self._translate(exc, model, "listing models")
            if "not installed" in str(error):  # a 404 on /api/tags: not an Ollama server
                error = self._unreachable()
            raise error from exc
        names = {str(m.model) for m in listing.models if m.model}
        if not _installed(model, names):
            raise self._missing(model)

    def available(self, model: str) -> bool:
        """Whether `check(model)` passes; the answer is cached for ~30 s."""
        now = time.monotonic()
        with self._lock:
            cached = self._checked.get(model)
        if cached is not None and now - cached[0] < AVAILABILITY_TTL_S:
            return cached[1]
        try:
            self.check(model)
            ok = True
        except LLMError as exc:
            log.info("LLM unavailable: %s", exc)
            ok = False
        with self._lock:
            self._checked[model] = (now, ok)
        return ok

    def structured(self, model: str) -> bool:
        """Whether `model` may be asked for structured output (not refused before)."""
        with self._lock:
            return model not in self._plain

    def refuse_format(self, model: str) -> None:
        """Remember that the server will not give `model` structured output."""
        with self._lock:
            self._plain.add(model)
        log.warning("Ollama at %s gives no structured output for %s: using the text protocol",
                    self.host, model)

    def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        num_ctx: int | None = None,
        num_predict: int | None = None,
        schema: dict[str, Any] | None = None,
    ) -> str:
        """Send one non-streaming chat at temperature 0 and return the reply text.

        With `schema`, the reply is constrained to that JSON schema (Ollama's `format`); a
        server refusing it raises FormatRefused and is remembered for the model.
        """
        options: dict[str, Any] = {"temperature": 0, "repeat_penalty": REPEAT_PENALTY}
        if num_ctx is not None:
            options["num_ctx"] = int(num_ctx)
        if num_predict is not None:
            options["num_predict"] = int(num_predict)
        extra = {} if schema is None else {"format": schema}
        started = time.perf_counter()
        try:
            response = self._client.chat(  # type: ignore[call-overload]  # format in extra
                model=model, messages=messages, options=options, stream=False, **extra
            )
            content = response.message.content if response.message else None
        except self._errors() as exc:
            if schema is not None and _refuses_format(exc):
                self.refuse_format(model)
                raise FormatRefused(
                    f"Ollama at {self.host} refused structured output for model {model}: "
                    f"{getattr(exc, 'error', exc)}"
                ) from exc
            error = self._translate(exc, model, "a chat request")
            if "not reachable" in str(error):
                with self._lock:
                    self._checked[model] = (time.monotonic(), False)
            raise error from exc
        log.debug("chat with %s took %.2f s", model, time.perf_counter() - started)
        if not content or not content.strip():
            raise LLMError(f"Ollama at {self.host} returned an empty reply from model {model}")
        return content


def _refuses_format(exc: Exception) -> bool:
    """Whether a failed request was refused because of its `format` (not a missing model)."""
    import ollama

    if not isinstance(exc, ollama.ResponseError) or exc.status_code == 404:
        return False
    return bool(_FORMAT_WORDS.search(str(exc.error)))

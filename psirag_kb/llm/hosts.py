"""Several Ollama servers as one LLM: per-host slots, backoff of failing hosts, per-host rates."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from psirag_kb.backoff import Backoff
from psirag_kb.config import LLMConfig
from psirag_kb.errors import LLMError, LLMUnavailable
from psirag_kb.llm.client import OllamaLLM, ollama_host

log = logging.getLogger(__name__)

HOST_BACKOFF_S = (15.0, 600.0)
"""First and longest wait before a failed host is asked again (doubling per failure)."""
WAKE_S = 1.0
"""Longest wait for a free slot before looking again (a backoff may have ended)."""

T = TypeVar("T")
R = TypeVar("R")


def host_urls(config: LLMConfig) -> list[str]:
    """The servers to use: [llm] hosts, else the one host `ollama_host` gives."""
    return list(config.hosts) or [ollama_host(config)]


class Calls:
    """Chats asked of each Ollama host by this process and how many failed (for /metrics)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._counts: dict[str, list[int]] = {}

    def record(self, host: str, failed: bool) -> None:
        """Count one chat of `host`."""
        with self._mutex:
            counts = self._counts.setdefault(host, [0, 0])
            counts[0] += 1
            counts[1] += int(failed)

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """{host: (requests, failures)} so far."""
        with self._mutex:
            return {host: (c[0], c[1]) for host, c in self._counts.items()}


CALLS = Calls()
"""Every pool's chats in this process (pools come and go with agent answers)."""


@dataclass
class _Host:
    """One server, its slots in use and what it did."""

    llm: OllamaLLM
    slots: int
    busy: int = 0
    answered: int = 0
    backoffs: int = 0
    backoff: Backoff = field(default_factory=lambda: Backoff(*HOST_BACKOFF_S))
    """Its failures in a row and the wait after them."""
    retry_at: float = 0.0
    last_used: int = 0
    last_error: str = ""


@dataclass(frozen=True)
class Mark:
    """Answers of every host at one moment, for rates over a run."""

    at: float
    answered: tuple[int, ...]


class LLMPool:
    """The OllamaLLM interface over one or more hosts: each chat takes a free slot on a
    healthy host (least busy first); a host that fails is backed off and the chat goes on
    another; only when every host failed does the caller get the error."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self._hosts = [_Host(OllamaLLM(config, url), config.host_concurrency)
                       for url in host_urls(config)]
        self._free = threading.Condition()
        self._uses = 0

    @property
    def host(self) -> str:
        """The hosts' URLs, comma-separated (for messages)."""
        return ", ".join(h.llm.host for h in self._hosts)

    @property
    def width(self) -> int:
        """Chats the pool runs at once: the slots of every host."""
        return sum(h.slots for h in self._hosts)

    def structured(self, model: str) -> bool:
        """Whether `model` may be asked for structured output on every host."""
        return all(h.llm.structured(model) for h in self._hosts)

    def refuse_format(self, model: str) -> None:
        """Remember on every host that `model` gets the text protocol."""
        for h in self._hosts:
            h.llm.refuse_format(model)

    def check(self, model: str) -> None:
        """Pass when one host answers and has `model` (healthy hosts asked first); hosts that
        fail are backed off; raise the error (every host's, with several) when none passes."""
        errors: list[tuple[_Host, LLMError]] = []
        for h in self._order():
            try:
                h.llm.check(model)
            except LLMError as exc:
                self._failed(h, exc)
                errors.append((h, exc))
                continue
            with self._free:
                h.retry_at = 0.0
                h.backoff.reset()
            return
        raise self._all_failed(errors)

    def chat(self, model: str, messages: list[dict[str, Any]], **options: Any) -> str:
        """OllamaLLM.chat on a free slot of a healthy host, retried on the others when a host
        fails (unreachable, an HTTP error, a timeout, the model missing)."""
        tried: set[int] = set()
        errors: list[tuple[_Host, LLMError]] = []
        while True:
            h = self._acquire(tried)
            if h is None:
                raise self._all_failed(errors)
            try:
                text = h.llm.chat(model, messages, **options)
            except LLMUnavailable as exc:
                CALLS.record(h.llm.host, failed=True)
                self._release(h)
                self._failed(h, exc)
                tried.add(id(h))
                errors.append((h, exc))
                continue
            except BaseException:
                self._release(h)
                raise
            CALLS.record(h.llm.host, failed=False)
            self._release(h, answered=True)
            return text

    def mark(self) -> Mark:
        """The answers so far, to measure a run's per-host rates from."""
        with self._free:
            return Mark(time.monotonic(), tuple(h.answered for h in self._hosts))

    def report(self, since: Mark | None = None, until: float | None = None) -> list[dict[str, Any]]:
        """Per host: chats answered and their rate per second (from `since` to `until` or now),
        backoffs (failures, all along), slots busy, seconds of backoff left, last error."""
        now = time.monotonic()
        since = since or Mark(now, (0,) * len(self._hosts))
        elapsed = max((until or now) - since.at, 1e-6)
        out = []
        with self._free:
            for i, h in enumerate(self._hosts):
                answered = h.answered - since.answered[i]
                out.append({
                    "host": h.llm.host, "answered": answered,
                    "backoffs": h.backoffs,
                    "rate_per_s": round(answered / elapsed, 3) if since.at < now else 0.0,
                    "busy": h.busy, "slots": h.slots,
                    "backed_off_s": round(max(h.retry_at - now, 0.0), 1),
                    "last_error": h.last_error,
                })
        return out

    def _order(self) -> list[_Host]:
        """Hosts to try: healthy ones first, then backed-off ones by when they may retry."""
        now = time.monotonic()
        with self._free:
            return sorted(self._hosts, key=lambda h: (h.retry_at > now, h.retry_at))

    def _acquire(self, tried: set[int]) -> _Host | None:
        """A slot on an untried healthy host (waiting for one to free), or on an untried
        backed-off host when no host is healthy; None when every host was tried."""
        with self._free:
            while True:
                now = time.monotonic()
                left = [h for h in self._hosts if id(h) not in tried]
                if not left:
                    return None
                healthy = [h for h in left if h.retry_at <= now]
                if not healthy and not any(h.retry_at <= now for h in self._hosts):
                    healthy = sorted(left, key=lambda h: h.retry_at)[:1]  # all down: probe one
                free = [h for h in healthy if h.busy < h.slots]
                if free:
                    h = min(free, key=lambda h: (h.busy, h.last_used))
                    self._uses += 1
                    h.busy, h.last_used = h.busy + 1, self._uses
                    return h
                soonest = min((h.retry_at - now for h in left if h.retry_at > now),
                              default=WAKE_S)
                self._free.wait(min(WAKE_S, max(soonest, 0.01)))

    def _release(self, h: _Host, answered: bool = False) -> None:
        """Give a slot back (counting an answer) and wake a waiting chat."""
        with self._free:
            h.busy -= 1
            if answered:
                h.answered += 1
                h.retry_at = 0.0
                h.backoff.reset()
            self._free.notify_all()

    def _failed(self, h: _Host, exc: LLMError) -> None:
        """Count a failure and back the host off (doubling up to the longest wait)."""
        with self._free:
            h.backoffs += 1
            h.retry_at = time.monotonic() + h.backoff.next_delay()
            h.last_error = str(exc)
            self._free.notify_all()
        if len(self._hosts) > 1:
            log.warning("Ollama host %s backed off: %s", h.llm.host, exc)

    def _all_failed(self, errors: list[tuple[_Host, LLMError]]) -> LLMError:
        """The error when no host could serve: the host's own with one, else all of them."""
        if len(errors) == 1:
            return errors[0][1]
        if not errors:
            return LLMUnavailable("no Ollama host could be asked")
        return LLMUnavailable("every Ollama host failed: "
                              + "; ".join(f"{h.llm.host}: {exc}" for h, exc in errors))


_END = object()


def spread(work: Callable[[T], R], items: Iterable[T], width: int,
           between: Callable[[], None]) -> Iterator[tuple[T, R | None, LLMError | None]]:
    """(item, result, None) or (item, None, LLMError) for each item as its `work` finishes,
    up to `width` at once on daemon threads (in the caller's thread, in order, at width 1).

    `between()` runs before each item starts; when it raises, the items in flight are still
    handed out before its exception goes on. Other exceptions of `work` reach the caller.
    """
    if width <= 1:
        for item in items:
            between()
            try:
                yield item, work(item), None
            except LLMError as exc:
                yield item, None, exc
        return
    done: queue.Queue[tuple[Any, Any, BaseException | None]] = queue.Queue()

    def run(item: Any) -> None:
        try:
            done.put((item, work(item), None))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            done.put((item, None, exc))

    pending = iter(items)
    flying = 0
    stopped: BaseException | None = None
    while True:
        while stopped is None and flying < width:
            following: Any = next(pending, _END)
            if following is _END:
                break
            try:
                between()
            except BaseException as exc:  # noqa: BLE001 - raised once the flying ones are in
                stopped = exc
                break
            threading.Thread(target=run, args=(following,), name="psirag-llm",
                             daemon=True).start()
            flying += 1
        if not flying:
            break
        item, result, error = done.get()
        flying -= 1
        if error is not None and not isinstance(error, LLMError):
            raise error
        yield item, result, error  # type: ignore[misc]
    if stopped is not None:
        raise stopped

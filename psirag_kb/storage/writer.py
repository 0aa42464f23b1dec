"""The single writer: one thread runs every change to the stores, in the order it was asked for."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, TypeVar

from psirag_kb.errors import Cancelled, KBError

log = logging.getLogger(__name__)

T = TypeVar("T")


class WriterClosed(KBError):
    """A write was asked for after the knowledge base started closing."""


class _Task:
    """One queued write: the function, its coalescing key and the future its callers wait on."""

    __slots__ = ("func", "key", "future")

    def __init__(self, func: Callable[[], Any], key: Hashable | None) -> None:
        self.func = func
        self.key = key
        self.future: Future = Future()


class Writer:
    """Runs write tasks one at a time on its own thread; a request whose key matches the last
    queued task is shared with it instead of queued twice (never reordering effects)."""

    def __init__(self, name: str = "psirag-writer") -> None:
        self._queue: deque[_Task] = deque()
        self._mutex = threading.Lock()
        self._ready = threading.Condition(self._mutex)
        self._closed = False
        self._cancel = threading.Event()
        self.running: Hashable | None = None
        """Key (or function name) of the task being run, for status."""
        self.before_task: Callable[[], None] | None = None
        """Called on the writer thread before each task (repairs of stale derived indexes)."""
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    # -- submitting ---------------------------------------------------------------------------

    def submit(self, func: Callable[[], T], key: Hashable | None = None) -> Future:
        """Queue a write; with `key`, join the last queued task when it has the same key and has
        not started (joining an earlier one would run this request before the tasks queued
        after it)."""
        with self._mutex:
            if self._closed:
                raise WriterClosed("the knowledge base is closing; the write was not done")
            if key is not None and self._queue and self._queue[-1].key == key:
                return self._queue[-1].future
            task = _Task(func, key)
            self._queue.append(task)
            self._ready.notify()
        return task.future

    def call(self, func: Callable[[], T], key: Hashable | None = None) -> T:
        """Run a write on the writer thread and wait for its result (inline when already there).

        Interrupting the wait (Ctrl-C) asks the task to stop after its committed batch.
        """
        if self.on_writer_thread():
            return func()
        future = self.submit(func, key)
        try:
            return future.result()
        except KeyboardInterrupt:
            self._cancel.set()
            raise

    def on_writer_thread(self) -> bool:
        """Whether the caller is the writer thread."""
        return threading.current_thread() is self.thread

    def check_cancel(self) -> None:
        """Raise `Cancelled` inside a task when a stop was asked for (call between batches)."""
        if self._cancel.is_set():
            raise Cancelled("stopped after the committed batch")

    @property
    def closed(self) -> bool:
        """Whether the writer refuses new writes (the knowledge base is closing)."""
        return self._closed

    @property
    def queued(self) -> int:
        """Tasks waiting or running."""
        with self._mutex:
            return len(self._queue) + int(self.running is not None)

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._mutex:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return
                task = self._queue.popleft()
                self.running = task.key if task.key is not None else getattr(
                    task.func, "__name__", "write")
            if not task.future.set_running_or_notify_cancel():
                continue
            if not self._closed:
                self._cancel.clear()  # a Ctrl-C stops the task it interrupted, not later ones
            try:
                if self.before_task is not None:
                    self.before_task()
                result = task.func()
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for it
                task.future.set_exception(exc)
            else:
                task.future.set_result(result)
            finally:
                with self._mutex:
                    self.running = None

    def close(self, timeout: float | None = None) -> None:
        """Refuse new writes, cancel the queued ones, let the running one finish its batch."""
        with self._mutex:
            self._closed = True
            self._cancel.set()
            dropped, self._queue = list(self._queue), deque()
            self._ready.notify_all()
        for task in dropped:
            if task.future.set_running_or_notify_cancel():
                task.future.set_exception(WriterClosed(
                    "the knowledge base closed before this write ran; it was not done"))
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)

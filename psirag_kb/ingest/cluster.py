"""The knowledge base's handle on a Ray cluster: a child process that holds the connection
(`raywork.py`), batches sent to it by number and their outcomes collected in any order."""

from __future__ import annotations

import importlib.util
import logging
import multiprocessing
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psirag_kb.errors import ConfigError, KBError

log = logging.getLogger(__name__)

PROBE_S = 2.0
"""Seconds a connection to the head's port may take before the cluster counts as absent (an
`ray.init` on a dead address waits for minutes)."""
START_S = 300.0
"""Seconds the child may take to join and load the model in every actor."""
POLL_S = 0.2
"""How often a wait for an outcome looks whether the ingest was asked to stop."""
CHECK_S = 2.0
"""While an outcome is awaited, the head's port is probed this often: a cluster that went away
is noticed in seconds, not after Ray's own minute."""
SLOTS_PER_ACTOR = 2
"""Batches out per actor: one being worked on, one waiting, so no actor idles between two."""
CURRENT_CLUSTER: Path | None = None
"""Where `ray start --head` writes the address of the cluster on this machine (None: Ray's own
place, ray/ray_current_cluster in RAY_TMPDIR, TMPDIR or /tmp)."""


class ClusterGone(KBError):
    """The cluster cannot be reached or stopped answering; the work is done here instead."""


def check_ray(config: Any, embedder: Any) -> None:
    """Refuse a cluster ingest that cannot give the local results: Ray not installed (a
    `ConfigError`), or a knowledge base whose embedder is not the configured model (the
    workers load that one; `ClusterGone`, so the ingest stays local)."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError("[compute] ray_address is set but Ray is not installed: "
                          "pip install 'psirag-kb[ray]'")
    if getattr(embedder, "name", None) != config.embedding.model:
        raise ClusterGone(f"the embedder in use ({getattr(embedder, 'name', '?')}) is not "
                          f"the configured model {config.embedding.model}")


def resolve_address(address: str) -> str:
    """HOST:PORT of a `[compute] ray_address`: "auto" is RAY_ADDRESS, else the cluster that
    `ray start` runs on this machine."""
    if address != "auto":
        return address
    named = os.environ.get("RAY_ADDRESS", "").strip()
    if named and named != "auto":
        return named
    system = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    current = CURRENT_CLUSTER or Path(system) / "ray" / "ray_current_cluster"
    try:
        return current.read_text().strip()
    except OSError as exc:
        raise ClusterGone("ray_address = \"auto\" but no Ray cluster runs on this machine "
                          "(start one with `ray start --head`)") from exc


def probe(address: str, timeout_s: float = PROBE_S) -> None:
    """Raise `ClusterGone` unless the head's port at HOST:PORT accepts a connection."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterGone(f"Ray address {address!r} is not HOST:PORT (or \"auto\")")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ClusterGone(f"no Ray cluster answers at {address} ({exc})") from exc


class Cluster:
    """A Ray cluster's actors, reached through a child process (see `raywork.py`)."""

    def __init__(self, address: str, config: Any, actors: int | None = None) -> None:
        self.address = address
        self.config = config
        self.actors = actors
        self.workers = 0
        self.nodes: list[tuple[str, int]] = []
        self._conn: Any = None
        self._process: Any = None
        self._seq = 0
        self._outcomes: dict[int, tuple[str, Any]] = {}
        self._dropped: set[int] = set()
        self._lock = threading.Lock()

    @property
    def slots(self) -> int:
        """Batches to keep out at once."""
        return max(1, self.workers * SLOTS_PER_ACTOR)

    @property
    def alive(self) -> bool:
        """Whether the child process still runs."""
        return self._process is not None and self._process.is_alive()

    def start(self, check_stop: Callable[[], None] | None = None) -> None:
        """Probe the head, start the child and wait for its actors; `ClusterGone` if not."""
        address = resolve_address(self.address)
        probe(address)
        from psirag_kb.ingest.raywork import serve

        context = multiprocessing.get_context("spawn")  # no copy of the writer's threads
        parent, child = context.Pipe()
        self._process = context.Process(target=serve, name="psirag-ray",
                                        args=(child, address, self.config, self.actors),
                                        daemon=True)
        self._process.start()
        child.close()
        self._conn = parent
        deadline = time.monotonic() + START_S
        try:
            while not parent.poll(POLL_S):
                if check_stop is not None:
                    check_stop()
                if not self._process.is_alive() or time.monotonic() > deadline:
                    raise ClusterGone(f"the Ray cluster at {address} did not start the workers")
        except BaseException:  # a stop or a timeout: the child goes, whatever it was doing
            self.close(wait_s=0.0)
            raise
        try:
            kind, count, detail = parent.recv()
        except (EOFError, OSError) as exc:
            self.close()
            raise ClusterGone(f"the Ray cluster at {address} did not answer ({exc})") from exc
        if kind != "ready":
            self.close()
            raise ClusterGone(f"the Ray cluster at {address} refused the workers: {detail}")
        self.workers, self.nodes = count, list(detail)
        log.info("ingest on the Ray cluster at %s: %d worker(s) on %s", address, count,
                 ", ".join(sorted({node for node, _ in self.nodes})))

    def submit(self, batch: Any) -> int:
        """Send a batch; its number for `outcome`."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            try:
                self._conn.send(("batch", seq, batch))
            except (OSError, ValueError, AttributeError) as exc:
                raise ClusterGone(f"the Ray cluster's process is gone ({exc})") from exc
        return seq

    def outcome(self, seq: int, check_stop: Callable[[], None]) -> Any:
        """Wait for a batch's outcome (asking `check_stop` meanwhile); `ClusterGone` when the
        child died or the batch failed on the cluster."""
        checked = time.monotonic()
        while True:
            check_stop()
            if time.monotonic() - checked > CHECK_S:
                checked = time.monotonic()
                self._check_head()
            with self._lock:
                if seq in self._outcomes:
                    kind, value = self._outcomes.pop(seq)
                    if kind == "done":
                        return value
                    raise ClusterGone(f"a batch failed on the Ray cluster: {value}")
                try:
                    if self._conn.poll(POLL_S):
                        kind, number, value = self._conn.recv()
                        if number in self._dropped:
                            self._dropped.discard(number)
                        else:
                            self._outcomes[number] = (kind, value)
                        continue
                except (EOFError, OSError, AttributeError) as exc:
                    raise ClusterGone("the Ray cluster's process is gone") from exc
            if not self.alive:
                raise ClusterGone("the Ray cluster went away (its process ended)")

    def drop(self, seqs: list[int]) -> None:
        """Forget batches nobody will ask for (an ingest that stopped)."""
        with self._lock:
            for seq in seqs:
                if self._outcomes.pop(seq, None) is None:
                    self._dropped.add(seq)

    def _check_head(self) -> None:
        """`ClusterGone` (the child stopped) when the head no longer accepts connections."""
        try:
            probe(resolve_address(self.address))
        except ClusterGone:
            self.close(wait_s=0.0)
            raise

    def close(self, wait_s: float = 5.0) -> None:
        """Stop the child (the actors die with its Ray job), killing it after `wait_s`."""
        conn, process = self._conn, self._process
        self._conn = self._process = None
        self._outcomes.clear()
        self._dropped.clear()
        if conn is not None:
            try:
                conn.send(("stop", 0, None))
            except (OSError, ValueError):
                pass
            conn.close()
        if process is not None:
            process.join(wait_s)
            if process.is_alive():
                process.kill()
                process.join(5.0)

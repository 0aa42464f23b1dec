"""The Ray side of a cluster ingest: the process that holds the Ray connection, and the actor
that reads, chunks and embeds batches with the model loaded once.

Ray ends a driver process whose cluster went away ("Failed to connect to GCS within 60
seconds... The program will terminate"), so the connection lives in this child process, never in
the knowledge base's: losing the cluster costs the child, and the ingest finishes locally.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from psirag_kb.storage.records import FileChange, FileRecord

log = logging.getLogger(__name__)

POLL_S = 0.02
"""How long the child waits on its pipe, then on Ray, while batches are out."""
GCS_WAIT_S = 20
"""Seconds Ray waits for a lost head before it ends this process (its default is 60)."""
LOG_FILE = "ray.log"
"""In the data directory: what Ray printed in the child (workers that died, retries)."""
TASK_RETRIES = 3
"""Times a batch is tried again on a restarted actor when its worker process died."""


@dataclass
class Batch:
    """One batch of files for a worker: the records and stored chunk hashes it is read against."""

    paths: list[str]
    records: dict[str, FileRecord]
    known: dict[str, list[tuple[int, str]]]
    keep_vanished: bool
    max_chunks: int | None


@dataclass
class Outcome:
    """What a worker made of a batch: changes with their vectors, what it took and could not see."""

    changes: list[FileChange]
    taken: list[str]
    """Paths read (the rest of the visible ones is left for another batch: the chunk budget)."""
    unseen: list[str]
    """Paths that do not exist on the worker's node (gone, or the node lacks the mount)."""
    report: Any
    node: str = ""
    pid: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


class BatchWorker:
    """A Ray actor: the configured model loaded once, the local ingest's read and embed code."""

    def __init__(self, config: Any) -> None:
        from psirag_kb.ingest.embedding import make_embedder
        from psirag_kb.ingest.reading import BatchReader

        self.embedder = make_embedder(config.embedding, config.storage.cache_dir)
        self.reader = BatchReader(config, self.embedder)

    def ready(self) -> tuple[str, int]:
        """Load the model; (node address, process id)."""
        self.embedder.count_tokens("ready")
        return _node(), os.getpid()

    def run(self, batch: Batch) -> Outcome:
        """Read, chunk, reuse stored chunks and embed the rest, as a local ingest does."""
        from psirag_kb.ingest.reading import reuse
        from psirag_kb.ingest.report import IngestReport

        started = time.perf_counter()
        paths = [Path(p) for p in batch.paths]
        unseen = [p for p in paths if not os.path.lexists(p)]
        visible = [p for p in paths if p not in unseen]
        report = IngestReport()
        changes, taken = self.reader.read_batch(visible, batch.records, report,
                                                batch.keep_vanished, batch.max_chunks)
        report.timed("read", time.perf_counter() - started)
        kept = [c for c in changes if c.state != "removed"]
        self.reader.embed(reuse(kept, batch.known, report), report)
        return Outcome(changes, [str(p) for p in visible[:taken]], [str(p) for p in unseen],
                       report, _node(), os.getpid())


def _node() -> str:
    """This node's address as Ray knows it."""
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:  # noqa: BLE001 - a name only for messages
        return socket.gethostname()


def serve(conn: Connection, address: str, config: Any, actors: int | None) -> None:
    """The child process: join the cluster, start the actors, then run the batches the
    parent sends (("batch", seq, Batch) -> ("done", seq, Outcome) or ("error", seq, why))."""
    os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(GCS_WAIT_S))
    _log_to(Path(config.data_dir) / LOG_FILE)
    try:
        import ray

        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False,
                 configure_logging=False)
        count = actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
        remote = ray.remote(num_cpus=1, max_restarts=-1,
                            max_task_retries=TASK_RETRIES)(BatchWorker)
        pool = [remote.remote(config) for _ in range(count)]  # type: ignore[attr-defined]
        nodes = ray.get([actor.ready.remote() for actor in pool])  # type: ignore[attr-defined]
        conn.send(("ready", count, nodes))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which falls back
        conn.send(("failed", 0, f"{type(exc).__name__}: {exc}"))
        return
    _loop(conn, pool)


def _log_to(path: Path) -> None:
    """Send this process's output (Ray's messages about its workers) to a file, not to the
    terminal or the daemon's output."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        return
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _loop(conn: Connection, pool: list[Any]) -> None:
    """Hand batches to the least busy actor and results back as they come."""
    import ray

    out: dict[Any, tuple[int, int]] = {}  # result ref -> (seq, actor)
    load = [0] * len(pool)
    while True:
        wait = POLL_S if out else 0.5  # block on the pipe only until the first message
        try:
            while conn.poll(wait):
                kind, seq, batch = conn.recv()
                if kind == "stop":
                    return
                actor = load.index(min(load))
                out[pool[actor].run.remote(batch)] = (seq, actor)
                load[actor] += 1
                wait = 0.0
        except (EOFError, OSError):
            return  # the parent is gone
        if not out:
            continue
        ready, _ = ray.wait(list(out), num_returns=1, timeout=POLL_S)
        if ready:  # and whatever else is done by now
            ready, _ = ray.wait(list(out), num_returns=len(out), timeout=0)
        for ref in ready:
            seq, actor = out.pop(ref)
            load[actor] -= 1
            try:
                conn.send(("done", seq, ray.get(ref)))
            except Exception as exc:  # noqa: BLE001 - the parent finishes the batch locally
                conn.send(("error", seq, f"{type(exc).__name__}: {exc}"))

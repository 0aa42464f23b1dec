"""Where a large ingest reads and embeds: the Ray cluster of [compute] ray_address, or here."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from psirag_kb.ingest.cluster import Cluster, ClusterGone, check_ray

if TYPE_CHECKING:
    from psirag_kb.config import Config
    from psirag_kb.ingest.embedding import Embedder

log = logging.getLogger(__name__)

CLUSTER_RETRY_S = 60.0
"""After a Ray cluster could not be reached, ingests stay local this long before trying again
(each try costs a connection probe, and a child process when the head answers)."""


class Compute:
    """The Ray cluster large ingests run on, started on first use and tried again later."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._lock = threading.Lock()
        self.ray: Cluster | None = None
        """The cluster started last (it may have gone away since)."""
        self._retry = 0.0
        self.ray_actors: int | None = None
        """Ray actors to start (None: one per CPU of the cluster); benchmarks set it."""

    def cluster(self, large: bool, embedder: Embedder,
                check_stop: Callable[[], None]) -> Cluster | None:
        """The Ray cluster a large ingest runs on ([compute] ray_address), started on first
        use; None for local work (no address, a small ingest, or the cluster unreachable: a
        warning says so, and it is tried again after `CLUSTER_RETRY_S`)."""
        address = self.config.compute.ray_address
        if not address or not large:
            return None
        with self._lock:
            if self.ray is not None and self.ray.alive:
                return self.ray
            if time.monotonic() < self._retry:
                return None
            self.ray = None
            cluster = Cluster(address, self.config, self.ray_actors)
            try:
                check_ray(self.config, embedder)
                cluster.start(check_stop)
            except ClusterGone as exc:
                log.warning("%s; ingesting on this machine", exc)
                self._retry = time.monotonic() + CLUSTER_RETRY_S
                return None
            self.ray = cluster
            return cluster

    def close(self) -> None:
        """Close the cluster's actors (the knowledge base is closing)."""
        with self._lock:
            if self.ray is not None:
                self.ray.close()

    def status(self) -> dict[str, Any]:
        """Where large ingests read and embed: {"ray_address", "state" (local, not started,
        connected, gone: lost mid-ingest, unreachable: at the last try), "workers", "nodes"}."""
        address = self.config.compute.ray_address
        ray = self.ray
        if not address:
            return {"ray_address": "", "state": "local", "workers": 0, "nodes": []}
        if ray is not None and ray.alive:
            nodes = sorted({node for node, _ in ray.nodes})
            return {"ray_address": address, "state": "connected", "workers": ray.workers,
                    "nodes": nodes}
        state = "gone" if ray is not None else "unreachable" if self._retry else "not started"
        return {"ray_address": address, "state": state, "workers": 0, "nodes": []}

    def where(self, cluster: Cluster | None, large: bool, files: int, chunks: int,
              seconds: float) -> dict[str, Any]:
        """Where an ingest with [compute] ray_address ran: the cluster (address, workers,
        nodes, rates; whether it went away midway) or this machine and why."""
        rates = {"files": files, "chunks": chunks, "seconds": round(seconds, 3),
                 "files_per_s": round(files / seconds, 2) if seconds > 0 else None,
                 "chunks_per_s": round(chunks / seconds, 2) if seconds > 0 else None}
        if cluster is None:
            why = ("a small ingest runs here" if not large else
                   "the cluster could not be reached (see the warning)")
            return {"where": "local", "ray_address": self.config.compute.ray_address,
                    "reason": why, **rates}
        return {"where": "ray", "ray_address": cluster.address, "workers": cluster.workers,
                "nodes": sorted({node for node, _ in cluster.nodes}),
                "finished_on_ray": cluster.alive, **rates}

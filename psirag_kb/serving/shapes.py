"""The shapes of results shown to people and assistants (MCP tools, the page's chat)."""

from __future__ import annotations

import time
from typing import Any, NotRequired

from typing_extensions import TypedDict  # pydantic reads nested TypedDicts from here on 3.11

from psirag_kb.locations import place

SNIPPET_CHARS = 300
MAX_PROBLEMS = 20
NO_LLM = "no LLM is configured"
NO_LLM_NOTE = f"{NO_LLM}; these are the passages multi-round retrieval found"


class Location(TypedDict, total=False):
    """Where a passage is in its source: lines [first, last] of a text file, or the place in a
    document a person can open (a page, a slide, a sheet's rows, paragraphs under a heading, an
    EPUB section, a notebook cell, a mail part); ranges are [first, last]."""

    lines: list[int]
    page: int
    pages: list[int]
    slide: int
    slides: list[int]
    title: str
    sheet: str
    rows: list[int]
    row: int
    table: int
    paragraph: int
    paragraphs: list[int]
    heading: str
    section: str
    cell: int
    cells: list[int]
    type: str
    part: str


class Passage(TypedDict):
    """One search result."""

    id: str
    source: str
    location: Location | None
    score: float
    snippet: str
    unavailable: NotRequired[str]
    """Set when the passage's folder vanished (an unmounted drive): since when, and why."""
    also_in: NotRequired[list[str]]
    """Other files holding the same passage (a manual as HTML and as PDF), with places."""


class SearchResult(TypedDict):
    """Ranked passages for a query."""

    query: str
    mode: str
    results: list[Passage]
    within: NotRequired[list[str]]
    degraded: NotRequired[list[str]]
    note: NotRequired[str]
    searched: NotRequired[str]
    """The standalone query a follow-up was searched as (given `history`)."""


class Neighbour(TypedDict):
    """A passage next to a fetched one in the same file (offset -1 is just before it)."""

    id: str
    offset: int
    location: Location | None
    text: str


class Fetched(TypedDict):
    """One passage in full."""

    id: str
    source: str
    location: Location | None
    text: str
    neighbours: list[Neighbour]


class Cited(TypedDict):
    """A passage an answer rests on (number: its [n] in the answer's reasoning)."""

    id: str
    source: str
    location: Location | None
    text: str
    number: NotRequired[int]


class AnswerResult(TypedDict):
    """An answer with its citations, or the passages found without one."""

    question: str
    status: str
    answer: str | None
    citations: list[Cited]
    passages: list[Cited]
    note: NotRequired[str]
    searched: NotRequired[str]
    """The standalone query a follow-up was answered from (given `history`)."""


class Child(TypedDict):
    """A child of a tree node: an abstract node (browse it) or a chunk (fetch it)."""

    kind: str
    leaves: int
    abstract: str
    node: NotRequired[int]
    id: NotRequired[str]
    source: NotRequired[str | None]
    location: NotRequired[Location | None]
    stale: NotRequired[bool]


class NodeResult(TypedDict):
    """One node of the topic tree."""

    node: int
    layer: int
    abstract: str
    stale: bool
    parent: int | None
    leaves: int
    children: list[Child]


class Problem(TypedDict):
    """A file that was skipped or failed, and why."""

    path: str
    state: str
    reason: str


class StatusResult(TypedDict):
    """What is indexed, what went wrong and how fresh it is."""

    data_dir: str
    files: dict[str, int]
    chunks: int
    problems: list[Problem]
    problems_total: int
    freshness: dict[str, Any]


def location(item: dict[str, Any]) -> Location | None:
    """A result's location: where it is in its document when known (a page, a slide, a
    sheet's rows...), else its line range (None for corpus records)."""
    if isinstance(item.get("location"), dict) and item["location"]:
        return dict(item["location"])  # type: ignore[return-value]
    if item.get("page") is not None:
        return {"page": int(item["page"])}
    if item.get("lines"):
        return {"lines": [int(n) for n in item["lines"]]}
    return None


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """The text on one line, cut at a word boundary near `limit` characters."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else flat[:limit]) + "…"


def passage(item: dict[str, Any]) -> Passage:
    """The compact form of one result row."""
    out: Passage = {"id": str(item["chunk_id"]), "source": item["source"],
                    "location": location(item), "score": round(float(item["score"]), 4),
                    "snippet": snippet(item["text"])}
    gone = item.get("unavailable")
    if gone:
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(gone.get("since") or 0)))
        out["unavailable"] = f"since {since}: {gone.get('reason', '')}"
    if item.get("also_in"):
        out["also_in"] = [place(copy) for copy in item["also_in"]]
    return out


def search_result(result: dict[str, Any]) -> SearchResult:
    """The compact form of a query result."""
    out: SearchResult = {"query": result["query"], "mode": result["mode"],
                         "results": [passage(item) for item in result["results"]]}
    if result.get("in"):
        out["within"] = list(result["in"])
    if result.get("degraded"):
        out["degraded"] = list(result["degraded"])
    if result.get("note"):
        out["note"] = str(result["note"])
    if result.get("rewrite") not in (None, "as_is"):
        out["searched"] = str(result["searched"])
    return out


def fetched(chunk: dict[str, Any]) -> Fetched:
    """A chunk with its neighbours, ids as strings."""
    return {"id": str(chunk["chunk_id"]), "source": chunk["source"],
            "location": location(chunk), "text": chunk["text"],
            "neighbours": [{"id": str(n["chunk_id"]), "offset": int(n["offset"]),
                            "location": location(n), "text": n["text"]}
                           for n in chunk.get("neighbours", [])]}


def _cited(passage: dict[str, Any]) -> Cited:
    """A citation or passage of an answer."""
    out: Cited = {"id": str(passage["chunk_id"]), "source": passage["source"],
                  "location": location(passage), "text": passage["text"]}
    if passage.get("number") is not None:
        out["number"] = int(passage["number"])
    return out


def answer_result(result: dict[str, Any]) -> AnswerResult:
    """The agent's answer: citations when it answered, else the passages it found."""
    answered = result["status"] == "answered"
    out: AnswerResult = {
        "question": result["query"], "status": result["status"], "answer": result["answer"],
        "citations": [_cited(c) for c in result["citations"]] if answered else [],
        "passages": [] if answered else [_cited(r) for r in result["results"]],
    }
    message = result.get("message") or ""
    if result["status"] == "no_llm" and message.startswith(NO_LLM):
        out["note"] = NO_LLM_NOTE
    elif message:
        out["note"] = message
    if result.get("rewrite") not in (None, "as_is"):
        out["searched"] = str(result["searched"])
    return out


def node_result(node: dict[str, Any]) -> NodeResult:
    """A tree node with compact children: abstract nodes to browse, chunks to fetch."""
    children: list[Child] = []
    for child in node["children"]:
        if child["kind"] == "leaf":
            children.append({"kind": "chunk", "id": str(child["id"]), "leaves": 1,
                             "abstract": snippet(child["abstract"]),
                             "source": child.get("source"), "location": location(child)})
        else:
            children.append({"kind": "node", "node": int(child["id"]),
                             "leaves": int(child["leaves"]),
                             "abstract": snippet(child["abstract"]),
                             "stale": bool(child.get("dirty"))})
    return {"node": int(node["id"]), "layer": int(node["layer"]), "abstract": node["abstract"],
            "stale": bool(node["dirty"]), "parent": node["parent"],
            "leaves": int(node["leaves"]), "children": children}


def status_result(status: dict[str, Any]) -> StatusResult:
    """Counts, problems and freshness from a status object (the KB's or the daemon's)."""
    problems = status.get("problems", [])
    tree = status.get("tree", {})
    abstracts = status.get("abstracts", {})
    freshness: dict[str, Any] = {
        "generation": status.get("generation"),
        "tree": tree.get("state", "ok"),
        "dirty_abstracts": abstracts.get("dirty", tree.get("dirty", 0)),
        "abstracts_last_run": abstracts.get("last_run"),
        "stale_indexes": sorted(name for name, index in status.get("indexes", {}).items()
                                if index.get("state") != "ok"),
        "writer_queued": status.get("writer", {}).get("queued", 0),
    }
    daemon = status.get("daemon")
    if daemon:
        freshness |= {"served_by": f"daemon pid {daemon.get('pid')} at {daemon.get('url')}",
                      "queue": daemon.get("queue", 0), "processed": daemon.get("processed"),
                      "recent_errors": list(daemon.get("errors", []))[-3:]}
    if status.get("watch") is not None:
        freshness["watch"] = list(status["watch"])
    last = status.get("last_change", (daemon or {}).get("last_change"))
    if last is not None:
        freshness["last_change"] = last
    return {
        "data_dir": status.get("data_dir", ""), "files": dict(status.get("files", {})),
        "chunks": int(status.get("chunks", 0)),
        "problems": [{"path": p["path"], "state": p["state"], "reason": p["reason"]}
                     for p in problems[:MAX_PROBLEMS]],
        "problems_total": len(problems), "freshness": freshness,
    }



"""Query results, agent answers and conversation turns as text on stdout."""

from __future__ import annotations

from typing import Any

from psirag_kb.locations import place
from psirag_kb.status_text import local_time


def print_results(result: dict[str, Any]) -> None:
    """The ranked passages of a search, each with its place and a shortened text."""
    print(f"{len(result['results'])} results for {result['query']!r} ({result['mode']})")
    if result.get("note"):
        print(result["note"])
    for item in result["results"]:
        where = place(item)
        text = " ".join(item["text"].split())
        if len(text) > 300:
            text = text[:297] + "..."
        print(f"\n{item['rank']:>2}. [{item['score']:.3f}] {where}\n    {text}")
        if item.get("also_in"):
            print(f"    also in: {', '.join(place(copy) for copy in item['also_in'])}")
        if item.get("unavailable"):
            gone = item["unavailable"]
            print(f"    (unavailable since {local_time(gone.get('since'))}: "
                  f"{gone.get('reason')})")


def print_answer(result: dict[str, Any]) -> None:
    """An agent answer (or its fallback), then its citations and steps."""
    if result["status"] in ("answered", "not_mentioned"):
        print(f"Answer: {result['answer']}")
    else:
        print(f"No answer ({result['status']}): {result['message']}")
    if result["citations"]:
        print("\nCitations:")
    for cited in result.get("nodes", []):  # a question about the whole collection
        print(f"  [{cited['number']}] node {cited['node']} ({cited['leaves']} passages): "
              f"{cited['label']}")
    for number, cited in enumerate(result["citations"], start=1):
        where = place(cited)
        text = " ".join(cited["text"].split())
        print(f"  [{cited.get('number', number)}] {where}: "
              f"{text[:157] + '...' if len(text) > 160 else text}")
    print(f"\nSteps ({result['hops']} hop(s) predicted):")
    for number, step in enumerate(result["steps"], start=1):
        found = ", ".join(p["source"] for p in step["passages"]) or "nothing new"
        action = f" -> {step['action']}" if "action" in step else ""
        print(f"  {number}. {step['query']!r}: {found}{action}")


def print_result(result: dict[str, Any]) -> None:
    """A query's or a conversation turn's result as text (the query searched first, when a
    follow-up was rewritten)."""
    if result.get("rewrite") not in (None, "as_is"):
        print(f"searched: {result['searched']}\n")
    if result["mode"] == "agent":
        print_answer(result)
        return
    if result.get("note"):
        print(f"Note: {result['note']}\n")
    if result.get("summary"):
        print(f"Summary: {result['summary']}\n")
        for cited in result.get("nodes", []):
            print(f"  [{cited['number']}] node {cited['node']} ({cited['leaves']} "
                  f"passages): {cited['label']}")
    elif result.get("abstracts"):
        print("Abstracts of the covering nodes:")
        for node in result["abstracts"]:
            print(f"  node {node['node']}: {node['abstract'] or '(no abstract yet)'}")
        print()
    print_results(result)

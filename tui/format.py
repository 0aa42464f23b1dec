"""Text for the screens: result labels, highlighted snippets, agent answers, status sections."""

from __future__ import annotations

import os
import re
import shlex
import time
from typing import Any

from rich.markup import escape
from rich.text import Text

from psirag_kb.locations import suffix
from psirag_kb.status_text import (
    ERROR,
    OK,
    WARN,
    llm_hosts,
    problems,
    stale_indexes,
    tree_trouble,
    unavailable,
)

HIGHLIGHT = "bold reverse"
SNIPPET_CHARS = 100
STOPWORDS = frozenset(
    "a an and are as at be by does do for from how in is it of on or the to was what when where "
    "which who why with".split()
)


def terms(query: str) -> list[str]:
    """The query's words worth highlighting (no stop words, at least two characters)."""
    words = re.findall(r"\w+", query.lower())
    return list(dict.fromkeys(w for w in words if len(w) > 1 and w not in STOPWORDS))


def highlight(text: str, words: list[str]) -> Text:
    """Text with every word starting with a query term highlighted."""
    out = Text(text)
    if words:
        pattern = r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\w*"
        out.highlight_regex(re.compile(pattern, re.IGNORECASE), HIGHLIGHT)
    return out


def snippet(text: str, words: list[str], width: int = SNIPPET_CHARS) -> str:
    """One line of the chunk around its first matched term."""
    flat = " ".join(text.split())
    start = 0
    if words:
        found = re.search(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")", flat,
                          re.IGNORECASE)
        if found and found.start() > width // 3:
            start = flat.rfind(" ", 0, found.start() - width // 4) + 1
    piece = flat[start:start + width]
    if start > 0:
        piece = "…" + piece
    if start + width < len(flat):
        piece = piece.rstrip() + "…"
    return piece


def short_path(path: str, width: int = 40) -> str:
    """A path relative to the working directory when inside it, else its tail."""
    if os.path.isabs(path):
        try:
            relative = os.path.relpath(path)
        except ValueError:
            relative = path
        if not relative.startswith(".."):
            path = relative
    if len(path) > width:
        path = "…" + path[-(width - 1):]
    return path


def where(result: dict[str, Any], width: int = 40) -> str:
    """`source slide 3`, `source p. 4` or `source:first-last` (a path shortened), or the corpus
    id."""
    source = str(result.get("source") or result.get("path") or "?")
    after = suffix(result)
    return short_path(source, max(10, width - len(after))) + after


def copies_line(result: dict[str, Any], width: int = 40) -> str:
    """`also in a.pdf p. 3, b.html`: the other files holding this passage (folded copies)."""
    copies = result.get("also_in") or []
    places = [where(c, width) if isinstance(c, dict) else short_path(str(c), width)
              for c in copies]
    return "also in " + ", ".join(places) if places else ""


def result_label(result: dict[str, Any], words: list[str]) -> Text:
    """Two lines of a result in the list: rank, score and place; the highlighted snippet
    (a third naming the other files holding the same passage)."""
    head = Text.assemble((f"{result.get('rank', '?'):>2} ", "bold"),
                         (f"{float(result.get('score', 0.0)):.3f} ", "dim"),
                         (where(result, 28), "underline"))
    label = Text.assemble(head, "\n", highlight(snippet(str(result.get("text", "")), words),
                                                words))
    copies = copies_line(result, 28)
    return Text.assemble(label, "\n", (copies, "dim italic")) if copies else label


def chunk_text(result: dict[str, Any], words: list[str]) -> Text:
    """The full chunk with its place and score, query terms highlighted."""
    copies = copies_line(result, 120)
    head = Text.assemble((where(result, 200), "bold"),
                         (f"  score {float(result.get('score', 0.0)):.3f}", "dim"),
                         (f"  chunk {result.get('chunk_id', '?')}", "dim"),
                         ("\n" + copies if copies else "", "dim italic"), "\n\n")
    return Text.assemble(head, highlight(str(result.get("text", "")).strip(), words))


def tree_path(path: list[dict[str, Any]], width: int = 90) -> Text:
    """Each ancestor's label (its abstract until it has one), root first, indented by depth."""
    out = Text("Path up the tree (root first)\n", style="bold")
    if not path:
        out.append("  this chunk is the whole tree\n", style="dim")
    for depth, node in enumerate(path):
        abstract = " ".join(str(node.get("label") or node.get("abstract") or "").split()
                            ) or "(no abstract yet)"
        if len(abstract) > width:
            abstract = abstract[:width - 1] + "…"
        out.append("  " * depth + f"└ L{node.get('layer', '?')} #{node.get('id')} ", style="bold")
        if node.get("dirty"):
            out.append("[stale] ", style="italic")
        out.append(abstract + "\n")
    return out


OVERVIEW_PHRASES = 8
"""Key phrases shown per topic in the query screen's overview."""


def overview_text(root: dict[str, Any]) -> Text:
    """What the knowledge base holds: the root's children as topics of a few key phrases each,
    the largest first, with a hint to the tree browser."""
    children = [c for c in root.get("children", []) if c.get("kind") != "leaf"]
    if not root.get("leaves"):
        return Text("The knowledge base is empty: index a folder, then type a query.")
    text = Text()
    text.append(f"What the knowledge base holds ({root['leaves']} passages)", style="bold")
    text.append(" - F3 browses the topic tree, or type a query and press enter.\n")
    for child in sorted(children, key=lambda c: -c.get("leaves", 0)) or [root]:
        shown = child.get("label") or child.get("abstract", "")
        phrases = [p for p in shown.split(", ") if p][:OVERVIEW_PHRASES]
        text.append(f"\n• {child.get('leaves', 0):>6} ", style="dim")
        text.append(", ".join(phrases) if phrases else "(abstract being written)")
        if child.get("dirty") and phrases:
            text.append(" (updating)", style="dim")
    return text


def _step_line(number: int, step: Any) -> str:
    """'2. round 1 'query' → 3 passages: a.md, b.md → answer'."""
    if not isinstance(step, dict):
        return f"{number}. {step}"
    text = f"{number}. "
    if step.get("round") is not None:
        text += f"round {step['round']} "
    query = step.get("query") or step.get("queries")
    if query:
        text += repr(" ".join(str(query).split())) if isinstance(query, str) else str(query)
    found = step.get("passages", step.get("found"))
    if isinstance(found, list):
        names = [os.path.basename(str(p.get("source"))) if isinstance(p, dict) else str(p)
                 for p in found]
        shown = ", ".join(dict.fromkeys(names))
        text += f" → {len(found)} found" + (f": {shown}" if shown else "")
    if step.get("refused"):
        text += " → retrieval refused (none left)"
    if step.get("action"):
        text += f" → {step['action']}"
    return text


def _citation_line(number: int, citation: Any) -> str:
    if not isinstance(citation, dict):
        return f"[{number}] {citation}"
    marker = citation.get("number", citation.get("marker", number))
    label = where(citation, 60) if citation.get("source") or citation.get("path") else ""
    chunk = citation.get("chunk_id")
    return " ".join(p for p in (f"[{marker}]", label,
                                f"(chunk {chunk})" if chunk is not None else "") if p)


ANSWERED = ("answered", "not_mentioned", "summarized")


def answer_text(result: dict[str, Any], mode: str) -> Text | None:
    """The answer pane of agent mode (and of summarize when it carries a summary), else None."""
    if mode == "summarize" and not any(k in result for k in ("summary", "abstracts", "status")):
        return None
    if mode == "agent" and "answer" not in result and "status" not in result:
        return Text("Agent mode returned no answer: this knowledge base's query API does not "
                    "support agent mode yet. Choose another mode (ctrl+n).", style="italic")
    if mode not in ("agent", "summarize"):
        return None
    status = result.get("status") or ""
    written = result.get("answer") if mode == "agent" else result.get("summary")
    title = "Answer" if mode == "agent" else "Summary"
    if status == "working":
        title = "Working…"
    elif not written and status not in ANSWERED:
        title = f"No {title.lower()}"
    out = Text(title, style="bold")
    if status:
        out.append(f"  ({status})", style="dim")
    if written:
        out.append("\n" + str(written).strip())
    if result.get("message"):
        out.append("\n" + str(result["message"]).strip(), style="italic")
    out.append("\n")
    steps = result.get("steps") or []
    if steps:
        hops = result.get("hops")
        out.append("\nSteps" + (f" ({hops} hop(s) predicted)" if hops else "") + "\n",
                   style="bold")
        for number, step in enumerate(steps, 1):
            out.append(_step_line(number, step) + "\n")
    citations = result.get("citations") or []
    if citations:
        out.append("\nCitations\n", style="bold")
        for number, citation in enumerate(citations, 1):
            out.append(_citation_line(number, citation) + "\n")
    abstracts = result.get("abstracts") or []
    if abstracts:
        out.append("\nAbstracts of the covering nodes\n", style="bold")
        for node in abstracts:
            text = " ".join(str(node.get("abstract") or "").split()) or "(no abstract yet)"
            out.append(f"node {node.get('node', node.get('id'))}: {text}\n")
    return out


def citation_results(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The passages an agent answer lists, as result rows when they carry text."""
    rows = result.get("results")
    if isinstance(rows, list) and rows:
        return rows
    citations = [c for c in result.get("citations") or [] if isinstance(c, dict) and "text" in c]
    return [{"rank": n, "score": float(c.get("score", 0.0)), **c}
            for n, c in enumerate(citations, 1)]


def ago(stamp: float | None, now: float) -> str:
    """'12s ago', '3m ago', 'never'."""
    if not stamp:
        return "never"
    seconds = max(0.0, now - float(stamp))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def until(stamp: float | None, now: float) -> str:
    """'in 40s', or '-'."""
    if not stamp:
        return "-"
    seconds = max(0.0, float(stamp) - now)
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"in {int(seconds // size)}{unit}"
    return f"in {int(seconds)}s"


def _brief(value: Any, width: int = 40) -> str:
    if isinstance(value, dict):
        value = ", ".join(f"{k} {v}" for k, v in value.items() if not isinstance(v, dict | list))
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[:width - 1] + "…"


SEVERITY_STYLE = {WARN: "yellow", ERROR: "red"}
"""The colour of a status row by its severity."""


def _trouble_markup(status: dict[str, Any]) -> list[str]:
    """Stale indexes, files that failed or were skipped, and vanished folders."""
    out = [f"[b]Index[/b] {escape(row.label)} [{SEVERITY_STYLE[row.severity]}]{row.value}[/], "
           f"rebuilding from the database: {escape(_brief(row.detail, 50))}"
           for row in stale_indexes(status)]  # queries go on without it until it is rebuilt
    out.extend(f"  [{SEVERITY_STYLE[row.severity]}]{escape(row.label)}[/] "
               f"{escape(short_path(row.value, 36))}: {escape(_brief(row.detail, 60))}"
               for row in problems(status))
    out.extend(f"  [{SEVERITY_STYLE[row.severity]}]unavailable since {row.label}[/] "
               f"{row.value}: {escape(_brief(row.detail, 60))}"
               for row in unavailable(status))  # a vanished folder: kept and searchable
    return out


def _llm_markup(abstracts: dict[str, Any]) -> list[str]:
    """Whether the LLM writes abstracts, and each of its hosts when there are several."""
    source = abstracts.get("source")
    if source != "ollama":
        return ["[b]LLM[/b] off (offline keyword abstracts; set "
                + escape("[llm] enabled = true") + ")"] if source else []
    error = abstracts.get("last_error")
    llm = ("[red]unavailable[/]: " + escape(_brief(error, 60))) if error else "[green]ok[/]"
    out = [f"[b]LLM[/b] Ollama {llm}"]
    for row, host in zip(llm_hosts(abstracts), abstracts.get("hosts") or [], strict=False):
        state = (f"[{SEVERITY_STYLE[row.severity]}]backed off {host.get('backoffs', 0)}x, "
                 f"retry in {host.get('backed_off_s', 0):.0f} s[/]" if row.severity != OK
                 else f"{host.get('backoffs', 0)} backoffs")
        out.append(f"  {escape(row.label)} {row.value}, {state}")
    return out


def _jobs_markup(daemon: dict[str, Any], now: float) -> list[str]:
    """The daemon's jobs (last and next run, outcome) and its watcher's latest errors."""
    out = ["[b]Jobs[/b]"]
    for job in daemon.get("jobs", []):
        outcome = (f"[red]error: {escape(_brief(job['error']))}[/]" if job.get("error")
                   else escape(_brief(job.get("result") or "", 34)))
        duration = job.get("duration_s")
        took = f" ({duration:.1f}s)" if isinstance(duration, int | float) else ""
        out.append(f"  {escape(str(job.get('name'))):<9} last {ago(job.get('last_run'), now)}"
                   f"{took}, next {until(job.get('next_run'), now)}  {outcome}")
    errors = daemon.get("errors") or []
    if errors:
        out.append("[b]Watcher errors[/b]")
        out.extend(f"  [red]{escape(_brief(e, 70))}[/]" for e in errors[-5:])
    return out


def status_markup(status: dict[str, Any], where_: str, now: float | None = None) -> str:
    """The Status screen as Rich markup."""
    now = time.time() if now is None else now
    out: list[str] = []
    daemon = status.get("daemon")
    if daemon:
        out.append(f"[b]Daemon[/b] pid {daemon.get('pid')} at {escape(str(daemon.get('url')))}"
                   f", queue [b]{daemon.get('queue', 0)}[/b]"
                   + (f", {daemon['processed']} processed" if "processed" in daemon else ""))
    else:
        out.append(f"[b]Knowledge base[/b] {escape(where_)} (no daemon: nothing is watched)")
    watch = status.get("watch")
    if watch is not None:
        out.append("[b]Watched folders[/b] " + (escape(", ".join(map(str, watch))) or "none"))
    files = status.get("files", {})
    out.append("[b]Files[/b] " + ", ".join(f"{v} {k}" for k, v in files.items()
                                           if v or k != "unavailable")
               + f"; {status.get('chunks', 0)} chunks")
    out.extend(_trouble_markup(status))
    tree = status.get("tree", {})
    abstracts = status.get("abstracts", {})
    out.append(f"[b]Tree[/b] depth {tree.get('depth', 0)}, {tree.get('leaves', 0)} leaves, "
               f"{tree.get('abstract_nodes', 0)} nodes; dirty abstracts "
               f"[b]{abstracts.get('dirty', tree.get('dirty', 0))}[/b], last regenerated "
               f"{ago(abstracts.get('last_run'), now)}")
    trouble = tree_trouble(status)
    if trouble is not None:  # the flat retrievers answer until it is rebuilt
        out.append(f"[b]Tree[/b] [{SEVERITY_STYLE[trouble.severity]}]{escape(trouble.value)}[/]: "
                   f"{escape(_brief(trouble.detail, 60))}")
    out.extend(_llm_markup(abstracts))
    if daemon:
        out.extend(_jobs_markup(daemon, now))
    return "\n".join(out)


def editor_command(editor: str, path: str, line: int | None) -> list[str]:
    """The command that opens `path` at `line` in `editor` ($EDITOR, with arguments)."""
    argv = shlex.split(editor) or ["vi"]
    name = os.path.basename(argv[0])
    if line is None:
        return [*argv, path]
    if name in ("code", "codium", "code-insiders"):
        return [*argv, "-g", f"{path}:{line}"]
    if name in ("hx", "helix", "subl", "kak"):
        return [*argv, f"{path}:{line}"] if name != "kak" else [*argv, f"+{line}", path]
    return [*argv, f"+{line}", path]


# -- the conversation on the query screen --------------------------------------------------

def turn_entry(question: str, result: dict[str, Any]) -> dict[str, Any]:
    """What the query screen keeps of a turn: the question, the query searched, and a line
    of what came back (the answer's start, else the first file found)."""
    answer = result.get("answer") if result.get("status") == "answered" else None
    rows = result.get("citations") or result.get("results") or []
    if isinstance(answer, str) and answer.strip():
        found = " ".join(answer.split())
    elif rows:
        found = (f"{len(rows)} passage{'' if len(rows) == 1 else 's'}, first "
                 f"{rows[0].get('source')}")
    else:
        found = "nothing found"
    return {"question": question, "searched": str(result.get("searched") or question),
            "found": found[:160] + ("…" if len(found) > 160 else ""),
            "turn": result.get("turn")}


def conversation_text(turns: list[dict[str, Any]], asking: str = "") -> Text:
    """The turns of a conversation, earliest first, each with what was searched, then the
    question being asked."""
    out = Text()
    for number, turn in enumerate(turns, start=1):
        if number > 1:
            out.append("\n")
        out.append(f"{number}. ", style="bold")
        out.append(turn["question"], style="bold")
        if turn["searched"] != turn["question"]:
            out.append(f"\n   searched: {turn['searched']}", style="italic")
        out.append(f"\n   {turn['found']}")
    if asking:
        out.append("\n" if turns else "")
        out.append(f"{len(turns) + 1}. ", style="bold")
        out.append(asking, style="bold")
        out.append("\n   asking…", style="italic")
    if turns:
        out.append("\n(ctrl+t starts a new conversation)", style="dim")
    return out


BAR_COLOURS = ("dodger_blue2", "dark_orange3", "green4", "medium_purple3", "gold3", "cyan3")


def blocks_text(children: list[dict[str, Any]], width: int = 40,
                marked: Any = None) -> Text:
    """A node's children as bars in proportion to their passages, each under its label (the
    `marked` child's with a pointer): the topic map of one layer."""
    total = sum(int(c.get("leaves") or 0) for c in children) or 1
    out = Text()
    for n, child in enumerate(children):
        leaves = int(child.get("leaves") or 0)
        if child.get("kind") == "leaf":
            name = os.path.basename(str(child.get("source") or "")) or f"chunk {child.get('id')}"
        else:
            name = " ".join(str(child.get("label") or child.get("abstract") or "").split())
        name = name or "(no label yet)"
        pointer = "▶ " if marked is not None and child.get("id") == marked else "  "
        room = max(8, width - 2)
        out.append(pointer, style="bold")
        out.append(name if len(name) <= room else name[: room - 1] + "…", style="bold")
        share = leaves / total
        figure = f" {leaves} ({share:.0%})"
        cells = max(1, round(share * max(4, width - 2 - len(figure))))
        out.append("\n  ")
        out.append("█" * cells, style=BAR_COLOURS[n % len(BAR_COLOURS)])
        out.append(figure + "\n", style="dim")
    return out

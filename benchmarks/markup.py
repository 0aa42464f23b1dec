"""How many query results show raw markup (reST, Markdown, HTML syntax) in their text (by hand).

    .venv/bin/python benchmarks/markup.py examples/docs
    .venv/bin/python benchmarks/markup.py examples/docs --query "reference counting" --show

Ingests the folder into a temporary data directory, runs each query in hybrid mode with k=5 and
counts results whose text matches a raw-markup pattern. Prints JSON: results, how many show
markup, the share, the count per pattern and per file suffix, and the share over marked-up files
(reST, Markdown, HTML: the others, PDFs of reST source say, are not cleaned).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase

QUERIES = (
    "reference counting", "memory allocation", "exceptions", "garbage collection",
    "weak references", "classes and inheritance", "templates", "routing URLs",
    "application context", "blueprints", "HTTP server", "license terms", "installation",
    "command line options", "request handling", "design decisions", "glossary terms",
    "object lifetime", "decorators", "configuration", "testing", "error messages",
    "history of Python", "quickstart",
)
MARKUP = {
    "rest_underline": re.compile(r"(?:^|\s)([=\-~^\"'`#*+<>_:.])\1{3,}(?:\s|$)"),
    "rest_role": re.compile(r":[a-zA-Z][\w.+-]*(?::[\w.+-]+)*:`"),
    "rest_directive": re.compile(r"(?:^|\s)\.\. [\w:+-]+::"),
    "rest_field": re.compile(r"(?:^|\s):(?:param|type|returns?|rtype|raises)\b[^:]*:"),
    "rest_link": re.compile(r"`[^`]+ <[^>]+>`_"),
    "html_tag": re.compile(
        r"</?(?:a|abbr|b|blockquote|body|br|code|dd|div|dl|dt|em|h[1-6]|head|hr|html|i|img|li|"
        r"nav|ol|p|pre|section|span|strong|table|td|th|tr|ul)(?:\s[^<>]*)?/?>", re.I),
    "markdown_link": re.compile(r"\]\([^)]*\)|\]\[[^\]]*\]"),
    "markdown_heading": re.compile(r"(?:^|\n)#{1,6} \S"),
    "markdown_fence": re.compile(r"(?:^|\n)\s*(?:```|~~~)"),
}

MARKED_UP = frozenset({".rst", ".md", ".markdown", ".html", ".htm", ".xhtml"})


def markup_in(text: str) -> list[str]:
    """Return the names of the markup patterns a result's text shows."""
    return [name for name, pattern in MARKUP.items() if pattern.search(text)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--query", action="append", help="a query (repeatable; default: built-in)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--show", action="store_true", help="print the results that show markup")
    args = parser.parse_args()
    queries = args.query or list(QUERIES)
    data = Path(tempfile.mkdtemp(prefix="psirag-markup-")) / "data"
    counts = dict.fromkeys(MARKUP, 0)
    by_suffix: dict[str, list[int]] = {}
    total = marked = 0
    with KnowledgeBase(Config().with_data_dir(data)) as kb:
        kb.ingest([args.folder])
        for query in queries:
            for result in kb.query(query, mode="hybrid", k=args.k)["results"]:
                total += 1
                found = markup_in(result["text"])
                seen = by_suffix.setdefault(Path(result["source"]).suffix.lower(), [0, 0])
                seen[0] += 1
                seen[1] += bool(found)
                for name in found:
                    counts[name] += 1
                if found:
                    marked += 1
                    if args.show:
                        print(f"--- {query!r} {result['source']} {found}\n{result['text']}\n")
    print(json.dumps({"queries": len(queries), "results": total, "with_markup": marked,
                      "share": round(marked / max(total, 1), 3),
                      "by_pattern": {k: v for k, v in counts.items() if v},
                      "by_suffix": {k: {"results": v[0], "with_markup": v[1]}
                                    for k, v in sorted(by_suffix.items())},
                      "marked_up_files": _share(by_suffix, MARKED_UP)}, indent=2))


def _share(by_suffix: dict[str, list[int]], suffixes: frozenset[str]) -> dict[str, float]:
    """Return the results over files with these suffixes, how many show markup, and the share."""
    results = sum(v[0] for k, v in by_suffix.items() if k in suffixes)
    marked = sum(v[1] for k, v in by_suffix.items() if k in suffixes)
    return {"results": results, "with_markup": marked, "share": round(marked / max(results, 1), 3)}


if __name__ == "__main__":
    main()

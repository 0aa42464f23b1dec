"""Jupyter notebooks (.ipynb, nbformat 3 and 4) read as JSON: one segment per cell.

Locations are {"cell": n, "type": "markdown" | "code" | "raw"}, n counting every cell from 1 as
the notebook shows them. A code cell's text outputs follow its source, cut to OUTPUT_CHARS.
"""

from __future__ import annotations

import json
import re
from typing import Any

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats import Extracted
from psirag_kb.ingest.formats.builder import TextBuilder
from psirag_kb.ingest.formats.containers import describe_content

OUTPUT_CHARS = 500
"""At most this many characters of a code cell's outputs are kept."""
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_OBJECT_REPR = re.compile(r"<[\w.]+(?: object)? at 0x[0-9a-fA-F]+>")


def read_notebook(data: bytes, kind: str = "ipynb") -> Extracted:
    """Read a notebook's markdown, code and raw cells (with short text outputs) in order."""
    try:
        notebook = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        what = describe_content(data)
        detail = f"it is {what}" if what and what != "plain text" else str(exc)
        raise SkippedFile(f"damaged .{kind}: not JSON ({detail})", damaged=True) from exc
    if not isinstance(notebook, dict):
        raise SkippedFile(f"damaged .{kind}: not a Jupyter notebook (no cells)")
    cells = notebook.get("cells")
    if cells is None:  # nbformat 3 keeps its cells in worksheets
        worksheets = notebook.get("worksheets")
        if isinstance(worksheets, list):
            cells = [c for sheet in worksheets if isinstance(sheet, dict)
                     for c in sheet.get("cells") or []]
    if not isinstance(cells, list):
        raise SkippedFile(f"damaged .{kind}: not a Jupyter notebook (no cells)")
    builder = TextBuilder()
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            continue
        cell_type = str(cell.get("cell_type") or "raw")
        source = _text(cell.get("source", cell.get("input", "")))
        if cell_type == "heading":  # nbformat 3
            source = "#" * min(max(int(cell.get("level") or 1), 1), 6) + " " + source.strip()
            cell_type = "markdown"
        outputs = _outputs(cell.get("outputs")) if cell_type == "code" else ""
        text = source if not outputs else f"{source.rstrip()}\n\nOutput: {outputs}"
        builder.add(text, {"cell": number, "type": cell_type})
    return builder.build()


def _text(value: Any) -> str:
    """Join a notebook string field (a string or a list of lines)."""
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return str(value or "")


def _outputs(outputs: Any) -> str:
    """Return a code cell's stream and text/plain outputs, cut to OUTPUT_CHARS."""
    if not isinstance(outputs, list):
        return ""
    parts = []
    for output in outputs:
        if not isinstance(output, dict):
            continue
        kind = output.get("output_type")
        if kind == "stream":
            parts.append(_text(output.get("text")))
        elif kind in ("execute_result", "display_data", "pyout"):
            data = output.get("data") or output
            plain = _text(data.get("text/plain", data.get("text", "")))
            if not _OBJECT_REPR.fullmatch(plain.strip()):  # the stand-in for HTML or an image
                parts.append(plain)
        elif kind in ("error", "pyerr"):
            parts.append(f"{output.get('ename', '')}: {output.get('evalue', '')}")
    text = _ANSI.sub("", "\n".join(p.strip() for p in parts if p.strip()))
    return text if len(text) <= OUTPUT_CHARS else text[:OUTPUT_CHARS].rstrip() + " …"

"""Read speed per structured format (MB/s of file bytes) on sample files (run by hand).

    .venv/bin/python benchmarks/formats.py tests/fixtures/docs
    .venv/bin/python benchmarks/formats.py --compare tests/fixtures/docs more/samples/*.xlsx

Prints JSON: per format the files read, bytes, characters and segments extracted, and MB/s (each
file read `--repeat` times, best time kept, after one untimed warm-up read that also pays the
imports). Encrypted or damaged samples are counted as skipped. `--compare` also times the other
candidate libraries that are importable (markitdown, odfpy, ebooklib, extract-msg, nbformat) on
the same files, for choosing readers; they are not dependencies of the project.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats import STRUCTURED_KINDS, read_structured


def _files(paths: list[Path]) -> list[Path]:
    """Expand folders into the structured files they hold, sorted."""
    found: list[Path] = []
    for path in paths:
        candidates = sorted(path.rglob("*")) if path.is_dir() else [path]
        found.extend(p for p in candidates if p.is_file() and p.suffix.lower() in STRUCTURED_KINDS)
    return found


def _best_time(function: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Run a function once untimed, then `repeat` times; return the best time and last result."""
    result = function()
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return best, result


def _ours(path: Path, data: bytes, kind: str) -> Callable[[], tuple[int, int]]:
    """Return a call that reads a file with the project's reader: (characters, segments)."""

    def read() -> tuple[int, int]:
        extracted = read_structured(path, data, kind)
        return len(extracted.text), len(extracted.segments)

    return read


def _alternatives(kind: str) -> dict[str, Callable[[Path, bytes], str]]:
    """Return the importable alternative extractors for a kind, each bytes -> text."""
    found: dict[str, Callable[[Path, bytes], str]] = {}
    try:
        from markitdown import MarkItDown, StreamInfo

        converter = MarkItDown(enable_plugins=False)

        def markitdown(path: Path, data: bytes) -> str:
            info = StreamInfo(extension=path.suffix.lower(), filename=path.name)
            return converter.convert_stream(io.BytesIO(data), stream_info=info).text_content

        if kind in ("docx", "pptx", "xlsx", "epub", "msg", "ipynb"):
            found["markitdown"] = markitdown
    except ImportError:
        pass
    if kind in ("odt", "odp", "ods"):
        try:
            from odf import teletype, text
            from odf.opendocument import load

            def odfpy(path: Path, data: bytes) -> str:
                document = load(io.BytesIO(data))
                nodes = document.body.getElementsByType(text.P)
                nodes += document.body.getElementsByType(text.H)
                return "\n".join(teletype.extractText(node) for node in nodes)

            found["odfpy"] = odfpy
        except ImportError:
            pass
    if kind == "epub":
        try:
            import ebooklib
            from ebooklib import epub

            from psirag_kb.ingest.formats.htmlblocks import html_blocks

            def ebooklib_reader(path: Path, data: bytes) -> str:
                book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
                parts = []
                for item in book.get_items_of_type(ebooklib.ITEM_DOCUMENT):
                    html = item.get_content().decode("utf-8", "replace")
                    parts.extend(block.text for block in html_blocks(html))
                return "\n".join(parts)

            found["ebooklib"] = ebooklib_reader
        except ImportError:
            pass
    if kind == "msg":
        try:
            import extract_msg

            def extract_msg_reader(path: Path, data: bytes) -> str:
                with extract_msg.openMsg(data) as message:
                    fields = (message.sender, message.to, message.date, message.subject)
                    return "\n".join(str(f or "") for f in fields) + "\n" + (message.body or "")

            found["extract-msg"] = extract_msg_reader
        except ImportError:
            pass
    if kind == "ipynb":
        try:
            import nbformat

            def nbformat_reader(path: Path, data: bytes) -> str:
                notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
                return "\n\n".join(cell.source for cell in notebook.cells)

            found["nbformat"] = nbformat_reader
        except ImportError:
            pass
    return found


def _measure(files: list[Path], repeat: int, compare: bool) -> dict[str, dict]:
    """Time every file with the project's reader (and alternatives): totals per kind."""
    report: dict[str, dict] = {}
    for path in files:
        kind = STRUCTURED_KINDS[path.suffix.lower()]
        data = path.read_bytes()
        entry = report.setdefault(kind, {"files": 0, "skipped": [], "bytes": 0, "seconds": 0.0,
                                         "chars": 0, "segments": 0, "compare": {}})
        try:
            seconds, (chars, segments) = _best_time(_ours(path, data, kind), repeat)
        except SkippedFile as exc:
            entry["skipped"].append(f"{path.name}: {exc.reason}")
            continue
        entry["files"] += 1
        entry["bytes"] += len(data)
        entry["seconds"] += seconds
        entry["chars"] += chars
        entry["segments"] += segments
        if not compare:
            continue
        for name, extract in _alternatives(kind).items():
            other = entry["compare"].setdefault(name, {"bytes": 0, "seconds": 0.0, "chars": 0,
                                                       "errors": []})
            try:
                seconds, text = _best_time(lambda e=extract, p=path, d=data: e(p, d), repeat)
            except Exception as exc:  # a candidate failing on a sample is a finding, not a crash
                other["errors"].append(f"{path.name}: {type(exc).__name__}: {exc}"[:200])
                continue
            other["bytes"] += len(data)
            other["seconds"] += seconds
            other["chars"] += len(str(text))
    for entry in report.values():
        for block in [entry, *entry["compare"].values()]:
            seconds = block.pop("seconds")
            block["ms"] = round(seconds * 1000, 2)
            block["mb_per_s"] = round(block["bytes"] / 1e6 / seconds, 2) if seconds else None
        if not entry["compare"]:
            del entry["compare"]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="sample files or folders of them")
    parser.add_argument("--repeat", type=int, default=5, help="timed reads per file (best kept)")
    parser.add_argument("--compare", action="store_true", help="also time other libraries")
    args = parser.parse_args()
    files = _files(args.paths)
    if not files:
        parser.error("no .docx/.pptx/.xlsx/.odt/.odp/.ods/.epub/.eml/.msg/.ipynb files given")
    report = _measure(files, max(1, args.repeat), args.compare)
    print(json.dumps({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "files": len(files),
        "repeat": args.repeat,
        "formats": dict(sorted(report.items())),
    }, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()

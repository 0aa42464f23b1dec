"""Reads hostile files with the real readers, one path per line of stdin, and reports each as a
JSON line: `start` before it, then its outcome.

Run by tests/hostile_run.py in a process whose address space is limited (RLIMIT_AS): a crash,
a hang or a MemoryError shows as a missing or a `memory` outcome, never as a killed test run.
Outcomes: indexed (read, then chunked), skipped or failed (with the reader's reason), and the
findings: memory (MemoryError escaped the reader), error (any other exception escaped).
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from psirag_kb.config import IngestConfig
from psirag_kb.errors import FileReadError, SkippedFile
from psirag_kb.ingest.chunking import chunk_text
from psirag_kb.ingest.documents import read_document
from psirag_kb.ingest.formats.bounds import UnpackLimits
from psirag_kb.storage.scripts import segment


def outcome(path: Path) -> dict:
    """What the readers make of one file, as the pipeline would record it."""
    ingest = IngestConfig()
    try:
        document = read_document(path, max_bytes=ingest.max_file_bytes, ocr=False,
                                 limits=UnpackLimits(ingest.max_extracted_bytes,
                                                     ingest.max_compression_ratio))
        chunks = chunk_text(document.text, lambda text: len(text.split()) + 1,
                            max_tokens=ingest.chunk_tokens,
                            hard_max_tokens=ingest.max_chunk_tokens, breaks=document.breaks())
        document.locations([(c.start, c.end) for c in chunks])
        document.headers([c.line_first for c in chunks])
        for chunk in chunks:
            segment(chunk.text)
        return {"outcome": "indexed", "reason": document.note or "",
                "chars": len(document.text), "chunks": len(chunks)}
    except SkippedFile as exc:
        return {"outcome": "skipped", "reason": exc.reason}
    except (FileReadError, OSError) as exc:
        return {"outcome": "failed", "reason": str(exc)}
    except MemoryError:
        return {"outcome": "memory", "reason": traceback.format_exc(limit=-6)[-1500:]}
    except Exception as exc:  # noqa: BLE001 - a finding: reported, and the next case runs
        return {"outcome": "error",
                "reason": f"{type(exc).__name__}: {exc}"[:300] + "\n"
                + traceback.format_exc(limit=-6)[-1500:]}


def main() -> None:
    """Read the paths of stdin in turn."""
    for line in sys.stdin:
        path = Path(line.rstrip("\n"))
        print(json.dumps({"path": str(path), "event": "start"}), flush=True)
        result = outcome(path)
        print(json.dumps({"path": str(path), "event": "done", **result}), flush=True)


if __name__ == "__main__":
    main()

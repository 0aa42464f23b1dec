"""Peak memory of the file reader alone, measured in a fresh process.

Run as `python memory_probe.py PATH MAX_FILE_BYTES [MAX_EXTRACTED_BYTES]`: it warms the reader
up on a tiny file of the same kind (imports, caches), resets the peak RSS (VmHWM), reads PATH
with `read_document` and prints one JSON line: the peak RSS growth in bytes while reading, and
the outcome ("indexed" with the text's length, or the skip reason). `reader_growth` runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
WARM_UP = {".docx": "docs/testWORD.docx", ".pptx": "docs/testPPT.pptx",
           ".xlsx": "docs/testEXCEL.xlsx", ".odt": "docs/example.odt", ".odp": "docs/example.odp",
           ".ods": "docs/countrystatistics.ods", ".epub": "docs/testEPUB.epub",
           ".pdf": "sample.pdf"}


def _kb(field: str) -> int:
    """A field of /proc/self/status in kB (VmRSS, VmHWM)."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _warm_up(path: Path, limits: object) -> None:
    """Read a small file of the same kind once, so imports and caches are not counted."""
    from psirag_kb.ingest.documents import read_document

    with tempfile.TemporaryDirectory() as folder:
        small = Path(folder) / f"warm{path.suffix}"
        template = WARM_UP.get(path.suffix.lower())
        if template:
            shutil.copy(FIXTURES / template, small)
        else:
            small.write_text("<p>A small warm-up page.</p>\n<script>var a = 1;</script>\n")
        read_document(small, limits=limits)


def main() -> None:
    """Measure one read and print the JSON line."""
    from psirag_kb.errors import SkippedFile
    from psirag_kb.ingest.documents import read_document
    from psirag_kb.ingest.formats.bounds import UnpackLimits

    path, max_bytes = Path(sys.argv[1]), int(sys.argv[2])
    limits = UnpackLimits(int(sys.argv[3])) if len(sys.argv) > 3 else UnpackLimits()
    _warm_up(path, limits)
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")  # VmHWM := VmRSS
    except OSError as exc:
        print(json.dumps({"skip": f"cannot reset the peak RSS (VmHWM) here: {exc}"}))
        return
    start = _kb("VmRSS")
    try:
        document = read_document(path, max_bytes=max_bytes, limits=limits)
        outcome = f"indexed {len(document.text)} chars"
    except SkippedFile as exc:
        outcome = exc.reason
    print(json.dumps({"growth": (_kb("VmHWM") - start) * 1024, "outcome": outcome}))


def reader_growth(path: Path, max_bytes: int, max_extracted: int | None = None) -> tuple[int, str]:
    """Peak RSS growth (bytes) of reading `path` in a fresh interpreter, and the outcome."""
    args = [sys.executable, __file__, str(path), str(max_bytes)]
    if max_extracted is not None:
        args.append(str(max_extracted))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH"))
        if p)}
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        import pytest

        pytest.skip(result["skip"])
    return int(result["growth"]), str(result["outcome"])


if __name__ == "__main__":
    main()

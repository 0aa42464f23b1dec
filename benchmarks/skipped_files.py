"""What ingest would skip in folders, and why: every file below them is judged and read as an
ingest reads it (no embedding, nothing stored); prints the kinds, encodings and skip reasons.

    PYTHONPATH=. python benchmarks/skipped_files.py /usr/share/doc/git /usr/share/doc/valgrind
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from pathlib import Path

from psirag_kb.errors import FileReadError, SkippedFile
from psirag_kb.ingest.documents import read_document, unread_reason


def main() -> None:
    """Walk the folders (hidden names and symlinked folders left out, as ingest does)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--examples", type=int, default=3, help="paths shown per reason")
    args = parser.parse_args()
    reasons: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[str]] = collections.defaultdict(list)
    kinds: collections.Counter[str] = collections.Counter()
    encodings: collections.Counter[str] = collections.Counter()
    files, started = 0, time.perf_counter()
    for root in args.folders:
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
            for name in sorted(names):
                path = Path(folder) / name
                if name.startswith(".") or (path.is_symlink() and not path.exists()):
                    continue
                files += 1
                try:
                    unread = unread_reason(path)
                    if unread:
                        raise SkippedFile(unread)
                    document = read_document(path, ocr=False)
                except (SkippedFile, FileReadError) as exc:
                    reasons[str(exc)] += 1
                    examples[str(exc)].append(str(path))
                    continue
                kinds[document.kind] += 1
                encodings[document.encoding or "(reader's own)"] += 1
    print(f"{files} files in {time.perf_counter() - started:.0f} s; read: {sum(kinds.values())} "
          f"{dict(kinds.most_common())}; encodings {dict(encodings.most_common())}; "
          f"skipped: {sum(reasons.values())}")
    for reason, count in reasons.most_common():
        print(f"{count:5d}  {reason}  e.g. {', '.join(examples[reason][:args.examples])}")


if __name__ == "__main__":
    main()

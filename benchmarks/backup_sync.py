"""How long a backup's writer takes to make a pre-copied DuckDB file exact (`sync_file`) against
a plain copy, for a file of a given size with a few changed spots.

    .venv/bin/python benchmarks/backup_sync.py --mb 1600 --work /tmp/psirag-sync

Writes a file of random bytes, copies it, changes `--spots` 256 KB spots (what a few commits and
a checkpoint rewrite), then times `sync_file` twice (the second finds nothing to rewrite) and a
plain copy. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from psirag_kb.storage.backup import sync_file

SPOT = 1 << 18


def timed(action: object) -> tuple[float, object]:
    """Seconds and result of `action()`."""
    started = time.perf_counter()
    result = action()  # type: ignore[operator]
    return round(time.perf_counter() - started, 2), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=1600, help="file size in MiB")
    parser.add_argument("--spots", type=int, default=40)
    parser.add_argument("--work", type=Path, default=Path("/tmp/psirag-sync"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    source, target = args.work / "source", args.work / "target"
    size = args.mb << 20
    with source.open("wb") as handle:
        for _ in range(size >> 24):
            handle.write(os.urandom(1 << 24))
    out: dict[str, object] = {"mb": args.mb, "load_at_start": os.getloadavg(),
                              "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    out["first_copy_s"], _ = timed(lambda: shutil.copyfile(source, target))
    with source.open("r+b") as handle:
        for spot in range(args.spots):
            handle.seek(spot * (size // args.spots))
            handle.write(os.urandom(SPOT))
    for run in ("sync_s", "sync_again_s"):
        seconds, written = timed(lambda: sync_file(source, target))
        out[run], out[run.replace("_s", "_bytes_written")] = seconds, written
    target.unlink()
    out["plain_copy_s"], _ = timed(lambda: shutil.copyfile(source, target))
    out["load_at_end"] = os.getloadavg()
    shutil.rmtree(args.work)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

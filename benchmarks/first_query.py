"""The first query after the daemon starts: how long a user waits for it.

    python benchmarks/first_query.py examples/docs --after 15 --runs 3

Indexes the folder into a temporary data directory once, then per run starts `psirag-kb daemon`
on it, waits until it serves plus `--after` seconds (a user opening the TUI), and times one
hybrid query over the HTTP API. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def cli(data: Path, *args: str, **popen: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "psirag_kb", "--data-dir", str(data), *args],
                            **popen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--after", type=float, default=15.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="psirag-first-")) / "data"
    if cli(data, "ingest", str(args.folder), stdout=subprocess.DEVNULL).wait() != 0:
        raise SystemExit("ingest failed")
    seconds = []
    for _ in range(args.runs):
        proc = cli(data, "daemon", "--watch", str(args.folder), "--port", "0",
                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        url = proc.stdout.readline().split("serving ")[1].split(";")[0]
        token = (data / "api.token").read_text().strip()
        time.sleep(args.after)
        started = time.perf_counter()
        request = urllib.request.Request(
            url + "/api/query", method="POST",
            data=json.dumps({"text": "How does Python manage memory?"}).encode(),
            headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=300) as response:
            json.loads(response.read())
        seconds.append(time.perf_counter() - started)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    print(json.dumps({"after_s": args.after, "first_query_s": [round(s, 3) for s in seconds],
                      "median_s": round(statistics.median(seconds), 3)}, indent=2))


if __name__ == "__main__":
    main()

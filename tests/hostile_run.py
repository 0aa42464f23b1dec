"""Runs hostile files through tests/hostile_worker.py under a memory and a per-file time limit,
and tells what became of each.

One worker process reads many files in turn; one that dies (a crash, the memory limit) or does
not answer within the time limit is killed, its file recorded as `crash` or `hang`, and a new
worker goes on with the next file. Run by hand:
`python tests/hostile_run.py COUNT [START]` prints the outcomes of that range of the corpus.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

WORKER = Path(__file__).resolve().parent / "hostile_worker.py"
ROOT = WORKER.parents[1]
MEMORY_LIMIT = 1536 << 20
"""Address space of a worker (RLIMIT_AS): the interpreter and every reader's library fit in a
fraction of it; a reader that balloons meets MemoryError, not the machine's swap."""
TIME_LIMIT_S = 60.0
"""Seconds one file may take (generous for a loaded two-core machine; a hang never ends)."""
CLEAN = frozenset({"indexed", "skipped", "failed"})
"""The outcomes of a case that ran clean; any other one (error, memory, crash, hang) is a
finding."""


def _limit_memory(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _start(memory: int, paths: list[str]) -> subprocess.Popen:
    """A worker reading `paths` (from a file as its stdin: a pipe written while its answers
    are not yet read would fill up both ways)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with tempfile.TemporaryFile("w+") as listing:
        listing.write("".join(f"{p}\n" for p in paths))
        listing.seek(0)
        return subprocess.Popen(
            [sys.executable, str(WORKER)], stdin=listing, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT,
            preexec_fn=lambda: _limit_memory(memory))


def run(paths: list[Path], memory: int = MEMORY_LIMIT,
        time_limit: float = TIME_LIMIT_S) -> dict[str, dict]:
    """The outcome of each path (by its str): the worker's report, or crash / hang."""
    results: dict[str, dict] = {}
    pending = [str(p) for p in paths]
    while pending:
        worker = _start(memory, pending)
        assert worker.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(worker.stdout, selectors.EVENT_READ)
        current: str | None = None
        deadline = time.monotonic() + time_limit * 4  # the first case also imports
        while True:
            if not selector.select(max(0.0, deadline - time.monotonic())):
                worker.kill()
                if current is not None:
                    results[current] = {"outcome": "hang",
                                        "reason": f"no answer within {time_limit:.0f} s"}
                elif pending:  # the worker never started a file: count its first one
                    results[pending[0]] = {"outcome": "hang", "reason": "worker did not start"}
                break
            line = worker.stdout.readline()
            if not line:  # the worker ended: done, or died (on `current`, or before any file)
                code = worker.wait()
                left = [p for p in pending if p not in results]
                if current is not None or left:
                    results[current or left[0]] = {"outcome": "crash",
                                                   "reason": f"worker exit {code}"}
                break
            report = json.loads(line)
            if report["event"] == "start":
                current = report["path"]
                deadline = time.monotonic() + time_limit
            else:
                results[report.pop("path")] = report
                current = None
                deadline = time.monotonic() + time_limit
        worker.wait()
        selector.close()
        pending = [p for p in pending if p not in results]
    return results


def findings(results: dict[str, dict]) -> dict[str, dict]:
    """The cases that did not end as indexed, skipped or failed with a reason."""
    return {path: r for path, r in results.items()
            if r["outcome"] not in CLEAN or (r["outcome"] != "indexed" and not r["reason"])}


def main() -> None:
    """Write a range of the corpus to a temporary folder, run it, print the outcomes."""
    sys.path.insert(0, str(WORKER.parent))
    from hostile import write_cases

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    start = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    with tempfile.TemporaryDirectory() as folder:
        made = write_cases(Path(folder), count, start=start)
        started = time.monotonic()
        results = run([Path(folder) / c.name for c in made])
        elapsed = time.monotonic() - started
    print(json.dumps(Counter(r["outcome"] for r in results.values())))
    for path, result in sorted(findings(results).items()):
        print(Path(path).name, result["outcome"], result["reason"][:2000])
    print(f"{len(results)} cases in {elapsed:.1f} s")


if __name__ == "__main__":
    main()

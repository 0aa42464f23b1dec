"""How soon a daemon watching a fresh folder shows abstracts at the top of its tree.

    .venv/bin/python benchmarks/daemon_abstracts.py examples/docs --work /tmp/psirag-daemon-abs

Copies FOLDER to WORK/docs, starts a daemon (real MiniLM, default config apart from the port and
data directory) watching it, and polls its API every 0.2 s: the time its queues (watcher and
writer) are first seen empty, and the time the root and every child of the root have an abstract
and are clean. Prints both, the refresher's own times (since when the queues were quiet, its run's
start and end) and the slowest status call, then the top of the tree.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from psirag_kb.config import Config
from psirag_kb.service.daemon import Daemon


def get(daemon: Daemon, path: str) -> Any:
    """One authorised GET on the daemon's API."""
    request = urllib.request.Request(daemon.api.url + path)
    request.add_header("Authorization", f"Bearer {daemon.api.token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def top_clean(root: dict[str, Any]) -> bool:
    """Whether the root and its children all have a fresh abstract."""
    nodes = [root, *root.get("children", [])]
    return len(nodes) > 1 and all(n.get("abstract") and not n.get("dirty") for n in nodes)


def main() -> None:
    """Run the daemon on a fresh copy and time the abstracts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/psirag-daemon-abs"))
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    if args.work.exists():
        shutil.rmtree(args.work)
    docs = args.work / "docs"
    shutil.copytree(args.folder, docs)
    config = Config().with_data_dir(args.work / "data")
    config = config.replace("watch", folders=[str(docs)]).replace("api", port=0)
    daemon = Daemon(config)
    started = time.monotonic()
    daemon.start()
    drained = clean = None
    slowest = 0.0
    try:
        while time.monotonic() - started < args.timeout:
            asked = time.monotonic()
            status = get(daemon, "/api/status")
            slowest = max(slowest, time.monotonic() - asked)
            queue = status["daemon"]["queue"]
            if drained is None and queue == 0 and status["chunks"]:
                drained = time.monotonic() - started  # the refresher's own writes queue too
            try:
                root = get(daemon, "/api/tree")
            except urllib.error.HTTPError:  # no tree yet
                root = {}
            if drained is not None and top_clean(root):
                clean = time.monotonic() - started
                break
            time.sleep(0.2)
        root = get(daemon, "/api/tree")
        status = get(daemon, "/api/status")
    finally:
        daemon.stop()
    print(f"chunks {status['chunks']}, files {status['files']['indexed']}")
    print(f"queues drained at {drained:.1f} s" if drained else "queues never drained")
    if clean is None:
        print("the top of the tree was not clean before the timeout")
        sys.exit(1)
    print(f"root and its {len(root['children'])} children clean at {clean:.1f} s: "
          f"{clean - drained:.1f} s after this poller saw the queues drained")
    run = status["daemon"]["abstracts"]["last_run"]
    print(f"the daemon's refresher: queues quiet since t0, run from t0 + "
          f"{run['started'] - run['quiet_since']:.1f} s to t0 + "
          f"{run['finished'] - run['quiet_since']:.1f} s; slowest status call "
          f"{slowest:.2f} s")
    print(f"root: {root['abstract']}")
    for child in root["children"]:
        print(f"  - {child['leaves']} leaves: {child['abstract'][:110]}")
    print(json.dumps({"drained_s": drained, "clean_s": clean, "after_drain_s": clean - drained,
                      "refresher": status["daemon"].get("abstracts")}))


if __name__ == "__main__":
    main()

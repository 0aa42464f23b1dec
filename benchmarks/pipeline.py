"""Ingest throughput and edit-during-burst latency of two code trees, side by side (by hand).

    .venv/bin/python benchmarks/pipeline.py --old /tmp/main-tree --new . \\
        ../shared/data/2wiki_corpus/corpus.jsonl --files 400

Writes FILES markdown files of real text (PER_FILE passages each, from a {"id","title","text"}
corpus) into a temporary folder, then for each tree, in turns (old, new, old, new):
  throughput: a fresh knowledge base ingests the folder (the real model): files/s, chunks/s;
  latency: a daemon of that tree watches an empty folder; one note is indexed; the daemon stops,
  a folder of the FILES files is copied in and the daemon starts again (or, with --burst move
  or copy, the folder is moved or copied in while it runs); once its first files are committed (the
  burst is being indexed) the note gets a one-line
  edit and the seconds until a hybrid query returns the new line are measured (its HTTP API,
  polled 10x/s), then the seconds from SIGTERM until the daemon has exited.
Each tree runs in its own subprocess started in it, with PYTHONPATH set to it (`-m` and `-c`
put the working folder first on the path).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

RUN_INGEST = """
import json, sys, time
from pathlib import Path
from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
kb = KnowledgeBase(Config().with_data_dir(Path(sys.argv[1])))
kb.embedder.embed(["warm up the model"])
started = time.perf_counter()
report = kb.ingest([Path(sys.argv[2])])
seconds = time.perf_counter() - started
chunks = kb.stores.store.chunk_count()
kb.close()
print(json.dumps({"seconds": round(seconds, 1), "files": report.added, "chunks": chunks,
                  "stages": report.seconds}))
"""


def write_files(corpus: Path, folder: Path, count: int, per_file: int) -> None:
    """`count` markdown files of `per_file` corpus passages each."""
    lines = corpus.read_text(encoding="utf-8").splitlines()
    folder.mkdir(parents=True)
    for number in range(count):
        parts = []
        for line in lines[number * per_file:(number + 1) * per_file]:
            item = json.loads(line)
            parts.append(f"## {item['title']}\n\n{item['text']}\n")
        (folder / f"doc{number:04d}.md").write_text("\n".join(parts), encoding="utf-8")


def throughput(tree: Path, folder: Path, work: Path) -> dict[str, Any]:
    """One ingest of the folder into a fresh data directory by `tree`'s code."""
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(tree), HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", RUN_INGEST, str(data), str(folder)], env=env,
                         cwd=tree, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["files_per_s"] = round(result["files"] / result["seconds"], 2)
    result["chunks_per_s"] = round(result["chunks"] / result["seconds"], 1)
    shutil.rmtree(data, ignore_errors=True)
    return result


def _api(data: Path, path: str, body: Any = None) -> Any:
    url = json.loads((data / "daemon.json").read_text())["url"]
    token = (data / "api.token").read_text().strip()
    request = urllib.request.Request(url + path, method="POST" if body else "GET",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _until(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("timed out")


def _found(data: Path, text: str, word: str) -> bool:
    body = {"text": text, "mode": "hybrid", "k": 5}
    return any(word in r["text"] for r in _api(data, "/api/query", body)["results"])


def _start(tree: Path, config: Path, data: Path) -> subprocess.Popen:
    """A daemon of `tree`'s code, once it serves."""
    env = dict(os.environ, PYTHONPATH=str(tree), HF_HUB_OFFLINE="1")
    daemon = subprocess.Popen([sys.executable, "-m", "psirag_kb", "--config", str(config),
                               "daemon"], env=env, cwd=tree, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    _until(lambda: (data / "daemon.json").exists(), 120)
    return daemon


def _stop(daemon: subprocess.Popen) -> float:
    """SIGTERM a daemon; seconds until it exited."""
    started = time.perf_counter()
    daemon.send_signal(signal.SIGTERM)
    daemon.wait(600)
    return time.perf_counter() - started


def latency(tree: Path, folder: Path, work: Path, burst: str) -> dict[str, Any]:
    """Seconds from saving a one-line edit during a burst until a hybrid query finds it."""
    watched, data = work / "watched", work / "daemon-data"
    shutil.rmtree(watched, ignore_errors=True)
    shutil.rmtree(data, ignore_errors=True)
    watched.mkdir()
    config = work / "config.toml"
    config.write_text(f'[storage]\ndata_dir = "{data}"\n[watch]\nfolders = ["{watched}"]\n'
                      'quiet_period_s = 0.5\n[api]\nport = 0\n')
    daemon = _start(tree, config, data)
    try:
        note = watched / "note.md"
        note.write_text("The lighthouse keeper painted the door blue.\n")
        _until(lambda: _found(data, "lighthouse door painted blue", "blue"), 120)
        if burst == "restart":  # arrived while the daemon was down: one reconciliation scan
            _stop(daemon)
            shutil.copytree(folder, watched / "burst")
            daemon = _start(tree, config, data)
        elif burst == "copy":  # files arrive one by one: the watcher sees them in small sets
            shutil.copytree(folder, watched / "burst")
        else:  # a folder moved in at once
            shutil.copytree(folder, work / "outside")
            os.rename(work / "outside", watched / "burst")
        # the burst is being indexed: its first files are committed
        _until(lambda: _api(data, "/api/status")["files"]["indexed"] > 1, 600)
        indexed_before = _api(data, "/api/status")["files"]["indexed"]
        saved = time.perf_counter()
        note.write_text("The lighthouse keeper painted the door crimson with zebra stripes.\n")
        _until(lambda: _found(data, "door painted crimson with zebra stripes", "zebra"), 900)
        seconds = time.perf_counter() - saved
        indexed_after = _api(data, "/api/status")["files"]["indexed"]
        stop_s = _stop(daemon)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    total = len(list(folder.iterdir())) + 1
    return {"edit_found_s": round(seconds, 1), "indexed_at_edit": indexed_before,
            "indexed_when_found": indexed_after, "of": total, "sigterm_s": round(stop_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--old", type=Path, required=True, help="tree of the code before")
    parser.add_argument("--new", type=Path, required=True, help="tree of the code after")
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--per-file", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip", choices=["throughput", "latency"], default=None)
    parser.add_argument("--burst", choices=["restart", "move", "copy"], default="restart",
                        help="the burst: files found by the start-up reconciliation (one scan), "
                        "a folder moved in, or files copied one by one")
    args = parser.parse_args()
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = work / "docs"
        write_files(args.corpus, folder, args.files, args.per_file)
        print(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                          f"Python {platform.python_version()}",
                          "load_before": os.getloadavg(), "files": args.files}), flush=True)
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                if args.skip != "throughput":
                    result = throughput(tree, folder, work)
                    print(json.dumps({"tree": name, "round": round_, "ingest": result,
                                      "load": os.getloadavg()[0]}), flush=True)
        for name, tree in trees.items():
            if args.skip != "latency":
                result = latency(tree, folder, work, args.burst)
                print(json.dumps({"tree": name, "burst": args.burst, "latency": result,
                                  "load": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()

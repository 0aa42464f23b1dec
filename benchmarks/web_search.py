"""The web page's first search on a large knowledge base: how long until the results page arrives.

    python benchmarks/web_search.py /work/shared/data/2wiki_corpus --chunks 10000 --after 0
    python benchmarks/web_search.py /work/shared/data/2wiki_corpus --data DIR --after 15

Writes the corpus's records (repeated with new ids until `--chunks` is reached) to a JSONL file,
ingests it into a temporary data directory (or reuses `--data`, printed by an earlier run),
starts `psirag-kb daemon` on it, waits `--after` seconds (a person opening the page), signs in
with the owner's token and times the first search page (GET /?q=...) and five more, each end to
end (query, topic paths, rendering). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

QUERIES = ["Who was the queen of Lotharingia?", "bishop of Elmham", "film director born",
           "football club founded", "river in Germany", "album released by the band"]


def cli(data: Path, *args: str, **popen: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "psirag_kb", "--data-dir", str(data), *args],
                            **popen)


def corpus(folder: Path, chunks: int, out: Path) -> int:
    """The corpus's records, repeated with fresh ids, `chunks` of them."""
    records = [json.loads(line) for line in (folder / "corpus.jsonl").open()]
    with out.open("w") as handle:
        for n in range(chunks):
            record = dict(records[n % len(records)])
            record["id"] = f"{record['id']}-{n // len(records)}"
            handle.write(json.dumps(record) + "\n")
    return chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="a folder holding corpus.jsonl")
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--data", type=Path, help="a data directory from an earlier run")
    parser.add_argument("--after", type=float, default=0.0)
    args = parser.parse_args()
    ingest_s = None
    data = args.data
    if data is None:
        work = Path(tempfile.mkdtemp(prefix="psirag-web-"))
        data, records = work / "data", work / "records.jsonl"
        corpus(args.corpus, args.chunks, records)
        started = time.perf_counter()
        if cli(data, "ingest", "--jsonl", str(records), "--no-abstracts",
               stdout=subprocess.DEVNULL).wait() != 0:
            raise SystemExit("ingest failed")
        ingest_s = round(time.perf_counter() - started, 1)
    proc = cli(data, "daemon", "--port", "0", stdout=subprocess.PIPE,
               stderr=(data / "daemon.out").open("a"), text=True)
    try:
        line = proc.stdout.readline()
        page = re.search(r"the page at (\S+);", line).group(1).rstrip("/")
        token = (data / "api.token").read_text().strip()
        time.sleep(args.after)
        opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        form = opener.open(page + "/signin").read().decode()
        csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
        opener.open(page + "/signin", data=urllib.parse.urlencode(
            {"token": token, "csrf": csrf}).encode()).read()
        seconds = []
        for query in QUERIES:
            begun = time.perf_counter()
            html = opener.open(page + "/?" + urllib.parse.urlencode({"q": query})).read()
            seconds.append(time.perf_counter() - begun)
            assert b'class="result"' in html, "no results"
        status = json.loads(urllib.request.urlopen(urllib.request.Request(
            line.split("serving ")[1].split(";")[0] + "/api/status",
            headers={"Authorization": f"Bearer {token}"})).read())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    print(json.dumps({"data": str(data), "chunks": status["chunks"], "ingest_s": ingest_s,
                      "after_s": args.after,
                      "first_search_s": round(seconds[0], 3),
                      "next_searches_median_s": round(statistics.median(seconds[1:]), 3)},
                     indent=2))


if __name__ == "__main__":
    main()

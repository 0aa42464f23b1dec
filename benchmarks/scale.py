"""Scale: N generated chunks ingested by the CLI, then opened, queried, added to and deleted from.

    .venv/bin/python benchmarks/scale.py --n 10000 100000 1000000 \
        --data /work/shared/data/*/corpus.jsonl \
        --model ~/.cache/psirag-kb/models/minilm-static --work /tmp/psirag-scale
    .venv/bin/python benchmarks/scale.py --n 10000 ... --keep   # rerun the stages after ingest

Per N, in `WORK/nN/` (its own folder, config and data directory):
1. Generates `docs/`: markdown files of 50 chunks in folders of 20 files (1,000 chunks a folder).
   Each chunk is a `## Note <code word>` heading (a made-up word, unique per chunk) over a
   paragraph of real sentences from the corpora, drawn at random and recombined; sentences are
   counted with the model's tokenizer so that heading plus paragraph is one chunk of the default
   chunker (over half of `[ingest] chunk_tokens` and at most all of it). The count is checked
   against what `status --json` reports after ingest.
2. `psirag-kb --config CFG -v ingest --json docs/` in a subprocess: wall time, peak RSS
   (`os.wait4`), the stage split if the report carries one, and the tree build time from the
   "built tree over N leaves in S s" log line.
3. `psirag-kb status --json` with no daemon, twice: wall time (open time), chunk count, tree, sizes.
4. `psirag-kb daemon --watch docs/` in a subprocess: time from launch until it prints its URL and
   until a hybrid query over the API is first answered (the daemon loads its question model
   meanwhile); then the wait until its start-up scan of docs/ is done (writer and watcher queues
   empty for 1 s).
5. Hybrid queries (k=5) over the API, one at a time, for `--queries` questions of the data sets:
   end-to-end latency; the same questions embedded here with the query model (one thread, as the
   daemon does), and the per-question difference.
6. New 10-chunk files in docs/, one at a time (`--adds`, 3): time from the end of each write
   until a hybrid query (its first chunk's code word and first 25 words, k=10) returns it,
   watcher's quiet period included; the first also pays for the daemon loading its model for
   files, so the table shows the median.
7. `rm -rf` of one 1,000-chunk folder: time until hybrid queries for three of its chunks return
   none of them, and until /api/status counts 1,000 chunks fewer.
8. Restores docs/ (the folder written again, the new files deleted) and waits until the daemon has
   caught up, so `--keep` reruns start from the same N; then stops the daemon. Its peak RSS is
   VmHWM from /proc (start-up included), beside the largest of the 0.5 s samples.
9. Hybrid query latency without the question's embedding: the knowledge base opened in this
   process, its `embed_query` replaced by a lookup of the vectors from step 5, `query()` timed.
10. Store sizes: `status --json`'s `stores`, and the allocated bytes of each entry of the data dir.

Prints progress on stderr, then a markdown table row per N and one JSON object on stdout (also
written to WORK/scale.json).
"""

from __future__ import annotations

import argparse
import bisect
import glob
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from latency import percentile, query, returns, wait_found  # noqa: E402
from load import authorize, get, post, rss_mb  # noqa: E402

from psirag_kb.config import Config, load_config  # noqa: E402
from psirag_kb.ingest.chunking import split_sentences, word_token_count  # noqa: E402
from psirag_kb.ingest.embedding import Embedder, for_queries, make_embedder  # noqa: E402

DEFAULT_DATA = "/work/shared/data/*/corpus.jsonl"
QUERY_K = 5
"""Results of the timed hybrid queries (the default k)."""
TREE_LOG = re.compile(
    r"built (?:the )?tree over (\d+) leaves in ([\d.]+) s(?: \((\w+) pairs\))?")
"""A tree build in the log: "built tree over N leaves in S s (MODE pairs)", or "rebuilt the
tree ..." for a rebuild in the background."""
CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"
SYLLABLES = [c + v for c in CONSONANTS for v in VOWELS]
CODE_SPACE = len(SYLLABLES) ** 4


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def codeword(index: int) -> str:
    """A made-up word, unique per index (four syllables and an x, scrambled so neighbours
    differ)."""
    value = (index * 1_000_003 + 12_345) % CODE_SPACE
    syllables = []
    for _ in range(4):
        value, digit = divmod(value, len(SYLLABLES))
        syllables.append(SYLLABLES[digit])
    return "".join(syllables) + "x"


def load_sentences(corpora: list[Path]) -> list[str]:
    """Distinct sentences of the corpora's passages that open with a capital and end a
    sentence."""
    sentences: dict[str, None] = {}
    for corpus in corpora:
        for line in corpus.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            text = str(json.loads(line).get("text", ""))
            for start, end in split_sentences(text):
                sentence = " ".join(text[start:end].split())
                if (len(sentence) >= 20 and sentence[0].isupper() and sentence[-1] in ".!?"
                        and not any(c in sentence for c in "#|\t")):
                    sentences[sentence] = None
    return list(sentences)


def token_counter(config: Config) -> tuple[Callable[[str], int], Embedder, str]:
    """The model's token counter (and the model), or the chunker's word estimate and a note
    when the model cannot count."""
    embedder = make_embedder(config.embedding)
    try:
        embedder.count_tokens("A test sentence.")
        return embedder.count_tokens, embedder, ""
    except Exception as exc:  # noqa: BLE001 - the benchmark goes on with an estimate
        note = (f"the model could not count tokens ({type(exc).__name__}: {exc}); sentences "
                "were counted with the chunker's word estimate, so chunks may not match")
        return word_token_count, embedder, note


class Generator:
    """Chunks of recombined corpus sentences, each a heading with a code word over a paragraph;
    a file's text depends only on the seed and its index, so any file can be written again."""

    def __init__(self, sentences: list[str], count: Callable[[str], int], chunk_tokens: int,
                 seed: int) -> None:
        heading = max(count(self.heading(i)) for i in range(0, 2_000_000, 997))
        self.high = chunk_tokens - heading - 2
        self.low = max(chunk_tokens // 2 + 1, self.high - 25)
        if self.low >= self.high:
            raise SystemExit(f"[ingest] chunk_tokens {chunk_tokens} is too small for this "
                             "benchmark's chunks")
        counted = sorted((count(s), s) for s in sentences)
        counted = [(n, s) for n, s in counted if n <= self.high]
        self.tokens = [n for n, _ in counted]
        self.sentences = [s for _, s in counted]
        self.seed = seed

    @staticmethod
    def heading(index: int) -> str:
        """The heading line of chunk `index`."""
        return f"## Note {codeword(index)}"

    def paragraph(self, rng: random.Random) -> tuple[str, int]:
        """Random sentences whose tokens add up to between `low` and `high`; the text and the
        token sum."""
        chosen, total = [], 0
        while total < self.low:
            fitting = bisect.bisect_right(self.tokens, self.high - total)
            pick = rng.randrange(fitting)
            chosen.append(self.sentences[pick])
            total += self.tokens[pick]
        return " ".join(chosen), total

    def file(self, key: str, first: int, chunks: int) -> tuple[str, list[str], list[int]]:
        """A markdown file of `chunks` chunks numbered from `first`: its text, a probe query per
        chunk (code word and first 25 words) and the paragraphs' token sums."""
        rng = random.Random(f"{self.seed}:{key}")
        parts, probes, sums = [], [], []
        for index in range(first, first + chunks):
            text, total = self.paragraph(rng)
            parts.append(f"{self.heading(index)}\n\n{text}\n")
            probes.append(f"{codeword(index)} " + " ".join(text.split()[:25]))
            sums.append(total)
        return "\n".join(parts), probes, sums


@dataclass
class Layout:
    """Where the N chunks go: files of `per_file` chunks in folders of `per_folder` files."""

    n: int
    per_file: int
    per_folder: int

    @property
    def files(self) -> int:
        """Number of files."""
        return math.ceil(self.n / self.per_file)

    def path(self, docs: Path, number: int) -> Path:
        """File `number`'s path."""
        return docs / f"part-{number // self.per_folder:04d}" / f"doc-{number:06d}.md"

    def chunks(self, number: int) -> int:
        """Chunks in file `number`."""
        return min(self.per_file, self.n - number * self.per_file)

    def folder_files(self, folder: int) -> range:
        """File numbers in folder `folder`."""
        return range(folder * self.per_folder, min(self.files, (folder + 1) * self.per_folder))


def write_docs(generator: Generator, layout: Layout, docs: Path,
               only: range | None = None) -> dict[str, Any]:
    """Write the layout's files (those missing, or all of `only`); a summary of what was
    written."""
    started = time.perf_counter()
    written, sums = 0, []
    for number in only if only is not None else range(layout.files):
        path = layout.path(docs, number)
        if only is None and path.exists():
            continue
        text, _, chunk_sums = generator.file(str(number), number * layout.per_file,
                                             layout.chunks(number))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written += 1
        sums.extend(chunk_sums)
    summary: dict[str, Any] = {"files_written": written, "write_s": round(
        time.perf_counter() - started, 2)}
    if sums:
        summary["paragraph_tokens"] = {"mean": round(statistics.fmean(sums), 1),
                                       "min": min(sums), "max": max(sums)}
    return summary


def cli_command() -> list[str]:
    """The `psirag-kb` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("psirag-kb")
    return [str(script)] if script.exists() else [sys.executable, "-m", "psirag_kb"]


@dataclass
class Run:
    """A finished CLI run."""

    stdout: str
    code: int
    wall_s: float
    peak_rss_mb: float
    stderr: Path

    def json(self) -> dict[str, Any]:
        """Its stdout as a JSON object (a RuntimeError naming the stderr tail when it failed)."""
        if self.code != 0:
            tail = self.stderr.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"exit status {self.code}; stderr ends:\n{tail}")
        return json.loads(self.stdout)


def run_cli(config: Path, args: list[str], stderr: Path) -> Run:
    """`psirag-kb --config CONFIG ARGS` to the end: stdout, exit status, wall time and the
    peak RSS of the process."""
    out = stderr.with_suffix(".out")
    with open(out, "wb") as stdout_file, open(stderr, "wb") as stderr_file:
        started = time.perf_counter()
        proc = subprocess.Popen([*cli_command(), "--config", str(config), *args],
                                stdout=stdout_file, stderr=stderr_file)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(out.read_text(errors="replace"), proc.returncode, wall,
               usage.ru_maxrss / 1024, stderr)


def stage_split(report: dict[str, Any]) -> dict[str, Any] | None:
    """Timings the ingest report carries: a nested timings dict, or top-level `*_s` keys."""
    for key in ("timings", "stages", "seconds", "times"):
        if isinstance(report.get(key), dict):
            return report[key]
    found = {k: v for k, v in report.items()
             if isinstance(v, int | float) and re.search(r"_(s|ms|seconds)$", k)}
    return found or None


def find(data: Any, names: tuple[str, ...]) -> Any:
    """The first value under one of `names` anywhere in nested dicts (None when absent)."""
    if isinstance(data, dict):
        for name in names:
            if name in data and not isinstance(data[name], dict):
                return data[name]
        for value in data.values():
            found = find(value, names)
            if found is not None:
                return found
    return None


def allocated(path: Path) -> int:
    """Bytes allocated on disk to a file or everything below a folder (as du counts)."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def summary_ms(seconds: list[float]) -> dict[str, Any]:
    """p50, p95 and max in milliseconds."""
    if not seconds:
        return {}
    return {"n": len(seconds), "p50_ms": round(1000 * statistics.median(seconds), 2),
            "p95_ms": round(1000 * percentile(seconds, 0.95), 2),
            "max_ms": round(1000 * max(seconds), 2)}


class Daemon:
    """`psirag-kb daemon` in its own process: its URL, memory samples and a clean stop."""

    def __init__(self, config: Path, docs: Path, folder: Path) -> None:
        self.out = folder / "daemon.stdout"
        self.err = folder / "daemon.stderr"
        self.launched = time.perf_counter()
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [*cli_command(), "--config", str(config), "daemon", "--watch", str(docs),
                 "--port", "0"], stdout=out, stderr=err)
        self.url = ""
        self.folder = folder
        self.samples: list[float] = []
        self._sampling = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        """Record the resident memory every 0.5 s until stopped."""
        while not self._sampling.wait(0.5):
            try:
                self.samples.append(rss_mb(self.proc.pid)[0])
            except (OSError, KeyError):
                return

    def _check_alive(self) -> None:
        """Raise with the tail of its stderr when the daemon has exited."""
        if self.proc.poll() is not None:
            tail = self.err.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the daemon exited with status {self.proc.returncode}; "
                               f"stderr ends:\n{tail}")

    def serve(self, question: str, timeout: float) -> dict[str, float]:
        """Wait until the daemon prints its URL and answers a hybrid query; seconds since
        launch."""
        deadline = self.launched + timeout
        while not self.url:
            self._check_alive()
            match = re.search(r"serving (\S+);", self.out.read_text(errors="replace"))
            if match:
                self.url = match.group(1)
                authorize(self.folder / "data")
                serving = time.perf_counter() - self.launched
            elif time.perf_counter() > deadline:
                raise TimeoutError(f"the daemon printed no URL in {timeout} s")
            else:
                time.sleep(0.05)
        while True:
            self._check_alive()
            try:
                code, body = post(self.url + "/api/query",
                                  {"text": question, "mode": "hybrid", "k": QUERY_K})
            except (OSError, ValueError):  # refused or reset while it starts
                code, body = 0, None
            if code == 200 and isinstance(body, dict) and body.get("results"):
                break
            if time.perf_counter() > deadline:
                raise TimeoutError(f"no hybrid query answered in {timeout} s: {code} {body}")
            time.sleep(0.05)
        first = time.perf_counter() - self.launched
        return {"serving_s": round(serving, 3), "first_query_s": round(first, 3),
                "first_query_degraded": body.get("degraded")}

    def wait_tree(self, timeout: float) -> float | None:
        """Seconds from launch until status shows the tree "ok" (None when it was at once)."""
        started = time.perf_counter()
        if self.status()["tree"].get("state", "ok") == "ok":
            return None
        while self.status()["tree"].get("state", "ok") != "ok":
            self._check_alive()
            if time.perf_counter() - started > timeout:
                raise TimeoutError(f"the tree was not ready after {timeout} s")
            time.sleep(0.25)
        return round(time.perf_counter() - self.launched, 2)

    def status(self) -> dict[str, Any]:
        """GET /api/status."""
        return get(self.url + "/api/status")

    def wait_idle(self, timeout: float, quiet: float = 1.0) -> float:
        """Wait until the writer and the watcher have had nothing to do for `quiet` seconds;
        the seconds waited."""
        started = time.perf_counter()
        idle_since = None
        while True:
            self._check_alive()
            status = self.status()
            busy = (status["writer"]["queued"] or status["writer"]["running"]
                    or status.get("daemon", {}).get("queue"))
            now = time.perf_counter()
            if busy:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= quiet:
                return round(idle_since - started, 2)
            if now - started > timeout:
                queue = status.get("daemon", {}).get("queue")
                raise TimeoutError(f"the daemon was still busy after {timeout} s: "
                                   f"{status['writer']}, queue {queue}")
            time.sleep(0.25)

    def peak_mb(self) -> dict[str, float]:
        """VmHWM (the process's peak resident memory) and the largest sample, in MB."""
        current, peak = rss_mb(self.proc.pid)
        return {"vmhwm_mb": round(peak), "max_sampled_mb": round(max(self.samples or [current])),
                "now_mb": round(current)}

    def stop(self) -> None:
        """SIGTERM, then wait for the exit (SIGKILL after 120 s)."""
        self._sampling.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def load_questions(corpora: list[Path], count: int, fallback: list[str],
                   seed: int) -> list[str]:
    """Up to `count` questions of the data sets (questions.jsonl beside each corpus), else
    sentences."""
    questions: list[str] = []
    for corpus in corpora:
        path = corpus.with_name("questions.jsonl")
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    questions.append(str(json.loads(line)["question"]).strip())
    questions = list(dict.fromkeys(q for q in questions if q)) or fallback
    return random.Random(seed).sample(questions, min(count, len(questions)))


def inprocess_queries(config: Config, embedder: Embedder, questions: list[str],
                      vectors: dict[str, Any]) -> dict[str, Any]:
    """Hybrid `query()` in this process with the question vectors looked up, not embedded."""
    from psirag_kb.kb import KnowledgeBase

    started = time.perf_counter()
    kb = KnowledgeBase(config, embedder=embedder)
    open_s = time.perf_counter() - started
    try:
        if not callable(getattr(kb, "embed_query", None)):
            raise AttributeError("KnowledgeBase has no embed_query to stand in for")
        kb.engine.embed_query = vectors.__getitem__  # type: ignore[method-assign]
        for text in questions[:5]:
            kb.query(text, mode="hybrid", k=QUERY_K)
        seconds = []
        for text in questions:
            began = time.perf_counter()
            kb.query(text, mode="hybrid", k=QUERY_K)
            seconds.append(time.perf_counter() - began)
    finally:
        kb.close()
    return {"open_s": round(open_s, 2), **summary_ms(seconds)}


def wait_deleted(daemon: Daemon, probes: dict[Path, str], chunks_after: int,
                 timeout: float) -> dict[str, float]:
    """Poll until no probe's hybrid query returns its file and status counts `chunks_after`
    chunks or fewer; the seconds until each held."""
    started = time.perf_counter()
    gone = dropped = None
    while gone is None or dropped is None:
        now = time.perf_counter() - started
        if gone is None and not any(returns(daemon.url, text, path)
                                    for path, text in probes.items()):
            gone = time.perf_counter() - started
        if dropped is None and daemon.status()["chunks"] <= chunks_after:
            dropped = time.perf_counter() - started
        if now > timeout:
            raise TimeoutError(f"delete not seen after {timeout} s (queries: {gone}, "
                               f"count: {dropped})")
        time.sleep(0.05)
    return {"not_returned_s": round(gone, 3), "count_dropped_s": round(dropped, 3),
            "both_s": round(max(gone, dropped), 3)}


@dataclass
class Bench:
    """One N's folder, config, layout and results."""

    n: int
    folder: Path
    config_path: Path
    config: Config
    layout: Layout
    generator: Generator
    result: dict[str, Any]

    @property
    def docs(self) -> Path:
        """The generated folder."""
        return self.folder / "docs"

    @property
    def data(self) -> Path:
        """The data directory."""
        return self.folder / "data"

    def note(self, text: str) -> None:
        """A note printed under the table."""
        self.result["notes"].append(text)


def prepare(n: int, args: argparse.Namespace, generator: Generator) -> tuple[Bench, dict]:
    """The folder of one N with its config and generated docs; the saved state of an earlier
    run when `--keep` reuses it."""
    folder = args.work / f"n{n}"
    layout = Layout(n, args.chunks_per_file, args.files_per_folder)
    key = {"n": n, "seed": args.seed, "per_file": layout.per_file,
           "per_folder": layout.per_folder, "model": str(args.model or "")}
    state: dict[str, Any] = {}
    state_path = folder / "state.json"
    if args.keep and state_path.exists():
        state = json.loads(state_path.read_text())
        if state.get("key") != key:
            log(f"N={n}: {state_path} is for {state.get('key')}; starting again")
            state = {}
    if not state and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state["key"] = key
    lines = ["[storage]", 'data_dir = "data"', "", "[watch]", f"quiet_period_s = {args.quiet}"]
    if args.model:
        lines[3:3] = ["[embedding]", f"model = {json.dumps(str(args.model))}", ""]
    config_path = folder / "config.toml"
    config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bench = Bench(n, folder, config_path, load_config(config_path), layout, generator,
                  {"n": n, "folder": str(folder), "errors": {}, "notes": []})
    written = write_docs(generator, layout, bench.docs)
    for stray in bench.docs.glob("added-*.md"):  # left by an interrupted run
        stray.unlink()
    state.setdefault("generated", written)
    bench.result["generated"] = {
        "chunks": n, "files": layout.files, "folders": math.ceil(layout.files / layout.per_folder),
        "sentences": len(generator.sentences), "paragraph_tokens_range": [generator.low,
                                                                          generator.high],
        **state["generated"]}
    if written["files_written"] and state.get("ingest"):
        bench.note(f"--keep: {written['files_written']} missing files were written again; the "
                   "daemon's start-up scan indexed them")
    log(f"N={n}: docs ready ({written['files_written']} files written)")
    return bench, state


def tree_lines(text: str) -> list[dict[str, Any]]:
    """The tree builds a log reports: leaves, seconds and pair mode (None when not said)."""
    return [{"leaves": int(leaves), "seconds": float(seconds), "mode": mode or None}
            for leaves, seconds, mode in TREE_LOG.findall(text)]


def ingest(bench: Bench, state: dict[str, Any]) -> bool:
    """`psirag-kb ingest` of the docs (unless `--keep` found one); whether it succeeded."""
    state_path = bench.folder / "state.json"
    reused = bool(state.get("ingest"))
    if not reused:
        if bench.data.exists():
            shutil.rmtree(bench.data)
        log(f"N={bench.n}: ingest")
        run = run_cli(bench.config_path, ["-v", "ingest", "--json", str(bench.docs)],
                      bench.folder / "ingest.log")
        result: dict[str, Any] = {"wall_s": round(run.wall_s, 2),
                                  "peak_rss_mb": round(run.peak_rss_mb)}
        try:
            report = run.json()
        except (RuntimeError, ValueError) as exc:
            bench.result["errors"]["ingest"] = str(exc)
            bench.result["ingest"] = result
            state_path.write_text(json.dumps({k: v for k, v in state.items() if k != "ingest"}))
            return False
        result["report"] = {k: v for k, v in report.items() if k != "problems"}
        result["problems"] = report.get("problems", [])[:5]
        result["stages"] = stage_split(report)
        result["tree_log"] = tree_lines(run.stderr.read_text(errors="replace"))
        state["ingest"] = result
        state_path.write_text(json.dumps(state))
    else:
        log(f"N={bench.n}: --keep: the ingest of {state_path} is reused")
    bench.result["ingest"] = dict(state["ingest"], reused=reused)
    if not bench.result["ingest"]["stages"]:
        bench.note("ingest --json reports no per-stage timings (only counts)")
    log(f"N={bench.n}: ingest {bench.result['ingest']['wall_s']} s, "
        f"peak RSS {bench.result['ingest']['peak_rss_mb']} MB")
    return True


def open_status(bench: Bench) -> dict[str, Any]:
    """`psirag-kb status --json` with no daemon, twice; the first one's status object."""
    try:
        runs = [run_cli(bench.config_path, ["status", "--json"], bench.folder / f"status{i}.log")
                for i in (1, 2)]
        status = runs[0].json()
    except (RuntimeError, ValueError) as exc:
        bench.result["errors"]["status"] = str(exc)
        return {}
    bench.result["status"] = {
        "wall_s": round(runs[0].wall_s, 3), "again_wall_s": round(runs[1].wall_s, 3),
        "peak_rss_mb": round(runs[0].peak_rss_mb), "chunks": status.get("chunks"),
        "model": status.get("model"), "tree": status.get("tree"),
        "stores": status.get("stores")}
    log(f"N={bench.n}: status {runs[0].wall_s:.2f} s; generated {bench.n} chunks, status "
        f"reports {status.get('chunks')}")
    if status.get("chunks") != bench.n:
        bench.note(f"generated {bench.n} chunks but status reports {status.get('chunks')}")
    return status


def tree_figures(bench: Bench, status: dict[str, Any]) -> None:
    """Tree build time and pair mode, from the ingest report, status or the ingest log."""
    ingest_result = bench.result.get("ingest", {})
    built = [t for t in ingest_result.get("tree_log") or [] if t["leaves"] >= bench.n // 2]
    report, tree = ingest_result.get("report", {}), status.get("tree")
    bench.result["tree"] = {
        "build_s": (find(report, ("tree_build_s", "tree_s")) or find(tree, ("build_s",))
                    or (built[-1]["seconds"] if built else None)),
        "mode": (find(report, ("tree_mode", "pair_mode"))
                 or find(tree, ("mode", "pair_mode", "build_mode"))
                 or (built[-1].get("mode") if built else None)),
        "pair_mode_configured": bench.config.tree.pair_mode,
        "state_after_ingest": find(tree, ("state",)),
    }
    if bench.result["tree"]["build_s"] is None:
        bench.note("no tree build time: in neither the ingest report, status nor the ingest "
                   "log")
    if bench.result["tree"]["mode"] is None:
        bench.note("the pair mode the tree was built with is in neither the ingest report, "
                   "status nor the ingest log; only the configured one "
                   f"({bench.config.tree.pair_mode}) is known")


def query_latency(bench: Bench, daemon: Daemon, questions: list[str],
                  query_embedder: Embedder | None) -> dict[str, Any]:
    """Hybrid queries over the API, then the same questions embedded here; their vectors."""
    for text in questions[:5]:
        query(daemon.url, text, k=QUERY_K)
    api = []
    for text in questions:
        began = time.perf_counter()
        query(daemon.url, text, k=QUERY_K)
        api.append(time.perf_counter() - began)
    bench.result["query_api"] = summary_ms(api)
    log(f"N={bench.n}: hybrid over the API p50 {bench.result['query_api']['p50_ms']} ms")
    vectors: dict[str, Any] = {}
    if query_embedder is None:
        return vectors
    query_embedder.embed(questions[:5])
    embed = []
    for text in questions:
        began = time.perf_counter()
        vectors[text] = query_embedder.embed([text])[0]
        embed.append(time.perf_counter() - began)
    bench.result["query_embed"] = summary_ms(embed)
    bench.result["query_api_minus_embed"] = summary_ms(
        [max(0.0, a - e) for a, e in zip(api, embed, strict=True)])
    return vectors


def add_files(bench: Bench, daemon: Daemon, count: int, timeout: float,
              quiet: float) -> list[Path]:
    """New 10-chunk files, one after the other: seconds from each write until a hybrid query
    returns it (the first also pays for loading the daemon's model for files)."""
    added, seconds = [], []
    for number in range(count):
        path = bench.docs / f"added-{number}.md"
        text, probes, _ = bench.generator.file(f"added-{number}", bench.n + 10 * number, 10)
        before = daemon.status()["chunks"]
        path.write_text(text, encoding="utf-8")
        written_at = time.perf_counter()
        added.append(path)
        seconds.append(wait_found(daemon.url, probes[0], path, timeout=timeout) - written_at)
        daemon.wait_idle(timeout)
        if daemon.status()["chunks"] - before != 10:
            bench.note(f"{path.name}: status counted {daemon.status()['chunks'] - before} "
                       "chunks more, not 10")
    bench.result["add"] = {"chunks": 10, "files": count,
                           "queryable_s": [round(s, 3) for s in seconds],
                           "median_s": round(statistics.median(seconds), 3),
                           "median_beyond_quiet_s": round(statistics.median(seconds) - quiet, 3)}
    log(f"N={bench.n}: added files were returned after {bench.result['add']['queryable_s']} s")
    return added


def delete_folder(bench: Bench, daemon: Daemon, timeout: float) -> tuple[range, int]:
    """`rm -rf` of a 1,000-chunk folder: seconds until queries and status no longer show it;
    its file numbers and the chunk count before."""
    layout = bench.layout
    target = layout.folder_files((layout.files // layout.per_folder) // 2)
    chunks = sum(layout.chunks(f) for f in target)
    probes: dict[Path, str] = {}
    for number in (target[0], target[len(target) // 2], target[-1]):
        _, file_probes, _ = bench.generator.file(str(number), number * layout.per_file,
                                                 layout.chunks(number))
        probes[layout.path(bench.docs, number)] = file_probes[len(file_probes) // 2]
    result: dict[str, Any] = {"chunks": chunks, "files": len(target), "probes_returned_before":
                              sum(returns(daemon.url, t, p) for p, t in probes.items())}
    before = daemon.status()["chunks"]
    began = time.perf_counter()
    shutil.rmtree(layout.path(bench.docs, target[0]).parent)
    result["rm_s"] = round(time.perf_counter() - began, 3)
    result |= wait_deleted(daemon, probes, before - chunks, timeout)
    bench.result["delete"] = result
    log(f"N={bench.n}: the deleted folder was gone after {result['both_s']} s")
    return target, before


def restore(bench: Bench, daemon: Daemon, added: list[Path], target: range, expected: int,
            timeout: float) -> None:
    """Put the docs back as generated and wait until the daemon counts `expected` chunks."""
    began = time.perf_counter()
    for path in added:
        path.unlink()
    write_docs(bench.generator, bench.layout, bench.docs, only=target)
    while daemon.status()["chunks"] != expected:
        if time.perf_counter() - began > timeout:
            raise TimeoutError(f"restore: {daemon.status()['chunks']} chunks, not {expected}, "
                               f"after {timeout} s")
        time.sleep(0.25)
    daemon.wait_idle(timeout)
    bench.result["restore_s"] = round(time.perf_counter() - began, 2)


def with_daemon(bench: Bench, args: argparse.Namespace, questions: list[str],
                query_embedder: Embedder | None) -> dict[str, Any]:
    """Start-up, query latency, add and delete through a running daemon; the question
    vectors."""
    daemon = None
    vectors: dict[str, Any] = {}
    try:
        log(f"N={bench.n}: daemon")
        daemon = Daemon(bench.config_path, bench.docs, bench.folder)
        bench.result["daemon"] = figures = daemon.serve(questions[0], args.timeout)
        log(f"N={bench.n}: the daemon answered after {figures['first_query_s']} s")
        figures["tree_ready_s"] = daemon.wait_tree(args.timeout)
        figures["startup_scan_s"] = daemon.wait_idle(args.timeout)
        vectors = query_latency(bench, daemon, questions, query_embedder)
        added = add_files(bench, daemon, args.adds, args.timeout, args.quiet)
        target, before = delete_folder(bench, daemon, args.timeout)
        restore(bench, daemon, added, target, before - 10 * len(added), args.timeout)
        figures |= daemon.peak_mb()
    except Exception as exc:  # noqa: BLE001 - recorded; the next N still runs
        bench.result["errors"]["daemon"] = "".join(traceback.format_exception(exc))[-4000:]
        log(f"N={bench.n}: the daemon stage failed: {exc}")
        if daemon is not None and daemon.proc.poll() is None:
            bench.result.setdefault("daemon", {}).update(daemon.peak_mb())
    finally:
        if daemon is not None:
            daemon.stop()
    log_file = bench.data / "daemon.log"
    if log_file.exists():
        bench.result.setdefault("daemon", {})["tree_log"] = tree_lines(
            log_file.read_text(errors="replace"))
    return vectors


def measure(n: int, args: argparse.Namespace, generator: Generator, questions: list[str],
            embedder: Embedder | None) -> dict[str, Any]:
    """Every stage for one N; a failed stage is recorded in `errors` and the others go on."""
    bench, state = prepare(n, args, generator)
    if not ingest(bench, state):
        return bench.result
    status = open_status(bench)
    tree_figures(bench, status)
    query_embedder = for_queries(embedder) if embedder is not None else None
    vectors = with_daemon(bench, args, questions, query_embedder)
    if vectors and embedder is not None:
        try:
            log(f"N={n}: hybrid queries in-process without the embedding")
            bench.result["query_inprocess"] = inprocess_queries(bench.config, embedder,
                                                                questions, vectors)
        except Exception as exc:  # noqa: BLE001 - the API figures stand
            bench.result["errors"]["query_inprocess"] = "".join(
                traceback.format_exception(exc))[-4000:]
    bench.result["disk"] = {e.name: allocated(e) for e in sorted(bench.data.iterdir())}
    bench.result["disk"]["total"] = sum(bench.result["disk"].values())
    return bench.result


def fmt(value: Any, scale: float = 1.0, digits: int = 1) -> str:
    """A number for the table, or n/a."""
    if value is None:
        return "n/a"
    if isinstance(value, int | float):
        return f"{value * scale:,.{digits}f}"
    return str(value)


def table(results: list[dict[str, Any]]) -> str:
    """One markdown row per N."""
    rows = ["| N | chunks gen / status | ingest s | ingest stages | ingest peak RSS MB | tree "
            "build s (mode) | status s | daemon first query s | daemon peak RSS MB | hybrid "
            "p50 / p95 ms, no embedding | API hybrid p50 / p95 ms | add 10 chunks s (median) | "
            "delete 1,000 chunks s | disk MB: duckdb / bm25 / dense / total |",
            "|" + " --- |" * 14]
    for r in results:
        ingest, tree = r.get("ingest", {}), r.get("tree", {})
        status, daemon = r.get("status", {}), r.get("daemon", {})
        inproc = r.get("query_inprocess") or r.get("query_api_minus_embed") or {}
        api, disk = r.get("query_api", {}), r.get("disk", {})
        stages = ingest.get("stages")
        stage_text = ", ".join(f"{k} {fmt(v)}" for k, v in stages.items()) if stages else "n/a"
        stores = status.get("stores") or {}
        mb = 1 / 2**20
        rows.append(
            f"| {r['n']:,} | {r['n']:,} / {fmt(status.get('chunks'), digits=0)} "
            f"| {fmt(ingest.get('wall_s'))}{' (kept)' if ingest.get('reused') else ''} "
            f"| {stage_text} "
            f"| {fmt(ingest.get('peak_rss_mb'), digits=0)} "
            f"| {fmt(tree.get('build_s'), digits=2)} ({tree.get('mode') or 'n/a'}) "
            f"| {fmt(status.get('wall_s'), digits=2)} "
            f"| {fmt(daemon.get('first_query_s'), digits=2)} "
            f"| {fmt(daemon.get('vmhwm_mb'), digits=0)} "
            f"| {fmt(inproc.get('p50_ms'))} / {fmt(inproc.get('p95_ms'))} "
            f"| {fmt(api.get('p50_ms'))} / {fmt(api.get('p95_ms'))} "
            f"| {fmt(r.get('add', {}).get('median_s'), digits=2)} "
            f"| {fmt(r.get('delete', {}).get('both_s'), digits=2)} "
            f"| {fmt(stores.get('duckdb_bytes'), mb)} / {fmt(stores.get('bm25_bytes'), mb)} "
            f"/ {fmt(stores.get('dense_bytes'), mb)} / {fmt(disk.get('total'), mb)} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000], help="chunk counts")
    parser.add_argument("--data", nargs="+", default=sorted(glob.glob(DEFAULT_DATA)),
                        help="JSONL corpora whose sentences are recombined")
    parser.add_argument("--model", type=Path, help="[embedding] model (default: the config's)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/psirag-scale"),
                        help="a folder per N is made here (the generated docs and data dir)")
    parser.add_argument("--keep", action="store_true",
                        help="reuse a generated folder and its ingest from an earlier run")
    parser.add_argument("--queries", type=int, default=100, help="timed hybrid queries")
    parser.add_argument("--adds", type=int, default=3, help="10-chunk files added, one by one")
    parser.add_argument("--quiet", type=float, default=1.0, help="watcher quiet period (s)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="longest wait for any daemon step (s)")
    parser.add_argument("--chunks-per-file", type=int, default=50)
    parser.add_argument("--files-per-folder", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.data:
        raise SystemExit(f"no corpora: give --data (default {DEFAULT_DATA} matched nothing)")
    corpora = [Path(p) for p in args.data]
    if args.model:
        args.model = args.model.expanduser().resolve()
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)

    config = Config()
    if args.model:
        config = config.replace("embedding", model=str(args.model))
    count, embedder, note = token_counter(config)
    sentences = load_sentences(corpora)
    generator = Generator(sentences, count, config.ingest.chunk_tokens, args.seed)
    questions = load_questions(corpora, args.queries, sentences, args.seed)
    log(f"{len(sentences)} sentences from {len(corpora)} corpora ({len(generator.sentences)} "
        f"short enough), paragraphs of {generator.low}-{generator.high} tokens, "
        f"{len(questions)} questions")
    results = []
    for n in args.n:
        results.append(measure(n, args, generator, questions, embedder))
        if note:
            results[-1]["notes"].append(note)
        (args.work / "scale.json").write_text(json.dumps(results, indent=2))
    print(table(results))
    print()
    for r in results:
        for note in r["notes"]:
            print(f"- N={r['n']:,}: {note}")
        for stage, error in r["errors"].items():
            print(f"- N={r['n']:,}: {stage} failed: {error.strip().splitlines()[-1]}")
    print("- hybrid p50/p95 without embedding: `query()` in-process with the question vectors "
          "looked up (else the API latency minus the question's embedding, per question); "
          "API figures include HTTP and the embedding")
    print(json.dumps({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}",
        "model": str(args.model) if args.model else "(config default)",
        "corpora": [str(c) for c in corpora], "questions": len(questions),
        "results": results,
    }, indent=2))


if __name__ == "__main__":
    main()

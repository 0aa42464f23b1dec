"""Chinese, Japanese and Korean known items: does a phrase taken from a
document find that document first, by BM25 and in the default mode, under each tokenisation of
CJK runs?

    python benchmarks/cjk.py --work /tmp/cjk-bench

The corpus is built in `--work/files` from this machine's own CJK text: the Vim tutors
(`--tutors`, default /usr/share/vim/vim90/tutor: ja, ko, zh_cn, zh_tw in UTF-8), one file per
lesson (cut at the tutor's `~~~~` separators), and `--man-pages` (default 12, a seeded sample
of those under 6 kB compressed) manual pages of each of /usr/share/man/{ja,ko,zh_CN,zh_TW}
(`--man`; gunzipped, roff request lines dropped, escapes removed: a crude reading for a
benchmark corpus). For each file, with a generator seeded by its name, up to `--per-file`
phrases are picked: a run of 4 to 12 CJK, kana or hangul characters (possibly crossing a space
in Korean) from a random line. A phrase that occurs in another file (whitespace ignored) is
dropped: each one names one document.

The folder is indexed once with the default config (MiniLM); then BM25 is rebuilt from DuckDB
under each `--variants` tokenisation of CJK runs (the rest of the text keeps English stemming):
`before` (the previous release: a run between spaces or punctuation is one token), `unigram`
(one token per character), `bigram` (overlapping pairs: this release), `trigram` (overlapping
triples, runs shorter than three kept whole). Every phrase is asked in `sparse` and the default
mode (`auto`), unquoted, k = 5; `dense` (no BM25) once. Prints one JSON line per (variant,
mode) with how often the right file is first and in the top 5, per language.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psirag_kb.storage.sparse as sparse_module  # noqa: E402
from psirag_kb.config import Config  # noqa: E402
from psirag_kb.kb import KnowledgeBase  # noqa: E402
from psirag_kb.storage.scripts import _RUN, bigrams  # noqa: E402

TUTORS = {"ja": "tutor.ja.utf-8", "ko": "tutor.ko.utf-8", "zh_cn": "tutor.zh_cn.utf-8",
          "zh_tw": "tutor.zh_tw.utf-8"}
MAN = {"ja": "ja", "ko": "ko", "zh_cn": "zh_CN", "zh_tw": "zh_TW"}


def ngrams(n: int):
    """A segmenter of CJK runs into overlapping n-grams (runs shorter than n kept whole)."""
    def cut(run: str) -> str:
        if len(run) <= n:
            return run
        return " ".join(run[i:i + n] for i in range(len(run) - n + 1))

    def segment(text: str) -> str:
        if text.isascii():
            return text
        return _RUN.sub(lambda m: f" {cut(m.group(0))} ", text)
    return segment


VARIANTS = {
    "before": lambda text: text,
    "unigram": lambda text: text if text.isascii() else _RUN.sub(
        lambda m: " " + " ".join(m.group(0)) + " ", text),
    "bigram": lambda text: text if text.isascii() else _RUN.sub(
        lambda m: f" {bigrams(m.group(0))} ", text),
    "trigram": ngrams(3),
}

_ROFF_ESCAPE = re.compile(r"\\(f[BIRP0-9]|\(..|s[-+]?\d|[-&e|^ ])")


def build_corpus(files: Path, tutors: Path, man: Path, man_pages: int) -> dict[str, str]:
    """Write the lesson and manual-page files; returns file name -> language."""
    files.mkdir(parents=True, exist_ok=True)
    language: dict[str, str] = {}
    for lang, name in TUTORS.items():
        source = tutors / name
        if not source.exists():
            continue
        parts = re.split(r"^~{10,}\s*$", source.read_text("utf-8"), flags=re.M)
        for number, part in enumerate(p for p in parts if _RUN.search(p)):
            target = f"vimtutor-{lang}-{number:02d}.txt"
            (files / target).write_text(part.strip() + "\n", "utf-8")
            language[target] = lang
    for lang, folder in MAN.items():
        pages = sorted(p for p in (man / folder).rglob("*.gz") if p.stat().st_size < 6000)
        for page in random.Random(lang).sample(pages, min(man_pages, len(pages))):
            try:
                roff = gzip.decompress(page.read_bytes()).decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            lines = [_ROFF_ESCAPE.sub("", line) for line in roff.splitlines()
                     if not line.startswith((".", "'"))]
            target = f"man-{lang}-{page.parent.name}-{page.name[:-3]}.txt"
            (files / target).write_text("\n".join(lines) + "\n", "utf-8")
            language[target] = lang
    return language


def pick_queries(files: Path, language: dict[str, str], per_file: int) -> list[dict]:
    """Phrases each held by one file only (whitespace ignored)."""
    texts = {name: (files / name).read_text("utf-8") for name in language}
    squashed = {name: re.sub(r"\s+", "", text) for name, text in texts.items()}
    queries = []
    for name, text in sorted(texts.items()):
        rng = random.Random(name)
        runs = [m.group(0) for line in text.splitlines()
                for m in re.finditer(r"(?:[^\W\d_A-Za-z]+ ?)+", line)
                if _RUN.search(m.group(0)) and len(m.group(0).strip()) >= 4]
        rng.shuffle(runs)
        taken = 0
        for run in runs:
            run = run.strip()
            size = rng.randint(4, 12)
            start = rng.randrange(max(1, len(run) - size + 1))
            phrase = run[start:start + size].strip()
            key = re.sub(r"\s+", "", phrase)
            if len(key) < 4 or not _RUN.search(phrase):
                continue
            if sum(key in other for other in squashed.values()) != 1:
                continue
            queries.append({"file": name, "lang": language[name], "text": phrase})
            taken += 1
            if taken == per_file:
                break
    return queries


def measure(kb: KnowledgeBase, queries: list[dict], mode: str) -> dict:
    """How often the query's file is first and in the top 5, overall and per language."""
    first, top5 = defaultdict(int), defaultdict(int)
    asked = defaultdict(int)
    started = time.perf_counter()
    for query in queries:
        results = kb.query(query["text"], mode=mode, k=5)["results"]
        names = list(dict.fromkeys(Path(r["source"]).name for r in results))
        for key in ("all", query["lang"]):
            asked[key] += 1
            first[key] += bool(names) and names[0] == query["file"]
            top5[key] += query["file"] in names
    return {"seconds": round(time.perf_counter() - started, 1),
            **{key: {"n": asked[key], "first": round(first[key] / asked[key], 3),
                     "top5": round(top5[key] / asked[key], 3)} for key in sorted(asked)}}


def main() -> None:
    """Build the corpus, index it, and measure every variant."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--tutors", type=Path, default=Path("/usr/share/vim/vim90/tutor"))
    parser.add_argument("--man", type=Path, default=Path("/usr/share/man"))
    parser.add_argument("--man-pages", type=int, default=12,
                        help="manual pages per language (a seeded sample; 0: none)")
    parser.add_argument("--per-file", type=int, default=2)
    parser.add_argument("--variants", default="before,unigram,bigram,trigram")
    parser.add_argument("--modes", default="sparse,auto")
    args = parser.parse_args()
    files = args.work / "files"
    if files.exists():
        shutil.rmtree(files)
    language = build_corpus(files, args.tutors, args.man, args.man_pages)
    queries = pick_queries(files, language, args.per_file)
    print(json.dumps({"files": len(language), "queries": len(queries),
                      "per_language": {lang: sum(q["lang"] == lang for q in queries)
                                       for lang in sorted(set(language.values()))}}))
    config = Config().with_data_dir(args.work / "data")
    started = time.perf_counter()
    with KnowledgeBase(config) as kb:
        kb.ingest([files])
        print(json.dumps({"ingest_s": round(time.perf_counter() - started, 1),
                          "chunks": kb.stores.store.chunk_count()}))
        print(json.dumps({"variant": "-", "mode": "dense", **measure(kb, queries, "dense")}))
    for variant in args.variants.split(","):
        sparse_module.segment = VARIANTS[variant]
        sparse_module.ANALYZER = f"benchmark-{variant}"  # a mismatch: BM25 is rebuilt at open
        with KnowledgeBase(config) as kb:
            for mode in args.modes.split(","):
                print(json.dumps({"variant": variant, "mode": mode,
                                  **measure(kb, queries, mode)}), flush=True)


if __name__ == "__main__":
    main()

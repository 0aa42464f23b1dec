"""Known-item search: does a pasted sentence, identifier, error line or number find
its own file first, per mode and per fusion setting?

    python benchmarks/known_item.py --work /tmp/known-item                # builds the folder
    python benchmarks/known_item.py --work /tmp/known-item --folder DIR   # any folder of text

Without `--folder`, `--files` text files of this machine are copied into `--work/files` once (a
later run reuses the folder as it is: the choice depends on the packages installed): seeded,
duplicates by content dropped, 1-30 KB each, from the METADATA and LICENSE files of the
installed Python packages (`--site-packages`, default: this interpreter's), /usr/share/doc/*/
copyright and /usr/share/common-licenses. For each file, with a generator seeded by its name,
up to one query of each kind is picked from its text:

- `sentence`: a sentence of 8-40 words from the middle 60 % of the file (line breaks as spaces);
- `identifier`: a token like `PyMem_RawMalloc`, `CVE-2024-3094`, `python-dateutil`, `setUpClass`;
- `error`: a short line that mentions an error, warning, exception or failure;
- `number`: a version, date or other number of at least four digits.

A query whose words occur in the same order in another file (case, spacing and punctuation
ignored, so stricter than "verbatim") is dropped. The folder is indexed once with the default
config (`--work/data`, reused by a second run), then every query is asked in each mode (k = 5,
results merged as a user gets them) under each `--variants` setting (sparse and dense, which
fuse nothing, once): `rrf` is plain reciprocal rank fusion (the earlier fusion), the others name
the signals of `[retrieval] certain_first` joined by `+` (`phrase#N`: a phrase may be held by up
to N chunks; `margin@R`: certain_margin R). Prints one JSON line per (variant, mode), then a
table: how often the right file is first, per kind.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase

sys.path.insert(0, str(Path(__file__).parent))
from fusion_dev import settings  # noqa: E402  (the same fusion variants)

MODES = ("sparse", "dense", "hybrid", "auto", "tree")
PURE = ("sparse", "dense")
KINDS = ("sentence", "identifier", "error", "number")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
_IDENTIFIER = re.compile(
    r"(?<![\w.-])(?:[A-Za-z][A-Za-z0-9]*(?:[_.:-][A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]+|"
    r"[A-Z][a-z]+[A-Z][A-Za-z0-9]+)(?![\w-])")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,:/-]\d+)+(?![\w])|(?<![\w.])\d{4,}(?![\w.])")
_ERRORISH = re.compile(r"\b(?:error|warning|exception|fail\w*|raise[sd]?|invalid)\b", re.I)


def normal(text: str) -> str:
    """Lower case, single spaces: the form duplicate files are compared in."""
    return " ".join(text.lower().split())


def words(text: str) -> str:
    """Lower-case words and numbers between spaces (and a space either end): the form the
    uniqueness check compares, as BM25 sees text (punctuation and spacing ignored)."""
    return " " + " ".join(re.findall(r"[^\W_]+", text.lower())) + " "


def candidates(site_packages: Path) -> list[Path]:
    """Text files of this machine a person might have in a folder of documents."""
    found = sorted(site_packages.glob("*.dist-info/METADATA"))
    found += sorted(site_packages.glob("*.dist-info/LICEN[CS]E*"))
    found += sorted(site_packages.glob("*.dist-info/licenses/**/*"))
    found += sorted(Path("/usr/share/doc").glob("*/copyright"))
    found += sorted(Path("/usr/share/common-licenses").glob("*"))
    return [p for p in found if p.is_file()]


def build_folder(out: Path, site_packages: Path, count: int, seed: int) -> None:
    """Copy `count` distinct 1-30 KB text files into `out`, named after their origin."""
    chosen: dict[str, tuple[Path, str]] = {}
    for path in candidates(site_packages):
        try:
            data = path.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not 1000 <= len(data) <= 30_000:
            continue
        digest = hashlib.sha1(normal(text).encode()).hexdigest()
        parts = [p for p in path.parts[-3:] if p not in ("licenses", "doc")]
        name = re.sub(r"[^\w.-]+", "_", "-".join(parts)) + ".txt"
        chosen.setdefault(digest, (path, name))
    files = sorted(chosen.values(), key=lambda item: item[1])
    random.Random(seed).shuffle(files)
    out.mkdir(parents=True, exist_ok=True)
    for path, name in sorted(files[:count], key=lambda item: item[1]):
        target = out / name
        if not target.exists():
            shutil.copyfile(path, target)


def pick(path: Path, text: str, seed: int) -> dict[str, str]:
    """At most one query of each kind from a file's text (seeded by the file's name)."""
    rng = random.Random(f"{seed}:{path.name}")
    queries: dict[str, str] = {}
    flat = " ".join(text.split())
    sentences = _sentences(flat)
    middle = [s for start, s in sentences
              if 0.2 * len(flat) <= start <= 0.8 * len(flat) and 8 <= len(s.split()) <= 40]
    if middle:
        queries["sentence"] = rng.choice(middle)
    identifiers = sorted({m.group(0).strip(".:-") for m in _IDENTIFIER.finditer(text)})
    identifiers = [i for i in identifiers if len(i) >= 6 and not i.replace(".", "").isdigit()
                   and "://" not in i]
    if identifiers:
        queries["identifier"] = rng.choice(identifiers)
    errors = [" ".join(line.split()) for line in text.splitlines()
              if _ERRORISH.search(line) and 3 <= len(line.split()) <= 15]
    if errors:
        queries["error"] = rng.choice(errors)
    numbers = sorted({m.group(0) for m in _NUMBER.finditer(text)
                      if sum(c.isdigit() for c in m.group(0)) >= 4})
    if numbers:
        queries["number"] = rng.choice(numbers)
    return queries


def _sentences(flat: str) -> list[tuple[int, str]]:
    """(offset, sentence) for each sentence of a one-line text."""
    out = []
    start = 0
    for match in _SENTENCE_END.finditer(flat + " X"):
        out.append((start, flat[start:match.start()].strip()))
        start = match.end()
    return out


def known_items(folder: Path, seed: int) -> list[dict[str, str]]:
    """The queries of every file, without those that occur in another file."""
    texts: dict[Path, str] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        try:
            texts[path] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    normals = {path: words(text) for path, text in texts.items()}
    items = []
    for path, text in texts.items():
        for kind, query in pick(path, text, seed).items():
            needle = words(query)
            if any(needle in other for p, other in normals.items() if p != path):
                continue
            items.append({"file": str(path.resolve()), "kind": kind, "query": query})
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--folder", type=Path, help="documents to use (default: built)")
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--site-packages", type=Path,
                        default=Path(next(p for p in sys.path if p.endswith("site-packages"))))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--variants", default="rrf,phrase+margin")
    parser.add_argument("--show-misses", action="store_true")
    args = parser.parse_args()
    folder = args.folder or args.work / "files"
    if args.folder is None and not any(folder.glob("*")):  # built once, then reused as it is
        build_folder(folder, args.site_packages, args.files, args.seed)
    items = known_items(folder, args.seed)
    counts = {kind: sum(i["kind"] == kind for i in items) for kind in KINDS}
    print(json.dumps({"files": sum(1 for p in folder.rglob("*") if p.is_file()),
                      "queries": len(items)} | counts), flush=True)
    config = Config().with_data_dir(args.work / "data")
    summary: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    with KnowledgeBase(config) as kb:
        started = time.perf_counter()
        kb.ingest([folder])
        print(json.dumps({"chunks": kb.stores.store.chunk_count(),
                          "ingest_s": round(time.perf_counter() - started, 1)}), flush=True)
        for number, variant in enumerate(args.variants.split(",")):
            kb.config = kb.config.replace("retrieval", **settings(variant))
            for mode in args.modes.split(","):
                if number and mode in PURE:  # fuses nothing: the same for every variant
                    continue
                first: dict[str, int] = defaultdict(int)
                top5: dict[str, int] = defaultdict(int)
                started = time.perf_counter()
                for item in items:
                    results = kb.query(item["query"], mode=mode, k=5)["results"]
                    sources = [r["source"] for r in results]
                    if sources[:1] == [item["file"]]:
                        first[item["kind"]] += 1
                    elif args.show_misses:
                        print(json.dumps({"miss": variant, "mode": mode} | item
                                         | {"got": sources[:2]}), flush=True)
                    top5[item["kind"]] += item["file"] in sources
                ms = 1000 * (time.perf_counter() - started) / max(len(items), 1)
                row = {"variant": variant, "mode": mode, "first": sum(first.values()),
                       "top5": sum(top5.values()), "of": len(items), "ms": round(ms, 1),
                       "first_by_kind": {k: f"{first[k]}/{counts[k]}" for k in KINDS}}
                print(json.dumps(row), flush=True)
                summary[(variant, mode)] = row
    print("\n| variant | mode | first | in top 5 | " + " | ".join(KINDS) + " | ms/query |")
    print("|---|---|---|---|" + "---|" * len(KINDS) + "---|")
    for (variant, mode), row in summary.items():
        kinds = " | ".join(row["first_by_kind"][k] for k in KINDS)
        print(f"| {variant} | {mode} | {row['first']}/{row['of']} | {row['top5']}/{row['of']} "
              f"| {kinds} | {row['ms']} |")


if __name__ == "__main__":
    main()

"""Hostile files made from the repository's fixtures with a fixed seed: truncated, bytes flipped,
zip members swapped, cut, renamed or dropped, XML nested deep or given a huge attribute,
invalid UTF-8, JSON nested deep. The same seed gives the same files."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import random
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

SEED = 35
"""The seed of the corpus `make test` runs (the long run goes on from the same seed)."""

ROOT = Path(__file__).resolve().parents[1]
ZIPPED = frozenset({".docx", ".pptx", ".xlsx", ".odt", ".odp", ".ods", ".epub"})
TEXT = frozenset({".md", ".txt", ".rst", ".html", ".csv", ".json", ".py", ".eml", ".ipynb"})
BINARY = frozenset({".pdf", ".msg", *ZIPPED})


def sources() -> list[Path]:
    """The fixtures mutated: every document fixture, the sample PDFs, one file of each text
    kind of the sample folder, and the CJK lessons."""
    docs = sorted((ROOT / "tests" / "fixtures" / "docs").iterdir())
    examples = sorted((ROOT / "examples" / "docs").rglob("*"))
    pdfs = [ROOT / "tests" / "fixtures" / "sample.pdf",
            *sorted(p for p in examples if p.suffix == ".pdf")]
    by_suffix: dict[str, Path] = {}
    for path in examples:
        if path.is_file() and path.suffix in TEXT and path.stat().st_size < 200_000:
            by_suffix.setdefault(path.suffix, path)
    cjk = sorted((ROOT / "tests" / "fixtures" / "cjk").glob("*.txt"))[:2]
    textfiles = ROOT / "tests" / "fixtures" / "textfiles"
    by_content = [textfiles / name for name in (  # text known by content, manual pages
        "git/README.Debian", "git/git-contacts", "tutor/tutor.ja.sjis", "tutor/tutor.ko.euc",
        "man/ls.1.gz", "man/xargs.1.gz")]
    return ([p for p in docs if p.is_file()] + pdfs + sorted(by_suffix.values()) + cjk
            + [p for p in by_content if p.exists()] + sorted(DERIVED))


DERIVED: dict[Path, tuple[str, str]] = {
    ROOT / "tests" / "fixtures" / "derived" / name: (source, codec) for name, source, codec in (
        ("sample.pdf.gz", "tests/fixtures/sample.pdf", "gz"),
        ("Apache-2.0.txt.bz2", "examples/docs/licenses/Apache-2.0.txt", "bz2"),
        ("testEPUB.epub.xz", "tests/fixtures/docs/testEPUB.epub", "xz"),
        ("ls.1", "tests/fixtures/textfiles/man/ls.1.gz", "gunzip"),
    )}
"""Fixtures made while the corpus is generated: compressed documents and a plain manual page."""

CODECS = {".gz": (gzip.compress, gzip.decompress), ".bz2": (bz2.compress, bz2.decompress),
          ".xz": (lzma.compress, lzma.decompress)}


def _read(path: Path) -> bytes:
    """A fixture's bytes (a derived one made from its source)."""
    if path not in DERIVED:
        return path.read_bytes()
    source, codec = DERIVED[path]
    data = (ROOT / source).read_bytes()
    if codec == "gunzip":
        return gzip.decompress(data)
    return CODECS["." + codec][0](data)


@dataclass(frozen=True)
class Case:
    """One hostile file: its name, how it was made, and its bytes."""

    name: str
    source: str
    mutation: str
    data: bytes


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[:rng.randrange(len(data))]


def _flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 4, 32, 256))):
        out[rng.randrange(len(out))] ^= rng.randrange(1, 256)
    return bytes(out)


def _bad_utf8(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 16, 512))):
        at = rng.randrange(len(out) + 1)
        out[at:at] = rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80",
                                 b"\xe2\x82", b"\x00", b"\xef\xbb\xbf"))
    return bytes(out)


def _insert_deep(rng: random.Random, data: bytes, open_: bytes, close: bytes) -> bytes:
    depth = rng.choice((500, 5_000, 200_000))
    at = _after_root(data)
    return data[:at] + open_ * depth + close * depth + data[at:]


def _after_root(data: bytes) -> int:
    """The offset just after the first start tag's end (or 0): where nesting goes in."""
    start = 0
    while (start := data.find(b"<", start)) != -1:
        if data[start + 1:start + 2].isalpha():
            end = data.find(b">", start)
            return end + 1 if end != -1 else 0
        start += 1
    return 0


def _xml_deep(rng: random.Random, data: bytes) -> bytes:
    return _insert_deep(rng, data, b"<div>", b"</div>")


def _xml_attr(rng: random.Random, data: bytes) -> bytes:
    at = _after_root(data)
    size = rng.choice((100_000, 3_000_000))
    attribute = b'<span title="' + b"A" * size + b'">x</span>'
    many = b"".join(b'<p a%d="v">' % n for n in range(rng.choice((1, 50_000)))) if \
        rng.random() < 0.3 else b""
    return data[:at] + attribute + many + data[at:]


def _json_deep(rng: random.Random, data: bytes) -> bytes:
    depth = rng.choice((1_000, 100_000))
    at = data.find(b"[") + 1 or 0
    return data[:at] + b"[" * depth + b"]" * depth + b"," + data[at:]


Mutation = Callable[[random.Random, bytes], bytes]
BYTES: dict[str, Mutation] = {"truncate": _truncate, "flip": _flip}
TEXTUAL: dict[str, Mutation] = {"bad_utf8": _bad_utf8, "xml_deep": _xml_deep,
                                "xml_attr": _xml_attr}


def _members(data: bytes) -> list[tuple[zipfile.ZipInfo, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info, archive.read(info)) for info in archive.infolist()]


def _zipped(members: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        warnings.simplefilter("ignore")  # a renamed member may repeat a name: on purpose
        for info, data in members:
            name = info if isinstance(info, str) else info.filename
            archive.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data,
                             compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def _main_member(members: list[tuple[zipfile.ZipInfo, bytes]]) -> int:
    """The index of the largest XML or HTML member (the document's body, usually)."""
    marked = [i for i, (info, _) in enumerate(members)
              if info.filename.endswith((".xml", ".html", ".xhtml", ".htm"))]
    return max(marked or range(len(members)), key=lambda i: len(members[i][1]))


def _zip_case(rng: random.Random, data: bytes, mutation: str) -> bytes:
    members = [(info, body) for info, body in _members(data)]
    if mutation == "zip_swap" and len(members) > 1:
        a, b = rng.sample(range(len(members)), 2)
        (ia, da), (ib, db) = members[a], members[b]
        members[a], members[b] = (ia, db), (ib, da)
    elif mutation == "zip_cut":
        i = _main_member(members) if rng.random() < 0.6 else rng.randrange(len(members))
        info, body = members[i]
        members[i] = (info, body[:rng.randrange(len(body) + 1)])
    elif mutation == "zip_rename":
        i = _main_member(members) if rng.random() < 0.6 else rng.randrange(len(members))
        name = rng.choice(("renamed.xml", "../../etc/passwd", "a/" * 200 + "x.xml",
                           members[i][0].filename.upper(), "mimetype"))
        members[i] = (name, members[i][1])  # type: ignore[assignment]
    elif mutation == "zip_drop":
        members.pop(_main_member(members) if rng.random() < 0.6 else rng.randrange(len(members)))
    else:  # a textual mutation of the main member
        i = _main_member(members)
        info, body = members[i]
        members[i] = (info, TEXTUAL[mutation](rng, body))
    return _zipped(members)  # type: ignore[arg-type]


def _is_zip(path: Path) -> bool:
    """Whether the fixture is a zip (a password-protected Office file is an OLE file)."""
    return path.suffix in ZIPPED and zipfile.is_zipfile(path)


def mutations_for(path: Path) -> list[str]:
    """The mutations that apply to a fixture of this kind."""
    names = list(BYTES)
    if _is_zip(path):
        return names + ["zip_swap", "zip_cut", "zip_rename", "zip_drop", *TEXTUAL]
    if path.suffix in CODECS:
        return names + ["inner"]
    if path.suffix in TEXT or path.suffix not in BINARY:
        names += list(TEXTUAL)
    if path.suffix in (".json", ".ipynb"):
        names.append("json_deep")
    return names


def mutate(rng: random.Random, path: Path, data: bytes, mutation: str) -> bytes:
    """The fixture's bytes after one mutation."""
    if mutation in BYTES:
        return BYTES[mutation](rng, data)
    if mutation == "json_deep":
        return _json_deep(rng, data)
    if mutation == "inner":  # the compressed file's content mutated, then compressed again
        compress, decompress = CODECS[path.suffix]
        inner = Path(path.stem)
        data = decompress(data)
        name = rng.choice(mutations_for(inner) if not _is_zip(inner) else list(BYTES))
        return compress(mutate(rng, inner, data, name))
    if _is_zip(path):
        return _zip_case(rng, data, mutation)
    return TEXTUAL[mutation](rng, data)


def cases(count: int, seed: int = SEED, start: int = 0) -> Iterator[Case]:
    """Cases number `start` to `start + count - 1` of the corpus of `seed` (each case is made
    from its own generator, so a case is the same whichever range is asked for)."""
    fixtures = sources()
    contents = {path: _read(path) for path in fixtures}
    for number in range(start, start + count):
        rng = random.Random(f"{seed}:{number}")
        path = rng.choice(fixtures)
        mutation = rng.choice(mutations_for(path))
        data = mutate(rng, path, contents[path], mutation)
        yield Case(f"case{number:05d}-{mutation}-{path.name}",
                   str(path.relative_to(ROOT)), mutation, data)


def write_cases(folder: Path, count: int, seed: int = SEED, start: int = 0) -> list[Case]:
    """Write the cases into `folder` (dated an hour ago: not mistaken for files being
    written) and return them without their bytes."""
    import os
    import time

    folder.mkdir(parents=True, exist_ok=True)
    made = []
    old = time.time() - 3600
    for case in cases(count, seed, start):
        target = folder / case.name
        target.write_bytes(case.data)
        os.utime(target, (old, old))
        made.append(replace(case, data=b""))
    return made

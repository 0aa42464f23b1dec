"""Readers per file type: a file becomes a Document, its text (a text file's lines kept) and,
for PDFs and documents, the segments that say where each part of the text is."""

from __future__ import annotations

import bisect
import codecs
import logging
import os
import re
import stat
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psirag_kb.errors import FileReadError, SkippedFile
from psirag_kb.ingest.context import (
    HEADER_TOKENS,
    Heading,
    chunk_headers,
    code_ranges,
    file_title,
    hash_headings,
)
from psirag_kb.ingest.filetypes import (
    SNIFF_BYTES,
    archive_reason,
    binary_reason,
    compression_of,
    is_man_suffix,
    looks_like_roff,
    magic_reason,
)
from psirag_kb.ingest.formats import (
    STRUCTURED_KINDS,
    Extracted,
    Segment,
    anchor_breaks,
    read_structured,
    span_locations,
)
from psirag_kb.ingest.formats.bounds import UnpackLimits
from psirag_kb.ingest.formats.compressed import decompress
from psirag_kb.ingest.htmltext import html_outline, html_visible_text
from psirag_kb.ingest.markdowntext import markdown_outline, markdown_text
from psirag_kb.ingest.rest import rest_headings, rest_text
from psirag_kb.ingest.roff import man_text

logger = logging.getLogger(__name__)

_KIND_BY_SUFFIX: dict[str, str] = {
    **dict.fromkeys((".txt", ".text", ".org", ".adoc", ".asciidoc"), "text"),
    **dict.fromkeys((".md", ".markdown", ".mdown", ".mkd"), "markdown"),
    ".rst": "rst",
    **dict.fromkeys((".html", ".htm", ".xhtml"), "html"),
    ".pdf": "pdf",
    **dict.fromkeys((".json", ".jsonl", ".ndjson"), "json"),
    **dict.fromkeys((".csv", ".tsv"), "csv"),
    **dict.fromkeys(
        (
            ".py", ".pyi", ".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".java", ".kt", ".kts",
            ".scala", ".groovy", ".gradle", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh",
            ".hxx", ".cs", ".go", ".rs", ".rb", ".php", ".pl", ".pm", ".swift", ".m", ".mm",
            ".r", ".jl", ".lua", ".dart", ".ex", ".exs", ".erl", ".hs", ".ml", ".mli", ".fs",
            ".clj", ".el", ".vim", ".zig", ".nim", ".sh", ".bash", ".zsh", ".fish", ".ps1",
            ".bat", ".cmd", ".toml", ".yaml", ".yml", ".ini", ".cfg", ".conf", ".properties",
            ".tex", ".bib", ".sql", ".css", ".scss", ".sass", ".less", ".xml", ".vue",
            ".svelte", ".proto", ".graphql", ".cmake", ".mk",
        ),
        "code",
    ),
    **STRUCTURED_KINDS,
}

SUPPORTED_SUFFIXES: frozenset[str] = frozenset(_KIND_BY_SUFFIX)
"""Lower-case file suffixes (with the dot) that are indexed."""

SUPPORTED_NAMES: frozenset[str] = frozenset(
    {"makefile", "gnumakefile", "dockerfile", "readme", "license", "changelog", "authors"}
)
"""Lower-case file names without a suffix that are indexed as text or code."""

_CLEANERS: dict[str, Callable[[str], str]] = {
    "html": html_visible_text, "rst": rest_text, "markdown": markdown_text,
}
_NAME_KINDS = {"makefile": "code", "gnumakefile": "code", "dockerfile": "code"}
_STRUCTURED = frozenset(STRUCTURED_KINDS.values())

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_SNIFF_BYTES = 8192
# Control bytes allowed in text: tab, newline, vertical tab, form feed, carriage return, escape.
_TEXT_CONTROLS = frozenset("\t\n\x0b\x0c\r\x1b")
_TEXT_BYTES = bytes(range(32, 256)) + b"\t\n\x0b\x0c\r\x1b"
_MAX_CONTROL_RATIO = 0.05
_MAX_NON_ASCII_RATIO = 0.3
_DETECT_BYTES = 65536
_MAX_CHAOS = 0.1  # charset-normalizer's "mess" of a guess: cp1250 Czech 0.001, Shift-JIS 0.01
_LOOSE_CHAOS = 0.4  # more mess is taken with a language it is sure of (Vim's Russian tutor 0.34)
_MIN_COHERENCE = 0.5  # ...such as Russian in cp1251 (0.67); noise has 0.0
_CENTRAL = frozenset({"Polish", "Czech", "Slovak", "Hungarian", "Croatian", "Slovene", "Romanian",
                      "Serbian", "Bosnian"})
_LATIN_PAGES = frozenset({"cp1250", "cp1254", "cp1257", "cp1258", "iso8859_2", "iso8859_10",
                          "iso8859_13", "iso8859_14", "iso8859_15", "iso8859_16", "latin_1",
                          "mac_latin2", "mac_roman", "cp850", "cp852", "cp775"})
_MAN_SO = re.compile(r"^\.so\s+(\S+)", re.MULTILINE)
_ODD = frozenset({"Cc", "Cn", "Co", "Cs"})
RECENT_WRITE_S = 60.0
"""A damaged file modified less than this many seconds ago may still be being written."""


@dataclass(frozen=True)
class Document:
    """The extracted text of one file; line N of `text` is line N of the file (pages for PDFs).

    `segments` say where in the original each part of `text` is (a PDF page, a slide, a sheet's
    rows); plain text, markdown, code and HTML have none (their lines are their location).
    `note` is what a person should know about an indexed file (pages left for OCR). `title`
    is the title the file gives itself (metadata, <title>, front matter) and `headings` its
    headings on their lines of `text`: what chunk headers are made of.
    """

    path: Path
    text: str
    kind: str
    pages: list[int] | None = None
    segments: list[Segment] | None = None
    note: str = ""
    title: str = ""
    headings: tuple[Heading, ...] = ()
    encoding: str = ""
    """The character encoding a text file was decoded from ("utf-8", "cp1250", "shift_jis";
    "" for documents whose reader decodes them: PDF, office, e-mail...)."""

    def breaks(self) -> list[int]:
        """Offsets where a chunk must not run on: a new sheet, EPUB section or mail part."""
        return anchor_breaks(self.segments) if self.segments else []

    def locations(self, spans: list[tuple[int, int]]) -> list[dict[str, Any] | None]:
        """The location of each [start, end) span of `text` (None without segments)."""
        if not self.segments:
            return [None] * len(spans)
        return span_locations(Extracted(self.text, self.segments), spans)

    def headers(self, first_lines: Sequence[int], cap: int = HEADER_TOKENS) -> list[str]:
        """The context header (title > heading path) of chunks starting on these lines."""
        return chunk_headers(self.title, self.headings, file_title(self.path), first_lines, cap)


SNIFFED = "sniff"
"""The kind of a file whose name does not say what it is: its content decides (text or not)."""


def kind_of(path: Path, overrides: Mapping[str, str] | None = None) -> str | None:
    """Return the document kind a path's name says: a kind, SNIFFED (the content decides), or
    None when the file is never read (a known binary type, an archive, `skip` in overrides).

    A compressed file's kind is its inner name's (`manual.pdf.gz` is a PDF).
    """
    path = Path(path)
    if compression_of(path.name) and not archive_reason(path.name):
        path = path.with_suffix("")
    suffix = path.suffix.lower()
    if overrides and suffix in overrides:
        kind = overrides[suffix]
        return None if kind == "skip" else kind
    if suffix in _KIND_BY_SUFFIX:
        return _KIND_BY_SUFFIX[suffix]
    name = path.name.lower()
    if not suffix and name in SUPPORTED_NAMES:
        return _NAME_KINDS.get(name, "text")
    if archive_reason(path.name) or binary_reason(suffix) or compression_of(path.name):
        return None
    return "man" if is_man_suffix(suffix) else SNIFFED


def is_supported(path: Path, overrides: Mapping[str, str] | None = None) -> bool:
    """Tell whether a file may be indexed by its name (a sniffed one still by its content)."""
    return kind_of(path, overrides) is not None


def unread_reason(path: Path, overrides: Mapping[str, str] | None = None) -> str | None:
    """Why a file is not read, judged by its name and (for names that do not say) its first
    SNIFF_BYTES; None when it is to be read. Costs one small read at most."""
    path = Path(path)
    kind = kind_of(path, overrides)
    if kind is None:
        return _name_reason(path, overrides)
    if kind != SNIFFED or compression_of(path.name):
        return None  # a compressed file's content is judged once decompressed
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return None  # reading proper reports it with its reason
    if head.startswith(b"%PDF-"):
        return None
    return _binary_head(head)


def _name_reason(path: Path, overrides: Mapping[str, str] | None) -> str:
    """The reason a file is never read, from its name (a compressed file's: its inner name)."""
    reason = archive_reason(path.name)
    if reason:
        return reason
    outer = path.suffix.lower()
    if compression_of(path.name):
        path = path.with_suffix("")
        if compression_of(path.name):
            return f"compressed twice ({path.suffix.lower()} inside {outer}): not read"
    suffix = path.suffix.lower()
    if overrides and overrides.get(suffix) == "skip":
        return f"file type {suffix} is skipped ([ingest] extensions)"
    reason = binary_reason(suffix)
    if reason:
        return reason
    return f"unsupported file type {suffix}" if suffix else "unsupported file type (no suffix)"


def _binary_head(head: bytes) -> str | None:
    """Why a file's first bytes are not text (None when they may be)."""
    if not head or any(head.startswith(bom) for bom, _ in _BOMS):
        return None
    if b"\x00" in head:
        return magic_reason(head) or "binary content (NUL bytes)"
    magic = magic_reason(head)
    if magic:
        return magic
    if len(head.translate(None, _TEXT_BYTES)) > _MAX_CONTROL_RATIO * len(head):
        return "binary content (control characters)"
    return None


def read_document(path: Path, *, max_bytes: int = 20_000_000, ocr: bool = True,
                  limits: UnpackLimits | None = None,
                  overrides: Mapping[str, str] | None = None) -> Document:
    """Read and extract a supported file, raising SkippedFile or FileReadError when it cannot be.

    `limits` bound how far a zip-based document, a PDF's page streams or a compressed file may
    unpack (UnpackLimits() by default); a compressed file is undone first and read by its inner
    name. `overrides` map lower-case suffixes to kinds ([ingest] extensions). A file whose name
    does not say what it is is read as text when its content is text (else skipped as binary),
    as a manual page when it starts like one, as a PDF when it starts with %PDF-.
    With `ocr`, PDF pages without a text layer are read by tesseract when it is installed. A
    file that looks cut short and was modified in the last RECENT_WRITE_S seconds raises
    FileReadError (retried) rather than SkippedFile: its writer may not have finished.
    """
    path = Path(path)
    kind = kind_of(path, overrides)
    if kind is None:
        raise SkippedFile(_name_reason(path, overrides))
    try:
        document = _extract(path, kind, ocr, limits or UnpackLimits(), max_bytes)
    except SkippedFile as exc:
        if exc.incomplete:
            _retry_if_recent(path, exc)
        raise
    if not document.text.strip():
        raise SkippedFile("empty file")
    logger.debug("read %s (%s, %d chars)", path, kind, len(document.text))
    return document


def _extract(path: Path, kind: str, ocr: bool, limits: UnpackLimits,
             max_bytes: int) -> Document:
    """Read a file's bytes (undoing its compression) and turn them into a Document by kind."""
    data = _read_bytes(path, max_bytes)
    method = compression_of(path.name)
    if method:
        data = decompress(data, method, limits, max_bytes)
        if not data:
            raise SkippedFile("empty file (once decompressed)")
    if kind in (SNIFFED, "man"):
        head = data[:SNIFF_BYTES]
        if head.startswith(b"%PDF-"):
            kind = "pdf"
        elif looks_like_roff(head) or (kind == "man" and head.lstrip()[:1] in (b".", b"'")):
            kind = "man"  # a section suffix (.1, .3pm) with requests in it is a page too
        else:
            reason = _binary_head(head)
            if reason:
                raise SkippedFile(reason)
            kind = "text"
    if kind in _STRUCTURED:
        extracted = read_structured(path, data, kind, limits)
        skipped = code_ranges(len(extracted.text),
                              [(s.start, s.location) for s in extracted.segments])
        return Document(path, extracted.text, kind, segments=extracted.segments,
                        title=extracted.title,
                        headings=tuple(hash_headings(extracted.text, skipped)))
    if kind == "pdf":
        from psirag_kb.ingest.pdf import ocr_note, read_pdf

        pdf = read_pdf(data, ocr=ocr, limits=limits)
        segments = [Segment(start, {"page": n}) for n, start in enumerate(pdf.pages, start=1)]
        return Document(path, pdf.text, kind, pages=pdf.pages, segments=segments,
                        note=ocr_note(pdf, ocr), title=pdf.title)
    text, encoding = decode_text(data)
    del data  # the bytes go once decoded: a text file is held twice at most (text, parser)
    text = _normalise_newlines(text)
    if kind == "man":
        body, title, headings = _man(text)
        included = _MAN_SO.search(text)
        if included and not body.strip():
            raise SkippedFile(f"manual page that only includes another ({included[1]}): "
                              "indexed as that page")
        return Document(path, body, kind, title=title, headings=headings, encoding=encoding)
    title, headings = _outline(text, kind)
    return Document(path, _visible_text(text, kind), kind, title=title, headings=headings,
                    encoding=encoding)


def _man(source: str) -> tuple[str, str, tuple[Heading, ...]]:
    """A manual page's text, title and headings; its source as text if the roff reader fails."""
    try:
        text, title, headings = man_text(source)
    except Exception:  # a parser's bug must not lose the file: index its source instead
        logger.warning("could not read roff markup; indexing the source text", exc_info=True)
        return source, "", ()
    if text.count("\n") != source.count("\n"):
        logger.warning("reading roff markup moved lines; indexing the source text")
        return source, "", ()
    return text, title, headings


def _outline(source: str, kind: str) -> tuple[str, tuple[Heading, ...]]:
    """The title and headings of a text file's source (none for code and data files)."""
    try:
        if kind == "markdown":
            title, headings = markdown_outline(source)
        elif kind == "rst":
            title, headings = "", rest_headings(source)
        elif kind == "html":
            title, headings = html_outline(source)
        elif kind == "text":
            title, headings = "", hash_headings(source)
        else:
            return "", ()
    except Exception:  # a parser's bug must not lose the file: it is indexed without headings
        logger.warning("could not find the headings of %s markup", kind, exc_info=True)
        return "", ()
    return title, tuple(headings)


def _visible_text(text: str, kind: str) -> str:
    """Return what a reader sees of marked-up text (HTML, reST, Markdown), line N on line N."""
    cleaner = _CLEANERS.get(kind)
    if cleaner is None:
        return text
    try:
        clean = cleaner(text)
    except Exception:  # a parser's bug must not lose the file: index its source instead
        logger.warning("could not clean %s markup; indexing the source text", kind, exc_info=True)
        return text
    if clean.count("\n") != text.count("\n"):
        logger.warning("cleaning %s markup moved lines; indexing the source text", kind)
        return text
    return clean


def _retry_if_recent(path: Path, exc: SkippedFile) -> None:
    """Raise FileReadError for a file cut short that was modified a moment ago (being written)."""
    try:
        age = time.time() - os.stat(path).st_mtime
    except OSError:
        return
    if age < RECENT_WRITE_S:  # a clock ahead of ours (negative age) counts as recent too
        raise FileReadError(
            f"{exc.reason}; modified {max(age, 0):.0f}s ago, so probably still being written "
            "(changing while read): will retry"
        ) from exc


def line_of(text: str, offset: int) -> int:
    """Return the 1-based line number of a character offset (use LineIndex for many lookups)."""
    return text.count("\n", 0, max(0, offset)) + 1


class LineIndex:
    """Answers many offset-to-line questions about one text by bisecting its newline offsets."""

    def __init__(self, text: str) -> None:
        self._newlines = [m.start() for m in re.finditer("\n", text)]

    def line_of(self, offset: int) -> int:
        """Return the 1-based line number of a character offset."""
        return bisect.bisect_left(self._newlines, offset) + 1

    def line_start(self, line: int) -> int:
        """Return the character offset where a 1-based line starts."""
        return 0 if line <= 1 else self._newlines[line - 2] + 1


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    """Read a whole regular file within the size limit, checking it did not change meanwhile."""
    try:
        before = os.stat(path)
    except OSError as exc:
        raise _read_error(path, exc) from exc
    if stat.S_ISDIR(before.st_mode):
        raise FileReadError(f"cannot read {path}: it is a directory")
    if not stat.S_ISREG(before.st_mode):
        raise SkippedFile("not a regular file")
    size = before.st_size
    if size > max_bytes:
        raise SkippedFile(f"file too large ({size} bytes > limit {max_bytes})")
    if size == 0:
        raise SkippedFile("empty file")
    try:
        with open(path, "rb") as fh:
            opened = os.fstat(fh.fileno())
            data = fh.read(size + 1)
            after = os.fstat(fh.fileno())
        final = os.stat(path)
    except FileNotFoundError as exc:
        raise FileReadError(f"file changed while being read; will retry: {path} vanished") from exc
    except OSError as exc:
        raise _read_error(path, exc) from exc
    states = {_signature(s) for s in (before, opened, after, final)}
    if len(data) != size or len(states) != 1:
        raise FileReadError(f"file changed while being read; will retry: {path}")
    return data


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    """Return what identifies one version of a file: device, inode, size and mtime."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read_error(path: Path, exc: OSError) -> FileReadError:
    """Turn an OS error while reading into a FileReadError that names the path."""
    if isinstance(exc, FileNotFoundError):
        return FileReadError(f"file not found: {path} (moved or deleted?); will retry")
    if isinstance(exc, PermissionError):
        return FileReadError(f"permission denied reading {path}: check the file's permissions")
    if isinstance(exc, IsADirectoryError):
        return FileReadError(f"cannot read {path}: it is a directory")
    return FileReadError(f"cannot read {path}: {exc.strerror or exc}")


def _normalise_newlines(text: str) -> str:
    """Turn CRLF and lone CR line ends into LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def decode_text(data: bytes) -> tuple[str, str]:
    """Decode file bytes and name their encoding: UTF-8/16/32 (BOM), UTF-8, a legacy encoding
    charset-normalizer is confident of (Shift-JIS, EUC-KR, GB18030, cp1250...), or plausible
    Windows-1252/Latin-1; raise SkippedFile for binary content or undecodable text."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data[len(bom) :].decode(encoding)
            except UnicodeDecodeError as exc:
                raise SkippedFile(f"undecodable text (invalid {encoding}: {exc.reason})") from exc
            if _control_ratio(text[:_SNIFF_BYTES]) > _MAX_CONTROL_RATIO:
                raise SkippedFile("binary content (control characters)")
            return text, encoding
    head = data[:_SNIFF_BYTES]
    if b"\x00" in head:
        raise SkippedFile("binary content (NUL bytes)")
    if len(head.translate(None, _TEXT_BYTES)) > _MAX_CONTROL_RATIO * len(head):
        raise SkippedFile("binary content (control characters)")
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    mostly = _mostly_utf8(data)
    if mostly is not None:
        return mostly, "utf-8"
    # A few accented names in English text (under 1% of the bytes) give the detector too
    # little to go on (it read a changelog's "Löwer" as Big5): Windows-1252 is tried first
    sparse = len(head.translate(None, bytes(range(128)))) * 100 < len(head)
    detected = None if sparse else _detected(data)
    if detected is not None:
        return detected
    for encoding in ("cp1252", "latin-1"):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if _plausible_single_byte_text(text):
            logger.debug("decoded as %s after UTF-8 failed", encoding)
            return text, encoding
    detected = _detected(data) if sparse else None
    if detected is not None:
        return detected
    raise SkippedFile("undecodable text (neither UTF-8 nor plausible Latin-1/Windows-1252)")


def _detected(data: bytes) -> tuple[str, str] | None:
    """Decode text in the legacy encoding charset-normalizer finds in its first bytes, when it
    is confident (little chaos) and the whole file decodes to printable text; else None."""
    from charset_normalizer import from_bytes

    sample = data[:_DETECT_BYTES]
    if len(data) > _DETECT_BYTES:  # end the sample on a line: no character cut in two
        sample = sample[: sample.rfind(b"\n") + 1] or sample
    try:
        matches = from_bytes(sample, threshold=_LOOSE_CHAOS)
    except Exception:  # a detector's bug must not lose the file: the fallbacks decide
        logger.warning("charset detection failed", exc_info=True)
        return None
    # A guess is taken when it reads with little mess, or with some (a tutorial full of
    # symbols) but in words of a language the detector knows well.
    trusted = [m for m in matches if m.chaos <= _MAX_CHAOS or m.coherence >= _MIN_COHERENCE]
    best = trusted[0] if trusted else None
    if best is None or best.encoding in ("utf_8", "ascii"):
        return None
    # Latin code pages tie: the same bytes read as well in several (ñ in Windows-1252 is ń in
    # Windows-1250). Central European text is in Windows-1250 or ISO-8859-2 (not in the Nordic
    # or Celtic pages: ł in ISO-8859-2 is ŗ in ISO-8859-10); else a tie goes to Windows-1252,
    # the commonest of them.
    choices: tuple[str, ...] = (best.encoding,)
    tie = "cp1252" in best.could_be_from_charset or any(
        m.encoding == "cp1252" and m.chaos <= best.chaos and m.coherence >= best.coherence
        for m in trusted)
    if best.encoding in _LATIN_PAGES and best.language in _CENTRAL:
        c1 = any(0x80 <= byte < 0xA0 for byte in sample)  # C1 controls in ISO-8859-2
        choices = ("cp1250", "iso8859_2") if c1 else ("iso8859_2", "cp1250")
    elif best.encoding in _LATIN_PAGES and tie:
        choices = ("cp1252", best.encoding)
    for encoding in choices:
        try:
            text = data.decode(encoding)
            break
        except (UnicodeDecodeError, LookupError):
            continue
    else:
        return None
    if _control_ratio(text[:_SNIFF_BYTES]) > _MAX_CONTROL_RATIO or not _printable(text):
        return None
    name = codecs.lookup(encoding).name
    logger.debug("decoded as %s (detected) after UTF-8 failed", name)
    return text, name


def _printable(text: str) -> bool:
    """Whether a decoded sample is mostly printable: unassigned, private-use and control
    characters (other than whitespace) stay under 1 in 200."""
    sample = text[:_SNIFF_BYTES]
    odd = sum(1 for ch in sample if ord(ch) > 127 and unicodedata.category(ch) in _ODD)
    return odd * 200 <= len(sample)


def _mostly_utf8(data: bytes) -> str | None:
    """Decode UTF-8 text with a few corrupt bytes (replaced by U+FFFD), or return None."""
    text = data.decode("utf-8", "replace")
    bad = text.count("\ufffd") - data.count("\ufffd".encode())
    good = len(text) - len(text.encode("ascii", "ignore")) - bad
    if good > 0 and bad <= good // 20:
        logger.debug("decoded as UTF-8 with %d invalid bytes replaced", bad)
        return text
    return None


def _control_ratio(sample: str) -> float:
    """Return the share of control characters (other than whitespace controls) in a sample."""
    if not sample:
        return 0.0
    bad = sum(1 for ch in sample if ch not in _TEXT_CONTROLS and unicodedata.category(ch) == "Cc")
    return bad / len(sample)


def _plausible_single_byte_text(text: str) -> bool:
    """Tell whether a single-byte decoding looks like real text rather than noise."""
    sample = text[:65536]
    visible = [ch for ch in sample if not ch.isspace()]
    if not visible:
        return True
    non_ascii = [ch for ch in visible if ord(ch) > 127]
    if len(non_ascii) > _MAX_NON_ASCII_RATIO * len(visible):
        return False
    odd = sum(1 for ch in non_ascii if unicodedata.category(ch)[0] == "C")
    return odd == 0 and _control_ratio(sample) <= _MAX_CONTROL_RATIO


def link_inside(path: Path, folders: Iterable[Path]) -> bool:
    """Whether a path is a symlink to a file inside one of the folders (indexed there already)."""
    if not path.is_symlink():
        return False
    target = Path(os.path.realpath(path))
    inside = any(Path(os.path.realpath(folder)) in target.parents for folder in folders)
    return inside and target.is_file()


def link_outside(path: Path, folder: Path) -> Path | None:
    """The real path of a symlink (chains and '..' resolved, dangling or not) outside a folder."""
    if not path.is_symlink():
        return None
    target = Path(os.path.realpath(path))
    return None if target.is_relative_to(os.path.realpath(folder)) else target

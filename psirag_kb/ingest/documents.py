"""Readers per file type: a supported file becomes a Document whose text keeps the file's lines."""

from __future__ import annotations

import bisect
import codecs
import io
import logging
import os
import re
import stat
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

from psirag_kb.errors import FileReadError, SkippedFile

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
}

SUPPORTED_SUFFIXES: frozenset[str] = frozenset(_KIND_BY_SUFFIX)
"""Lower-case file suffixes (with the dot) that are indexed."""

SUPPORTED_NAMES: frozenset[str] = frozenset(
    {"makefile", "gnumakefile", "dockerfile", "readme", "license", "changelog", "authors"}
)
"""Lower-case file names without a suffix that are indexed as text or code."""

_NAME_KINDS = {"makefile": "code", "gnumakefile": "code", "dockerfile": "code"}

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


@dataclass(frozen=True)
class Document:
    """The extracted text of one file; line N of `text` is line N of the file (pages for PDFs)."""

    path: Path
    text: str
    kind: str
    pages: list[int] | None = None


def kind_of(path: Path) -> str | None:
    """Return the document kind for a path, or None when the file type is not supported."""
    suffix = path.suffix.lower()
    if suffix in _KIND_BY_SUFFIX:
        return _KIND_BY_SUFFIX[suffix]
    name = path.name.lower()
    if not suffix and name in SUPPORTED_NAMES:
        return _NAME_KINDS.get(name, "text")
    return None


def is_supported(path: Path) -> bool:
    """Tell whether the file's type is one that is indexed."""
    return kind_of(path) is not None


def read_document(path: Path, *, max_bytes: int = 20_000_000) -> Document:
    """Read and extract a supported file, raising SkippedFile or FileReadError when it cannot be."""
    path = Path(path)
    kind = kind_of(path)
    if kind is None:
        suffix = path.suffix.lower()
        what = f"unsupported file type {suffix}" if suffix else "unsupported file type (no suffix)"
        raise SkippedFile(what)
    data = _read_bytes(path, max_bytes)
    pages: list[int] | None = None
    if kind == "pdf":
        text, pages = _pdf_text(data)
    else:
        text = _normalise_newlines(_decode(data))
        if kind == "html":
            text = html_visible_text(text)
    if not text.strip():
        raise SkippedFile("empty file")
    logger.debug("read %s (%s, %d chars)", path, kind, len(text))
    return Document(path=path, text=text, kind=kind, pages=pages)


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


def _decode(data: bytes) -> str:
    """Decode file bytes as UTF-8/16/32 (BOM) or plausible Windows-1252, else raise SkippedFile."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data[len(bom) :].decode(encoding)
            except UnicodeDecodeError as exc:
                raise SkippedFile(f"undecodable text (invalid {encoding}: {exc.reason})") from exc
            if _control_ratio(text[:_SNIFF_BYTES]) > _MAX_CONTROL_RATIO:
                raise SkippedFile("binary content (control characters)")
            return text
    head = data[:_SNIFF_BYTES]
    if b"\x00" in head:
        raise SkippedFile("binary content (NUL bytes)")
    if len(head.translate(None, _TEXT_BYTES)) > _MAX_CONTROL_RATIO * len(head):
        raise SkippedFile("binary content (control characters)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    mostly = _mostly_utf8(data)
    if mostly is not None:
        return mostly
    for encoding in ("cp1252", "latin-1"):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        if _plausible_single_byte_text(text):
            logger.debug("decoded as %s after UTF-8 failed", encoding)
            return text
    raise SkippedFile("undecodable text (neither UTF-8 nor plausible Latin-1/Windows-1252)")


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


def _pdf_text(data: bytes) -> tuple[str, list[int]]:
    """Extract page texts from PDF bytes, joined by blank lines, with each page's start offset."""
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _pdf_decrypt(reader):
            raise SkippedFile("PDF is encrypted (no password available)")
        pages = list(reader.pages)
    except SkippedFile:
        raise
    except Exception as exc:  # pypdf raises many kinds of errors on malformed input
        raise SkippedFile(f"PDF could not be parsed: {exc}") from exc
    parts: list[str] = []
    starts: list[int] = []
    offset = 0
    for number, page in enumerate(pages, start=1):
        try:
            page_text = page.extract_text() or ""
        except Exception as exc:  # one broken page should not lose the others
            logger.warning("PDF page %d: text extraction failed: %s", number, exc)
            page_text = ""
        page_text = _normalise_newlines(page_text.replace("\x00", "")).strip()
        starts.append(offset)
        parts.append(page_text)
        offset += len(page_text) + 2
    text = "\n\n".join(parts)
    if not text.strip():
        raise SkippedFile("no extractable text (scanned PDF?)")
    return text, starts


def _pdf_decrypt(reader: object) -> bool:
    """Try to open an encrypted PDF with the empty password; tell whether that worked."""
    try:
        return bool(reader.decrypt(""))  # type: ignore[attr-defined]
    except Exception:  # missing crypto backend or unsupported algorithm
        return False


_HTML_DROPPED = frozenset({"script", "style", "template", "title"})
_HTML_HEAD_TAGS = frozenset(
    {"title", "meta", "link", "style", "script", "base", "noscript", "template"}
)
_HTML_BREAKING = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "caption", "dd", "div", "dl", "dt",
        "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
        "hr", "img", "li", "main", "nav", "ol", "p", "pre", "section", "table", "td", "th", "tr",
        "ul", "option", "button", "label", "input", "textarea", "select",
    }
)
_SPACES = re.compile(r"[^\S\n]+")
_LINE_EDGE_SPACES = re.compile(r" *\n *")


class _VisibleTextParser(HTMLParser):
    """Collects the visible text of an HTML page, keeping every source newline in place."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.parts: list[str] = []
        self.newlines = 0
        self._dropped = 0
        self._in_head = False

    def _sync(self) -> None:
        """Emit the newlines skipped since the last event so output lines track source lines."""
        missing = self.getpos()[0] - 1 - self.newlines
        if missing > 0:
            self.parts.append("\n" * missing)
            self.newlines += missing

    def _emit(self, text: str) -> None:
        """Append visible text unless inside dropped content."""
        if not self._dropped and not self._in_head:
            self.parts.append(text)
            self.newlines += text.count("\n")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._sync()
        if tag == "head":
            self._in_head = True
            return
        if self._in_head and tag not in _HTML_HEAD_TAGS:
            self._in_head = False
        if tag in _HTML_DROPPED:
            self._dropped += 1
        elif tag in _HTML_BREAKING:
            self._emit(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._sync()
        if tag in _HTML_BREAKING:
            self._emit(" ")

    def handle_endtag(self, tag: str) -> None:
        self._sync()
        if tag == "head":
            self._in_head = False
        elif tag in _HTML_DROPPED:
            self._dropped = max(0, self._dropped - 1)
        elif tag in _HTML_BREAKING:
            self._emit(" ")

    def handle_data(self, data: str) -> None:
        self._sync()
        if self._dropped or self._in_head:
            return
        self._emit(data)

    def handle_entityref(self, name: str) -> None:
        self._sync()
        self._emit(_single_line(unescape(f"&{name};")))

    def handle_charref(self, name: str) -> None:
        self._sync()
        self._emit(_single_line(unescape(f"&#{name};")))


def _single_line(text: str) -> str:
    """Replace line breaks produced by a character reference, which would shift line numbers."""
    return text.replace("\n", " ").replace("\r", " ")


def html_visible_text(source: str) -> str:
    """Return the visible text of HTML source with tags removed and every newline kept in place."""
    parser = _VisibleTextParser()
    parser.feed(source)
    parser.close()
    missing = source.count("\n") - parser.newlines
    if missing > 0:
        parser.parts.append("\n" * missing)
    text = _SPACES.sub(" ", "".join(parser.parts))
    return _LINE_EDGE_SPACES.sub("\n", text).strip(" ")


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

"""Opening the containers formats live in (zip, OLE2), with skip reasons a person can act on."""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass

from psirag_kb.errors import SkippedFile

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
RATIO_FLOOR = 10_000_000
"""A member is judged by its compression ratio only once it unpacks past this many bytes."""
_READ_SIZE = 1 << 20
_ENTITY = b"<!ENTITY"
# Members the readers parse as XML (an SVG image, never parsed, may declare entities).
_XML_SUFFIXES = (".xml", ".rels", ".opf", ".ncx")

_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF"),
    (b"\x1f\x8b", "gzip data"),
    (b"Rar!", "a RAR archive"),
    (b"7z\xbc\xaf", "a 7z archive"),
    (b"{\\rtf", "an RTF document"),
    (OLE_MAGIC, "an OLE2 compound file"),
)
_LEGACY = {"docx": ".doc", "xlsx": ".xls", "pptx": ".ppt"}


@dataclass(frozen=True)
class UnpackLimits:
    """How far a document's container may unpack: in all, and per member relative to its size."""

    max_bytes: int = 200_000_000
    """Bytes all members may unpack to ([ingest] max_extracted_bytes)."""
    max_ratio: int = 100
    """Unpacked / packed size a member past RATIO_FLOOR may reach ([ingest]
    max_compression_ratio)."""


def describe_content(data: bytes) -> str | None:
    """Name what some bytes look like (a PNG image, plain text), or None when unknown."""
    for magic, what in _SIGNATURES:
        if data.startswith(magic):
            return what
    head = data[:4096]
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:
            return None
    return "plain text" if b"\x00" not in head else None


def open_zip(data: bytes, kind: str) -> zipfile.ZipFile:
    """Open bytes as a zip container, raising SkippedFile that says what is wrong with them."""
    if not data.startswith(_ZIP_MAGICS):
        if data.startswith(OLE_MAGIC):
            raise SkippedFile(ole_reason(data, kind))
        what = describe_content(data)
        raise SkippedFile(f"damaged .{kind}: not a zip file" + (f" (it is {what})" if what else ""))
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        raise SkippedFile(f"damaged .{kind}: truncated or corrupt zip ({exc})",
                          incomplete=True) from exc
    if any(info.flag_bits & 0x1 for info in infos):
        raise SkippedFile(f"encrypted .{kind} (password-protected zip)")
    return archive


def check_unpacked(data: bytes, kind: str, limits: UnpackLimits) -> None:
    """Unpack every member of a zip container in bounded reads, counting the bytes it yields.

    Raises SkippedFile when the container unpacks past `limits.max_bytes`, when a member
    unpacking past RATIO_FLOOR does so at more than `limits.max_ratio` times its packed size,
    or when a member parsed as XML declares entities (an entity-expansion bomb). The sizes a zip
    declares are compared first (an early answer) but never trusted: the bytes are counted.
    Memory stays at one read buffer whatever the container holds.
    """
    with open_zip(data, kind) as archive:
        infos = [info for info in archive.infolist() if not info.is_dir()]
        declared = sum(info.file_size for info in infos)
        if declared > limits.max_bytes:
            raise SkippedFile(_too_large(kind, f"says it unpacks to {declared} bytes", limits))
        total = 0
        for info in infos:
            total += _check_member(archive, info, kind, limits, total)


def _check_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, kind: str,
                  limits: UnpackLimits, before: int) -> int:
    """Unpack one member in bounded reads against the limits; return how many bytes it held."""
    xml = info.filename.lower().endswith(_XML_SUFFIXES)
    packed = max(info.compress_size, 1)
    size = 0
    tail = b""
    with archive.open(info) as stream:
        while chunk := stream.read(_READ_SIZE):
            size += len(chunk)
            if before + size > limits.max_bytes:
                raise SkippedFile(_too_large(kind, f"unpacks past {before + size} bytes",
                                             limits))
            if size > RATIO_FLOOR and size > limits.max_ratio * packed:
                raise SkippedFile(
                    f"document bomb: {info.filename} in this .{kind} unpacks to more than "
                    f"{size // packed} times its packed size of {info.compress_size} bytes "
                    f"(limit {limits.max_ratio}: [ingest] max_compression_ratio)"
                )
            if xml and (_ENTITY in chunk or _ENTITY in tail + chunk[: len(_ENTITY) - 1]):
                raise SkippedFile(
                    f"refused .{kind}: {info.filename} declares XML entities "
                    "(an entity-expansion bomb?)"
                )
            tail = chunk[1 - len(_ENTITY):]
    return size


def _too_large(kind: str, what: str, limits: UnpackLimits) -> str:
    """The skip reason of a container unpacking past the byte limit."""
    return (f"document bomb: this .{kind} {what}, over the limit of {limits.max_bytes} "
            "([ingest] max_extracted_bytes)")


def read_member(archive: zipfile.ZipFile, name: str, kind: str) -> bytes:
    """Read one member of a zip container, raising SkippedFile when it is missing."""
    try:
        return archive.read(name)
    except KeyError:
        raise SkippedFile(f"damaged .{kind}: {name} is missing") from None


def ole_reason(data: bytes, kind: str) -> str:
    """Say why an OLE2 file cannot be read as a zip-based format: encrypted, or a legacy file."""
    if is_encrypted_ooxml(data):
        return f"encrypted .{kind} (password-protected)"
    legacy = _LEGACY.get(kind)
    if legacy:
        return f"damaged .{kind}: an OLE2 file (a legacy {legacy} file renamed?), not a zip"
    return f"damaged .{kind}: an OLE2 compound file, not a zip"


def is_encrypted_ooxml(data: bytes) -> bool:
    """Tell whether bytes are a password-protected Office file (an OLE2 EncryptedPackage)."""
    if not data.startswith(OLE_MAGIC):
        return False
    import olefile

    try:
        with olefile.OleFileIO(io.BytesIO(data)) as ole:
            return bool(ole.exists("EncryptionInfo") and ole.exists("EncryptedPackage"))
    except Exception:  # a probe only: any parse failure means "not an encrypted package"
        return False

"""Opening the containers formats live in (zip, OLE2), with skip reasons a person can act on."""

from __future__ import annotations

import io
import zipfile

from psirag_kb.errors import SkippedFile

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")

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
                          incomplete=True, damaged=True) from exc
    if any(info.flag_bits & 0x1 for info in infos):
        raise SkippedFile(f"encrypted .{kind} (password-protected zip)")
    return archive


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

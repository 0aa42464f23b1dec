"""What a file is, from its name and, when the name does not say, the first bytes of its content:
a known kind, a compressed document (the inner name decides), an archive or binary type that is
never read, or text to be recognised by its content."""

from __future__ import annotations

import re
from pathlib import PurePath

SNIFF_BYTES = 65536
"""Bytes of a file read to tell text from binary before anything else is read."""

COMPRESSIONS: dict[str, str] = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd"}
"""Single-file compression suffixes -> the format undone while reading."""

ARCHIVE_SUFFIXES = frozenset({
    ".zip", ".tar", ".tgz", ".tbz", ".tbz2", ".txz", ".tzst", ".taz", ".tlz", ".7z", ".rar",
    ".jar", ".war", ".ear", ".apk", ".deb", ".rpm", ".whl", ".egg", ".cab", ".iso", ".dmg",
    ".cpio", ".ar", ".snap", ".squashfs",
})
"""Archives of many files (or disk images): never unpacked; their files are not indexed."""

BINARY_SUFFIXES: dict[str, str] = {
    **dict.fromkeys((
        ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".ico", ".icns",
        ".heic", ".heif", ".avif", ".psd", ".xcf", ".svg", ".svgz", ".eps", ".raw", ".cr2",
        ".nef", ".dng", ".xpm", ".xbm", ".pbm", ".pgm", ".ppm",
    ), "an image"),
    **dict.fromkeys((
        ".mp3", ".wav", ".flac", ".ogg", ".oga", ".opus", ".m4a", ".aac", ".wma", ".mid",
        ".midi", ".mp4", ".m4v", ".mkv", ".avi", ".mov", ".webm", ".wmv", ".flv", ".mpg",
        ".mpeg", ".3gp",
    ), "audio or video"),
    **dict.fromkeys((
        ".exe", ".dll", ".dylib", ".o", ".a", ".obj", ".lib", ".bin", ".class", ".pyc",
        ".pyo", ".pyd", ".wasm", ".elf", ".efi", ".msi",
    ), "a program or library"),
    **dict.fromkeys((".ttf", ".otf", ".ttc", ".woff", ".woff2", ".eot", ".pfb", ".pcf"), "a font"),
    **dict.fromkeys((
        ".sqlite", ".sqlite3", ".duckdb", ".mdb", ".accdb", ".parquet", ".arrow",
        ".feather", ".npy", ".npz", ".pkl", ".pickle", ".h5", ".hdf5", ".onnx",
        ".safetensors", ".gguf", ".gpg", ".pgp", ".p12", ".pfx", ".der", ".kdbx",
    ), "binary data"),
    **dict.fromkeys((
        ".doc", ".xls", ".ppt", ".xlsb", ".odg", ".pages", ".key", ".numbers", ".vsd",
        ".pub", ".one", ".djvu", ".xps", ".mobi", ".azw", ".azw3", ".ps", ".dvi",
    ), "a document format that is not read"),
}
"""Suffixes of files that are never read as text, with what they are."""

_MAN_SUFFIX = re.compile(r"\.[1-9][a-z0-9]{0,6}$")
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"PK\x03\x04", "a zip archive"), (b"\x7fELF", "an ELF program"),
    (b"\x1f\x8b", "gzip-compressed data"), (b"BZh", "bzip2-compressed data"),
    (b"\xfd7zXZ\x00", "xz-compressed data"), (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    (b"SQLite format 3\x00", "an SQLite database"), (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"), (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an OLE2 file"),
)
_ROFF_START = re.compile(
    rb"\A(?:\xef\xbb\xbf)?"  # a BOM
    rb"(?:[ \t]*\n|[.']\\\".*\n|\.\s*(?:ig|de|so|ds|nr|if|ie|el)\b.*\n)*"  # comments, setup
    rb"\.\s*(?:TH|Dd|Dt)\s")


def compression_of(name: str) -> str | None:
    """The single-file compression a name's last suffix says (None when it says none)."""
    return COMPRESSIONS.get(PurePath(name).suffix.lower())


def archive_reason(name: str) -> str | None:
    """Why a name is an archive of many files that is not read (None when it is not one)."""
    suffixes = [s.lower() for s in PurePath(name).suffixes]
    last = suffixes[-1] if suffixes else ""
    if last in ARCHIVE_SUFFIXES or (len(suffixes) > 1 and suffixes[-2] == ".tar"
                                    and last in COMPRESSIONS):
        kind = "".join(suffixes[-2:]) if last in COMPRESSIONS else last
        return (f"archive of many files ({kind}): archives are not unpacked; unpack it into a "
                "watched folder to index its files")
    return None


def binary_reason(suffix: str) -> str | None:
    """Why a known binary suffix is never read as text (None when it is not one)."""
    what = BINARY_SUFFIXES.get(suffix.lower())
    return None if what is None else f"unsupported file type {suffix.lower()} ({what})"


def is_man_suffix(suffix: str) -> bool:
    """Whether a suffix is a manual page's section (.1, .8, .3pm, .1ssl)."""
    return bool(_MAN_SUFFIX.fullmatch(suffix.lower()))


def looks_like_roff(head: bytes) -> bool:
    """Whether content starts as a manual page does: `.TH` (man) or `.Dd` (mdoc), after comments."""
    return bool(_ROFF_START.match(head[:4096]))


def magic_reason(head: bytes) -> str | None:
    """What binary format a file's first bytes announce (None for none known)."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return f"binary content ({what})"
    return None

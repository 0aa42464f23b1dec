"""How far a document may unpack: zip members are inflated in bounded reads and counted before
any parser sees them, so a bomb is refused while memory stays at one read buffer."""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats.containers import open_zip

RATIO_FLOOR = 10_000_000
"""A member is judged by its compression ratio only once it unpacks past this many bytes."""
READ_SIZE = 1 << 20
"""Bytes of output per bounded read."""
_FEED_SIZE = 1 << 16
_ENTITY = b"<!ENTITY"
# Members the readers parse as XML (an SVG image, never parsed, may declare entities).
_XML_SUFFIXES = (".xml", ".rels", ".opf", ".ncx")
# A member that cannot be unpacked is left to the readers (an unused image may be damaged).
_MEMBER_ERRORS = (zipfile.BadZipFile, zlib.error, NotImplementedError, EOFError, OSError,
                  ValueError, struct.error)


@dataclass(frozen=True)
class UnpackLimits:
    """How far a document may unpack: in all, and per member relative to its packed size."""

    max_bytes: int = 200_000_000
    """Bytes all members (a PDF: all page streams) may unpack to ([ingest] max_extracted_bytes)."""
    max_ratio: int = 100
    """Unpacked / packed size a member past RATIO_FLOOR may reach ([ingest]
    max_compression_ratio)."""


def check_unpacked(data: bytes, kind: str, limits: UnpackLimits) -> None:
    """Inflate every member of a zip container in bounded reads, counting the bytes it yields.

    Raises SkippedFile when the container unpacks past `limits.max_bytes`, when a member
    unpacking past RATIO_FLOOR does so at more than `limits.max_ratio` times its packed size,
    when a deflated member holds more than its header says (zipfile would inflate it whole
    before cutting it to that size), or when a member parsed as XML declares entities (an
    entity-expansion bomb). The declared sizes give an early answer but are never trusted.
    """
    with open_zip(data, kind) as archive:
        infos = [info for info in archive.infolist() if not info.is_dir()]
        declared = sum(info.file_size for info in infos)
        if declared > limits.max_bytes:
            raise SkippedFile(_too_large(kind, f"says it unpacks to {declared} bytes", limits))
        total = 0
        for info in infos:
            counter = _Counter(info, kind, limits, total)
            try:
                for chunk in _pieces(data, archive, info):
                    counter.add(chunk)
            except _MEMBER_ERRORS:
                pass  # damaged: it unpacks no further for the readers either
            if info.compress_type == zipfile.ZIP_DEFLATED and counter.size > info.file_size:
                raise SkippedFile(
                    f"document bomb: {info.filename} in this .{kind} unpacks to more than the "
                    f"{info.file_size} bytes its header says (a forged zip header)"
                )
            total += counter.size


class _Counter:
    """Counts one member's unpacked bytes against the limits, looking for entity declarations."""

    def __init__(self, info: zipfile.ZipInfo, kind: str, limits: UnpackLimits,
                 before: int) -> None:
        self.info, self.kind, self.limits, self.before = info, kind, limits, before
        self.xml = info.filename.lower().endswith(_XML_SUFFIXES)
        self.size = 0
        self._tail = b""

    def add(self, chunk: bytes) -> None:
        """Count a piece of the member, raising SkippedFile past a limit."""
        self.size += len(chunk)
        total = self.before + self.size
        if total > self.limits.max_bytes:
            raise SkippedFile(_too_large(self.kind, f"unpacks past {total} bytes", self.limits))
        packed = max(self.info.compress_size, 1)
        if self.size > RATIO_FLOOR and self.size > self.limits.max_ratio * packed:
            raise SkippedFile(
                f"document bomb: {self.info.filename} in this .{self.kind} unpacks to more than "
                f"{self.size // packed} times its packed size of {self.info.compress_size} "
                f"bytes (limit {self.limits.max_ratio}: [ingest] max_compression_ratio)"
            )
        if self.xml and (_ENTITY in chunk or _ENTITY in self._tail + chunk[: len(_ENTITY) - 1]):
            raise SkippedFile(
                f"refused .{self.kind}: {self.info.filename} declares XML entities "
                "(an entity-expansion bomb?)"
            )
        self._tail = chunk[1 - len(_ENTITY):]


def _pieces(data: bytes, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """Yield a member's unpacked bytes in pieces of at most READ_SIZE.

    A deflated member is inflated from its packed bytes to their end, whatever size its header
    declares; other methods are read through zipfile (stored ones cannot grow).
    """
    if info.compress_type != zipfile.ZIP_DEFLATED:
        with archive.open(info) as stream:
            while chunk := stream.read(READ_SIZE):
                yield chunk
        return
    head = info.header_offset
    if data[head:head + 4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no local header for {info.filename}")
    name_length, extra_length = struct.unpack_from("<HH", data, head + 26)
    start = head + 30 + name_length + extra_length
    packed = memoryview(data)[start:start + info.compress_size]
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    for offset in range(0, len(packed), _FEED_SIZE):
        pending: bytes | memoryview = packed[offset:offset + _FEED_SIZE]
        while pending:
            chunk = inflater.decompress(pending, READ_SIZE)
            if chunk:
                yield chunk
            if inflater.eof:
                return
            pending = inflater.unconsumed_tail
    rest = inflater.flush()
    if rest:
        yield rest


def _too_large(kind: str, what: str, limits: UnpackLimits) -> str:
    """The skip reason of a container unpacking past the byte limit."""
    return (f"document bomb: this .{kind} {what}, over the limit of {limits.max_bytes} "
            "([ingest] max_extracted_bytes)")

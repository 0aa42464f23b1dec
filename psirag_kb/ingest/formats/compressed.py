"""Single-file compression (.gz, .bz2, .xz, .zst) undone in bounded blocks: the output is counted
as it comes, so a bomb is refused once it passes a limit, with memory at one block past it."""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats.bounds import RATIO_FLOOR, READ_SIZE, UnpackLimits

_FEED = 1 << 16


def zstd_available() -> bool:
    """Whether the optional zstandard package is installed (.zst files are read then)."""
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


def decompress(data: bytes, method: str, limits: UnpackLimits, max_bytes: int) -> bytes:
    """Undo one compression of a whole file, within `limits` and `max_bytes` of output.

    Raises SkippedFile when the output passes `max_bytes` (the file size limit: the inner file
    would be skipped as too large), passes `limits.max_bytes`, or passes RATIO_FLOOR at more
    than `limits.max_ratio` times the packed size (a bomb), and when the data is damaged (cut
    short data is `incomplete`, so a file still being written is retried).
    """
    if method == "zstd" and not zstd_available():
        raise SkippedFile("zstd-compressed file: install the zstandard package to read .zst")
    cap = min(max_bytes, limits.max_bytes)
    packed = max(len(data), 1)
    out = bytearray()
    try:
        for block in _blocks(data, method):
            out += block
            if len(out) > RATIO_FLOOR and len(out) > limits.max_ratio * packed:
                raise SkippedFile(
                    f"compression bomb: this {method} file unpacks to more than "
                    f"{len(out) // packed} times its packed size of {len(data)} bytes (limit "
                    f"{limits.max_ratio}: [ingest] max_compression_ratio)")
            if len(out) > cap:
                which = ("[ingest] max_file_bytes" if cap == max_bytes
                         else "[ingest] max_extracted_bytes")
                raise SkippedFile(f"compressed file unpacks past {cap} bytes ({which})")
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
        raise SkippedFile(f"damaged {method} data: {exc}", damaged=True) from exc
    except _zstd_errors() as exc:
        raise SkippedFile(f"damaged {method} data: {exc}", damaged=True) from exc
    return bytes(out)


def _zstd_errors() -> tuple[type[BaseException], ...]:
    """The zstandard package's error class, when it is installed."""
    try:
        import zstandard
    except ImportError:
        return ()
    return (zstandard.ZstdError,)


def _blocks(data: bytes, method: str) -> Iterator[bytes]:
    """Yield the decompressed bytes of every stream in `data` in blocks of at most READ_SIZE."""
    if method == "zstd":
        yield from _zstd_blocks(data)
        return
    factory = _DECOMPRESSORS[method]
    view = memoryview(data)
    start = 0
    while start < len(view):
        engine = factory()
        consumed: list[int] = []
        yield from _stream(engine, view[start:], method, consumed)
        start += consumed[0]
        if method == "gzip" and not bytes(view[start:start + 512]).strip(b"\x00"):
            break  # zero padding after the last member (tape blocks)


def _stream(engine: Any, data: memoryview, method: str, consumed: list[int]) -> Iterator[bytes]:
    """Yield one compressed stream's output, fed in pieces; append how many input bytes it took.

    Raises SkippedFile(incomplete) when the input ends before the stream does.
    """
    offset = 0
    while offset < len(data):
        piece: bytes | memoryview = data[offset:offset + _FEED]
        offset += len(piece)
        while True:
            chunk = engine.decompress(piece, READ_SIZE)
            piece = b""
            if chunk:
                yield chunk
            if engine.eof:
                consumed.append(offset - len(engine.unused_data))
                return
            if engine.needs_input:
                break
    raise SkippedFile(f"{method} data is cut short (truncated file)", incomplete=True)


def _zstd_blocks(data: bytes) -> Iterator[bytes]:
    """Yield a .zst file's output (all frames) through zstandard's bounded stream reader."""
    import io

    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data),
                                                        read_across_frames=True)
    with reader:
        while chunk := reader.read(READ_SIZE):
            yield chunk


class _Gzip:
    """zlib's gzip decoder with the needs_input/unused_data interface of bz2 and lzma."""

    def __init__(self) -> None:
        self._inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
        self._pending = b""

    def decompress(self, data: bytes | memoryview, max_length: int) -> bytes:
        """Inflate what was fed and is pending, at most `max_length` bytes."""
        source = self._pending + bytes(data) if self._pending else data
        out = self._inflater.decompress(source, max_length)
        self._pending = self._inflater.unconsumed_tail
        return out

    @property
    def needs_input(self) -> bool:
        """Whether everything fed so far is consumed."""
        return not self._pending and not self._inflater.eof

    @property
    def eof(self) -> bool:
        """Whether the member ended."""
        return self._inflater.eof

    @property
    def unused_data(self) -> bytes:
        """Bytes after the end of the member (the next member)."""
        return self._inflater.unused_data


_DECOMPRESSORS: dict[str, Callable[[], Any]] = {
    "gzip": _Gzip, "bzip2": bz2.BZ2Decompressor, "xz": lzma.LZMADecompressor,
}

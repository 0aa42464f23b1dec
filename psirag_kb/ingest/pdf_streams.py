"""Bounds on how far a PDF's compressed page streams unpack, checked before pypdf decodes them."""

from __future__ import annotations

import logging
import zlib
from typing import Any

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats.bounds import RATIO_FLOOR, UnpackLimits

logger = logging.getLogger(__name__)
_READ_SIZE = 1 << 20


class StreamBudget:
    """Counts the bytes a PDF's content and form streams inflate to, across its pages.

    Each page's streams are inflated in bounded reads (never held) before its text is
    extracted: a PDF whose streams add up past `limits.max_bytes`, or with a stream inflating
    past RATIO_FLOOR at more than `limits.max_ratio` times its packed size, is skipped. pypdf
    keeps a decoded stream for the reader's life, so a few pages of bombs would add up.
    """

    def __init__(self, limits: UnpackLimits) -> None:
        self.limits = limits
        self.total = 0
        self._seen: set[int] = set()

    def check_page(self, page: Any, number: int) -> None:
        """Inflate a page's content streams and the form XObjects it draws, within the limits."""
        try:
            for stream in _page_streams(page, self._seen):
                self._check(stream, number)
        except SkippedFile:
            raise
        except Exception:  # noqa: BLE001 - a malformed page is pypdf's to report, not a bomb
            logger.debug("PDF page %d: streams not checked", number, exc_info=True)

    def _check(self, stream: Any, number: int) -> None:
        """Inflate one FlateDecode stream in bounded reads, counting its bytes."""
        raw = getattr(stream, "_data", b"") or b""
        if not raw or not _flate_first(stream):
            return
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)
        size = 0
        pending = raw
        while True:
            try:
                out = inflater.decompress(pending, _READ_SIZE)
            except zlib.error:
                return  # damaged data: pypdf reports it for this page
            size += len(out)
            self.total += len(out)
            if self.total > self.limits.max_bytes:
                raise SkippedFile(
                    f"document bomb: this PDF's page streams unpack past {self.total} bytes "
                    f"(page {number}), over the limit of {self.limits.max_bytes} "
                    "([ingest] max_extracted_bytes)"
                )
            if size > RATIO_FLOOR and size > self.limits.max_ratio * len(raw):
                raise SkippedFile(
                    f"document bomb: a stream of page {number} of this PDF unpacks to more than "
                    f"{size // len(raw)} times its packed size of {len(raw)} bytes "
                    f"(limit {self.limits.max_ratio}: [ingest] max_compression_ratio)"
                )
            pending = inflater.unconsumed_tail
            if inflater.eof or (not out and not pending):
                return


def _flate_first(stream: Any) -> bool:
    """Whether a stream's outermost filter is FlateDecode."""
    filters = stream.get("/Filter")
    if isinstance(filters, list | tuple):
        filters = filters[0] if filters else None
    return filters in ("/FlateDecode", "/Fl")


def _page_streams(page: Any, seen: set[int]) -> list[Any]:
    """A page's content streams and its form XObjects' streams, nested forms included, each
    once per document (`seen` holds the ids of those already counted)."""
    found: list[Any] = []
    contents = page.get("/Contents")
    contents = contents.get_object() if contents is not None else None
    items = contents if isinstance(contents, list) else [contents] if contents else []
    for item in items:
        _add(item.get_object(), seen, found)
    forms = [page.get("/Resources")]
    while forms:
        resources = forms.pop()
        resources = resources.get_object() if resources is not None else None
        xobjects = resources.get("/XObject") if resources else None
        xobjects = xobjects.get_object() if xobjects is not None else None
        for value in (xobjects or {}).values():
            form = value.get_object()
            if form.get("/Subtype") == "/Form" and _add(form, seen, found):
                forms.append(form.get("/Resources"))
    return found


def _add(stream: Any, seen: set[int], found: list[Any]) -> bool:
    """Add a stream not counted before; tell whether it was new."""
    if id(stream) in seen:
        return False
    seen.add(id(stream))
    found.append(stream)
    return True

"""PDF text page by page with pypdf; pages without a text layer are read by tesseract OCR.

A scanned page is a page whose only content is an image: pypdf finds no text on it but lists the
image, which is handed to tesseract (through pytesseract) when it is on the PATH. Without it such
pages are counted, and the file's reason says how many need OCR.
"""

from __future__ import annotations

import io
import logging
import shutil
from dataclasses import dataclass, field
from typing import Any

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats.bounds import UnpackLimits
from psirag_kb.ingest.pdf_streams import StreamBudget

logger = logging.getLogger(__name__)

OCR_TIMEOUT_S = 120
"""Seconds tesseract may spend on one page image before the page is given up."""
AWAITS_OCR = "OCR (no text layer"
"""Part of every reason that says pages were left unread for want of OCR (see `awaits_ocr`)."""
INSTALL_HINT = "install tesseract (apt-get install tesseract-ocr) to read"
OFF_HINT = "OCR is off ([ingest] ocr = false); turn it on to read"


@dataclass
class PdfText:
    """A PDF's text, each page's start offset, and what happened to pages without text."""

    text: str
    pages: list[int]
    page_count: int
    unread: list[int] = field(default_factory=list)
    """1-based numbers of pages with an image but no text layer, not read by OCR."""
    ocr_pages: list[int] = field(default_factory=list)
    """Pages whose text came from OCR."""
    ocr_failed: list[str] = field(default_factory=list)
    """Why OCR failed on some pages ("page 4: ...")."""
    ocr: bool = False
    """Whether OCR was available for this read."""
    title: str = ""
    """The title in the PDF's document information ("" when it has none)."""


def tesseract_ready(enabled: bool) -> bool:
    """Tell whether OCR can run: enabled in config, tesseract on the PATH and pytesseract here."""
    if not enabled or shutil.which("tesseract") is None:
        return False
    try:
        import pytesseract  # noqa: F401
    except ImportError:
        return False
    return True


def awaits_ocr(reason: str) -> bool:
    """Tell whether a file's reason says some of its pages were left for OCR to read."""
    return AWAITS_OCR in reason


def read_pdf(data: bytes, *, ocr: bool = True, limits: UnpackLimits | None = None) -> PdfText:
    """Extract each page's text (OCR for image-only pages when `ocr` and tesseract allow it).

    Raises SkippedFile for an unparsable or encrypted PDF, for one with no text at all, and
    for one whose page streams unpack past `limits` (UnpackLimits() by default).
    """
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _decrypt(reader):
            raise SkippedFile("PDF is encrypted (no password available)")
        pages = list(reader.pages)
    except SkippedFile:
        raise
    except Exception as exc:  # pypdf raises many kinds of errors on malformed input
        raise SkippedFile(f"PDF could not be parsed: {exc}", damaged=True) from exc
    budget = StreamBudget(limits or UnpackLimits())
    for number, page in enumerate(pages, start=1):  # before pypdf decodes (and keeps) any
        budget.check_page(page, number)
    result = PdfText("", [], len(pages), ocr=tesseract_ready(ocr), title=_title(reader))
    parts: list[str] = []
    offset = 0
    for number, page in enumerate(pages, start=1):
        page_text = _page_text(page, number)
        if not page_text and _image_count(page, number):
            page_text = _ocr_page(page, number, result) if result.ocr else ""
            if not result.ocr:
                result.unread.append(number)
        result.pages.append(offset)
        parts.append(page_text)
        offset += len(page_text) + 2
    result.text = "\n\n".join(parts)
    if not result.text.strip():
        raise SkippedFile(_empty_reason(result, ocr))
    return result


def _title(reader: Any) -> str:
    """The document information's title ("" when it is missing or unreadable)."""
    try:
        info = reader.metadata
        return " ".join(str(info.title or "").split()) if info is not None else ""
    except Exception:  # noqa: BLE001 - a broken info dictionary must not lose the text
        return ""


def ocr_note(pdf: PdfText, enabled: bool) -> str:
    """A partly read PDF's note for status ("3 of 10 pages need OCR ..."), else ""."""
    notes = []
    if pdf.unread:
        hint = INSTALL_HINT if enabled else OFF_HINT
        count = len(pdf.unread)
        notes.append(f"{count} of {pdf.page_count} page{'s' if pdf.page_count != 1 else ''} "
                     f"{'needs' if count == 1 else 'need'} {AWAITS_OCR}); {hint} "
                     f"{'it' if count == 1 else 'them'}")
    if pdf.ocr_failed:
        notes.append("OCR failed on " + "; ".join(pdf.ocr_failed[:3]))
    return "; ".join(notes)


def _empty_reason(pdf: PdfText, enabled: bool) -> str:
    """Why a PDF without any text is skipped: it needs OCR, OCR found nothing, or it is blank."""
    if pdf.unread:
        hint = INSTALL_HINT if enabled else OFF_HINT
        return (f"needs {AWAITS_OCR} on any of its {pdf.page_count} page(s): a scanned PDF?); "
                f"{hint} it")
    if pdf.ocr_failed:
        return "no extractable text: OCR failed on " + "; ".join(pdf.ocr_failed[:3])
    if pdf.ocr_pages:
        return "no extractable text: its pages are images in which OCR found no text"
    return "no extractable text (no text layer and no images)"


def _page_text(page: Any, number: int) -> str:
    """One page's text layer, normalised ("" when it has none or extraction fails)."""
    try:
        text = page.extract_text() or ""
    except Exception as exc:  # one broken page should not lose the others
        logger.warning("PDF page %d: text extraction failed: %s", number, exc)
        return ""
    return _clean(text)


def _clean(text: str) -> str:
    """Drop NULs and form feeds, turn CR line ends into LF, strip the ends."""
    text = text.replace("\x00", "").replace("\x0c", "\n")
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def _image_count(page: Any, number: int) -> int:
    """How many images a page draws (listed without decoding them); 0 when they cannot be."""
    try:
        return len(page.images)
    except Exception as exc:  # a malformed resource dictionary
        logger.debug("PDF page %d: images not listed: %s", number, exc)
        return 0


def _ocr_page(page: Any, number: int, result: PdfText) -> str:
    """Read a page's images with tesseract, recording the page as read by OCR or its failure."""
    import pytesseract

    texts = []
    try:
        for image in page.images:
            picture = image.image
            if picture is None:
                continue
            texts.append(_clean(pytesseract.image_to_string(picture, timeout=OCR_TIMEOUT_S)))
    except Exception as exc:  # an undecodable image, a tesseract error or timeout: this page only
        logger.warning("PDF page %d: OCR failed: %s", number, exc)
        result.ocr_failed.append(f"page {number}: {' '.join(str(exc).split())[:120]}")
        return ""
    result.ocr_pages.append(number)
    return "\n".join(t for t in texts if t)


def _decrypt(reader: Any) -> bool:
    """Try to open an encrypted PDF with the empty password; tell whether that worked."""
    try:
        return bool(reader.decrypt(""))
    except Exception:  # missing crypto backend or unsupported algorithm
        return False

"""Document bombs built from real fixtures: one member padded with spaces, written streaming."""

from __future__ import annotations

import zipfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "docs"
MB = 1 << 20

# A fixture of every zip-based kind and the member of it that is padded.
TEMPLATES: dict[str, tuple[str, str]] = {
    "docx": ("testWORD.docx", "word/document.xml"),
    "pptx": ("testPPT.pptx", "ppt/slides/slide2.xml"),
    "xlsx": ("testEXCEL.xlsx", "xl/worksheets/sheet1.xml"),
    "odt": ("example.odt", "content.xml"),
    "odp": ("example.odp", "content.xml"),
    "ods": ("countrystatistics.ods", "content.xml"),
    "epub": ("testEPUB.epub", "OPS/chapters/chapter2.html"),
}

LAUGHS = (
    b'<!DOCTYPE lolz [<!ENTITY lol "lol">'
    + b"".join(
        b'<!ENTITY lol%d "%s">' % (n, (b"&lol%d;" % (n - 1) if n > 1 else b"&lol;") * 10)
        for n in range(1, 10)
    )
    + b"]>"
)
"""A document type declaration whose entities expand to a billion "lol"s (billion laughs)."""


def write_bomb(target: Path, kind: str, padding: int, *, prolog: bytes = b"",
               member: str | None = None) -> Path:
    """Copy the fixture of `kind` to `target` with `padding` spaces (and `prolog`, e.g. LAUGHS)
    inserted after the XML declaration of its main member; memory stays at one 1 MB block."""
    template, main = TEMPLATES[kind]
    member = member or main
    with zipfile.ZipFile(FIXTURES / template) as source, zipfile.ZipFile(target, "w") as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename != member:
                out.writestr(info, data)
                continue
            cut = data.index(b"?>") + 2 if data.startswith(b"<?xml") else 0
            padded = zipfile.ZipInfo(member, date_time=info.date_time)
            padded.compress_type = zipfile.ZIP_DEFLATED
            with out.open(padded, "w", force_zip64=padding > 1 << 30) as stream:
                stream.write(data[:cut] + prolog)
                block = b" " * MB
                left = padding
                while left > 0:
                    stream.write(block[: min(left, MB)])
                    left -= MB
                stream.write(data[cut:])
    return target


def write_pdf_bomb(target: Path, pages: int, padding: int, *, sentence: str = "") -> Path:
    """A PDF of `pages` pages, each saying `sentence` in a FlateDecode content stream padded
    with `padding` spaces (compressed block by block: memory stays at one 1 MB block)."""
    import zlib

    from pypdf import PdfWriter
    from pypdf.generic import DictionaryObject, NameObject, NumberObject, StreamObject

    writer = PdfWriter()
    font = writer._add_object(DictionaryObject({
        NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica"),
    }))
    for number in range(1, pages + 1):
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject(
            {NameObject("/F1"): font})})
        packer = zlib.compressobj(9)
        text = f"{sentence} (page {number})" if sentence else ""
        parts = [packer.compress(b"BT /F1 12 Tf 72 720 Td (%s) Tj ET\n" % text.encode("latin-1"))]
        block = b" " * MB
        left = padding
        while left > 0:
            parts.append(packer.compress(block[: min(left, MB)]))
            left -= MB
        parts.append(packer.flush())
        stream = StreamObject()
        stream._data = b"".join(parts)
        stream[NameObject("/Filter")] = NameObject("/FlateDecode")
        stream[NameObject("/Length")] = NumberObject(len(stream._data))
        page[NameObject("/Contents")] = writer._add_object(stream)
    with open(target, "wb") as handle:
        writer.write(handle)
    return target

"""EPUB 2/3 e-books read with the standard library: the package's spine, chapter by chapter.

Locations are {"section": "<chapter file in the book>", "paragraph": n, "heading": h}, the
paragraph counted within that chapter file.
"""

from __future__ import annotations

import logging
import posixpath
import re
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import replace
from urllib.parse import unquote, urlsplit

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats import Extracted
from psirag_kb.ingest.formats.builder import TextBuilder
from psirag_kb.ingest.formats.containers import open_zip, read_member
from psirag_kb.ingest.formats.flow import FlowWriter
from psirag_kb.ingest.formats.htmlblocks import html_blocks

logger = logging.getLogger(__name__)

_HTML_TYPES = frozenset({"application/xhtml+xml", "text/html", "application/xml", "text/xml"})
# Font obfuscation is "encryption" in encryption.xml that does not hide any text.
_FONT_OBFUSCATION = frozenset(
    {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
)
_XML_ENCODING = re.compile(rb"""^<\?xml[^>]*encoding=["']([A-Za-z0-9._-]+)["']""")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([A-Za-z0-9._-]+)""", re.I)


def read_epub(data: bytes, kind: str = "epub") -> Extracted:
    """Read an EPUB's chapters in reading order with section/paragraph/heading locations."""
    with open_zip(data, kind) as archive:
        opf_path = _package_path(archive, kind)
        package = ET.fromstring(read_member(archive, opf_path, kind))
        base = posixpath.dirname(opf_path)
        manifest = {
            item.get("id"): (item.get("href") or "", item.get("media-type") or "")
            for item in _children(package, "manifest", "item")
        }
        spine = [ref.get("idref") for ref in _children(package, "spine", "itemref")]
        if not spine:
            raise SkippedFile(f"damaged .{kind}: the package lists no chapters (empty spine)")
        encrypted = _encrypted_paths(archive)
        builder = TextBuilder()
        writer = FlowWriter(builder)
        for idref in spine:
            href, media_type = manifest.get(idref, ("", ""))
            if not href or media_type not in _HTML_TYPES:
                continue
            href = unquote(urlsplit(href).path)
            path = posixpath.normpath(posixpath.join(base, href))
            if path in encrypted:
                raise SkippedFile(f"encrypted .{kind} (DRM-protected)")
            try:
                page = archive.read(path)
            except KeyError:
                logger.debug("epub: chapter %s listed but missing", path)
                continue
            writer.section({"section": href})
            for block in html_blocks(_decode(page)):
                if block.rows:
                    writer.table(block.rows)
                elif block.level:
                    writer.heading(block.text, block.level)
                else:
                    writer.paragraph(block.text)
        return replace(builder.build(), title=_book_title(package))


def _local(tag: str) -> str:
    """Return an XML tag's name without its namespace."""
    return tag.rsplit("}", 1)[-1]


def _children(root: ET.Element, parent: str, child: str) -> list[ET.Element]:
    """Return the <child> elements of the first <parent> element, whatever their namespace."""
    for element in root.iter():
        if _local(element.tag) == parent:
            return [c for c in element if _local(c.tag) == child]
    return []


def _book_title(package: ET.Element) -> str:
    """The book's first dc:title in the package metadata ("" when it has none)."""
    for element in package.iter():
        if _local(element.tag) == "title" and (element.text or "").strip():
            return " ".join(str(element.text).split())
    return ""


def _package_path(archive: zipfile.ZipFile, kind: str) -> str:
    """Find the package (.opf) document through META-INF/container.xml, or by its suffix."""
    try:
        container = ET.fromstring(archive.read("META-INF/container.xml"))
    except KeyError:
        container = None
    if container is not None:
        for element in container.iter():
            if _local(element.tag) == "rootfile" and element.get("full-path"):
                return str(element.get("full-path"))
    names = [n for n in archive.namelist() if n.lower().endswith(".opf")]
    if not names:
        raise SkippedFile(f"damaged .{kind}: no package document (META-INF/container.xml, .opf)")
    return names[0]


def _encrypted_paths(archive: zipfile.ZipFile) -> set[str]:
    """Return the members META-INF/encryption.xml says are encrypted (fonts' obfuscation aside)."""
    try:
        root = ET.fromstring(archive.read("META-INF/encryption.xml"))
    except KeyError:
        return set()
    paths = set()
    for data in root.iter():
        if _local(data.tag) != "EncryptedData":
            continue
        method = next((e for e in data.iter() if _local(e.tag) == "EncryptionMethod"), None)
        if method is not None and method.get("Algorithm") in _FONT_OBFUSCATION:
            continue
        for ref in data.iter():
            if _local(ref.tag) == "CipherReference" and ref.get("URI"):
                paths.add(posixpath.normpath(unquote(str(ref.get("URI")))))
    return paths


def _decode(page: bytes) -> str:
    """Decode a chapter by its BOM, XML declaration or meta charset (UTF-8 otherwise)."""
    if page.startswith(b"\xef\xbb\xbf"):
        return page[3:].decode("utf-8", "replace")
    if page.startswith((b"\xff\xfe", b"\xfe\xff")):
        return page.decode("utf-16", "replace")
    match = _XML_ENCODING.match(page) or _META_CHARSET.search(page[:2048])
    encoding = match.group(1).decode("ascii") if match else "utf-8"
    try:
        return page.decode(encoding, "replace")
    except LookupError:
        return page.decode("utf-8", "replace")

"""E-mail: .eml (stdlib email) and Outlook .msg (OLE2 read with olefile, MAPI properties).

The text is the header fields (From, To, Cc, Date, Subject) as {"part": "header"}, the body
(text/plain preferred, HTML reduced to its visible text) as {"part": "body"}, and the names of
the attachments (not their content) as {"part": "attachments"}.
"""

from __future__ import annotations

import codecs
import datetime as dt
import email
import email.policy
import email.utils
import io
import struct
from dataclasses import replace
from email.message import EmailMessage
from typing import Any

from psirag_kb.errors import SkippedFile
from psirag_kb.ingest.formats import Extracted
from psirag_kb.ingest.formats.builder import TextBuilder, one_line
from psirag_kb.ingest.formats.containers import OLE_MAGIC, describe_content
from psirag_kb.ingest.formats.htmlblocks import html_blocks

_HEADER_FIELDS = ("From", "To", "Cc", "Date", "Subject")
LONGEST_HEADER = 8192
"""Characters of a header field's value that are parsed: the stdlib's structured parser takes
time quadratic in a value's length (a 2 MB From field of a hostile file took minutes)."""


class _BoundedPolicy(email.policy.EmailPolicy):
    """The default policy, with header values cut to LONGEST_HEADER before they are parsed."""

    def header_fetch_parse(self, name: str, value: Any) -> Any:
        """Parse a header's value as the default policy does, at most LONGEST_HEADER of it."""
        if isinstance(value, str) and len(value) > LONGEST_HEADER:
            value = value[:LONGEST_HEADER]
        return super().header_fetch_parse(name, value)


_POLICY = _BoundedPolicy()


def read_eml(data: bytes, kind: str = "eml") -> Extracted:
    """Read a MIME message: header fields, the preferred body, attachment names."""
    message: EmailMessage = email.message_from_bytes(  # type: ignore[assignment]
        data, policy=_POLICY  # type: ignore[arg-type]  # an EmailPolicy subclass
    )
    headers = {name: _header(message, name) for name in _HEADER_FIELDS}
    if not any(headers.values()) and not message.get("Message-ID"):
        what = describe_content(data)
        raise SkippedFile(f"damaged .{kind}: no mail header fields" + (f" (it is {what})"
                                                                         if what else ""))
    body = ""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is not None:
        body = _part_text(part)
        if part.get_content_subtype() == "html":
            body = visible_text(body)
    attachments = []
    for attachment in message.iter_attachments():
        name = attachment.get_filename() or ""
        if not name and attachment.get_content_type() == "message/rfc822":
            inner = attachment.get_payload()
            inner = inner[0] if isinstance(inner, list) and inner else inner
            name = _header(inner, "Subject") if hasattr(inner, "get") else ""
        attachments.append(one_line(name) or f"(unnamed {attachment.get_content_type()})")
    return _compose(headers, body, attachments)


def _header(message: Any, name: str) -> str:
    """Return a header field decoded to one line ("" when absent or unparseable)."""
    try:
        value = message.get(name)
    except Exception:  # a malformed header value is reported as a defect, not a failure
        return ""
    return one_line(str(value)) if value is not None else ""


def _part_text(part: Any) -> str:
    """Return a text part's content, decoding with replacement when its charset is wrong."""
    try:
        content = part.get_content()
        if isinstance(content, str):
            return content
    except (LookupError, UnicodeError, ValueError, AssertionError):
        pass
    payload = part.get_payload(decode=True) or b""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset, "replace")
    except LookupError:
        return payload.decode("utf-8", "replace")


def visible_text(html: str) -> str:
    """Reduce an HTML body to its visible text, one block per paragraph, table rows as lines."""
    lines = []
    for block in html_blocks(html):
        if block.rows:
            lines.append("\n".join(" | ".join(c for c in row if c) for row in block.rows))
        else:
            lines.append(block.text)
    return "\n\n".join(lines)


def _compose(headers: dict[str, str], body: str, attachments: list[str]) -> Extracted:
    """Build the text of a mail from its header fields, body and attachment names."""
    builder = TextBuilder()
    header_text = "\n".join(f"{name}: {value}" for name, value in headers.items() if value)
    builder.add(header_text, {"part": "header"})
    builder.add(body, {"part": "body"})
    if attachments:
        builder.add("Attachments: " + ", ".join(attachments), {"part": "attachments"})
    return replace(builder.build(), title=headers.get("Subject", ""))


# MAPI property ids (MS-OXPROPS) read from a .msg file.
_SUBJECT, _SENDER_NAME, _SENDER_EMAIL, _SENDER_SMTP = 0x0037, 0x0C1A, 0x0C1F, 0x5D01
_DISPLAY_TO, _DISPLAY_CC, _BODY, _HTML, _HEADERS = 0x0E04, 0x0E03, 0x1000, 0x1013, 0x007D
_SUBMIT_TIME, _DELIVERY_TIME, _CODEPAGE, _INTERNET_CPID = 0x0039, 0x0E06, 0x3FFD, 0x3FDE
_ATTACH_LONG_NAME, _ATTACH_NAME, _ATTACH_DISPLAY = 0x3707, 0x3704, 0x3001
_CODEPAGES = {1200: "utf-16-le", 20127: "ascii", 28591: "latin-1", 65001: "utf-8",
              50220: "iso2022_jp", 51932: "euc_jp", 54936: "gb18030", 20866: "koi8_r",
              21866: "koi8_u", 936: "gbk"}


def read_msg(data: bytes, kind: str = "msg") -> Extracted:
    """Read an Outlook message: sender, recipients, date, subject, body, attachment names."""
    if not data.startswith(OLE_MAGIC):
        what = describe_content(data)
        raise SkippedFile(f"damaged .{kind}: not an Outlook message" + (f" (it is {what})"
                                                                        if what else ""))
    import olefile

    with olefile.OleFileIO(io.BytesIO(data)) as ole:
        if not ole.exists("__properties_version1.0"):
            raise SkippedFile(f"damaged .{kind}: an OLE2 file but not an Outlook message")
        message = _MsgReader(ole)
        sender = message.string(_SENDER_NAME)
        address = message.string(_SENDER_SMTP) or message.string(_SENDER_EMAIL)
        if address and "@" in address and address != sender:
            sender = f"{sender} <{address}>" if sender else address
        transport = email.message_from_string(message.string(_HEADERS) or "",
                                              policy=_POLICY)
        headers = {
            "From": sender or _header(transport, "From"),
            "To": message.string(_DISPLAY_TO) or _header(transport, "To"),
            "Cc": message.string(_DISPLAY_CC) or _header(transport, "Cc"),
            "Date": _header(transport, "Date") or message.date(),
            "Subject": message.string(_SUBJECT) or _header(transport, "Subject"),
        }
        body = message.string(_BODY)
        if not body.strip():
            html = message.string(_HTML, html=True)
            body = visible_text(html) if html else ""
        attachments = message.attachment_names()
    headers = {name: one_line(value) for name, value in headers.items()}
    return _compose(headers, body, attachments)


class _MsgReader:
    """Reads MAPI properties of an Outlook message from its OLE2 streams."""

    def __init__(self, ole: Any) -> None:
        self._ole = ole
        self._fixed = _fixed_properties(ole.openstream("__properties_version1.0").read(), 32)
        codepage = self._fixed.get(_CODEPAGE) or self._fixed.get(_INTERNET_CPID)
        self._encoding = _encoding(int.from_bytes(codepage[:4], "little") if codepage else 1252)

    def _stream(self, name: str) -> bytes | None:
        """Return a stream's bytes, or None when the message does not have it."""
        return self._ole.openstream(name).read() if self._ole.exists(name) else None

    def string(self, prop: int, *, html: bool = False, storage: str = "") -> str:
        """Return a string property (Unicode, 8-bit, or binary for an HTML body), "" if absent."""
        prefix = f"{storage}/" if storage else ""
        raw = self._stream(f"{prefix}__substg1.0_{prop:04X}001F")
        if raw is not None:
            return raw.decode("utf-16-le", "replace").rstrip("\x00")
        for suffix in ("001E", "0102") if html else ("001E",):
            raw = self._stream(f"{prefix}__substg1.0_{prop:04X}{suffix}")
            if raw is not None:
                encoding = self._encoding
                if html:
                    cpid = self._fixed.get(_INTERNET_CPID)
                    encoding = _encoding(int.from_bytes(cpid[:4], "little")) if cpid else encoding
                return raw.decode(encoding, "replace").rstrip("\x00")
        return ""

    def date(self) -> str:
        """Return the sent (or else delivered) time as an RFC 2822 date, "" when unknown."""
        for prop in (_SUBMIT_TIME, _DELIVERY_TIME):
            value = self._fixed.get(prop)
            if value:
                ticks = int.from_bytes(value, "little")
                try:
                    when = dt.datetime(1601, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
                        microseconds=ticks // 10
                    )
                except OverflowError:
                    continue
                return email.utils.format_datetime(when)
        return ""

    def attachment_names(self) -> list[str]:
        """Return the attachments' file names (or display names), in order."""
        storages = sorted(
            {entry[0] for entry in self._ole.listdir(streams=True, storages=True)
             if entry and entry[0].startswith("__attach_version1.0_#")}
        )
        names = []
        for storage in storages:
            name = (self.string(_ATTACH_LONG_NAME, storage=storage)
                    or self.string(_ATTACH_NAME, storage=storage)
                    or self.string(_ATTACH_DISPLAY, storage=storage))
            names.append(one_line(name) or "(unnamed attachment)")
        return names


def _fixed_properties(stream: bytes, header: int) -> dict[int, bytes]:
    """Return the fixed-size property values (id -> 8 bytes) of a __properties stream."""
    values = {}
    for offset in range(header, len(stream) - 15, 16):
        tag, _flags = struct.unpack_from("<II", stream, offset)
        values[tag >> 16] = stream[offset + 8 : offset + 16]
    return values


def _encoding(codepage: int) -> str:
    """Return the Python codec for a Windows code page number (cp1252 when unknown)."""
    name = _CODEPAGES.get(codepage)
    if name is None and 28592 <= codepage <= 28605:
        name = f"iso8859_{codepage - 28590}"
    name = name or f"cp{codepage}"
    try:
        codecs.lookup(name)
    except LookupError:
        return "cp1252"
    return name

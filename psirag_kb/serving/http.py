"""uvicorn's HTTP/1.1 protocol with JSON errors, a deadline for request heads, a connection cap."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 65_536
"""A request line or header block beyond this is refused (414 or 431)."""


def header(scope: Mapping[str, Any], name: bytes) -> str | None:
    """A request header's value from an ASGI scope (`name` in lower case), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def error_bytes(status: int, reason: str, message: str) -> bytes:
    """A complete HTTP/1.1 response with a JSON error body that closes the connection."""
    body = json.dumps({"error": message}).encode("utf-8")
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("latin-1") + body


class JSONProtocol(H11Protocol):
    """Every answer is JSON, a silent or slow client is let go, and connections are capped.

    `head_timeout_s` bounds how long a connection may take to send a complete request head;
    `max_connections` refuses connections beyond it with a 503.
    """

    head_timeout_s: float = 30.0
    max_connections: int = 256

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._error: h11.RemoteProtocolError | None = None
        self._peer_eof = False
        self._head_timer: asyncio.TimerHandle | None = None
        next_event = self.conn.next_event

        def remembered() -> Any:
            try:
                return next_event()
            except h11.RemoteProtocolError as exc:
                self._error = exc
                raise

        self.conn.next_event = remembered  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            log.warning("refusing a connection: %d open", len(self.connections))
            transport.write(error_bytes(503, "Service Unavailable",
                                        f"more than {self.max_connections} open connections; "
                                        "retry shortly"))
            transport.close()
            return
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()  # nothing (or half a head) arrived in time: let it go

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._cancel_head_timer()

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio's signature
        """The client ended its side: answer what it sent in full, then close."""
        if self.conn.their_state is h11.SEND_BODY:
            self.conn.receive_data(b"")  # h11 refuses the short body: send_400_response
            self.handle_events()
            return True
        if self.cycle is not None and not self.cycle.response_complete:
            self._peer_eof = True
            return True
        return None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self._peer_eof and self.conn.their_state is h11.IDLE:
            self.transport.close()  # nothing more can come
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """Answer a request h11 refused with a JSON error and the status it deserves."""
        error = self._error
        status, reason, message = 400, "Bad Request", "malformed HTTP request"
        if error is not None:
            status = error.error_status_hint or 400
            text = str(error)
            if status == 431 or "too long" in text.lower():
                head = bytes(self.conn.trailing_data[0][:MAX_HEAD_BYTES + 2])
                if b"\r\n" not in head and b"\n" not in head:
                    status, reason, message = 414, "URI Too Long", "the request line is too long"
                else:
                    status, reason = 431, "Request Header Fields Too Large"
                    message = "the request headers are too large"
            elif (short := re.search(r"received (\d+) bytes, expected (\d+)", text)):
                message = f"the body ended after {short[1]} of {short[2]} bytes"
            elif "content-length" in text.lower():
                message = "invalid Content-Length"
            elif "transfer-encoding" in text.lower():
                status, reason = 411, "Length Required"
                message = "send the body with a Content-Length, not chunked"
            else:
                message = f"malformed HTTP request ({text})"
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self.transport.write(error_bytes(status, reason, message))
            self.transport.close()

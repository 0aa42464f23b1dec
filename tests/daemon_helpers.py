"""Helpers for tests that drive a running daemon: polling with a deadline, JSON over HTTP."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0) -> Any:
    """Poll until the predicate holds; fail at the deadline."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"condition not met before the deadline (last value {last!r})")


def api(daemon: Any, method: str, path: str, body: Any = None,
        token: str | None = None) -> tuple[int, dict[str, Any]]:
    """One JSON request to a daemon's API with its token (unless one is given; "" sends none):
    (status, decoded body), errors included."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(daemon.api.url + path, data=data, method=method)
    token = daemon.api.token if token is None else token
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())

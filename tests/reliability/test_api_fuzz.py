"""Hostile and broken HTTP against a real running daemon: every answer is JSON, nothing breaks it.

One daemon (fake embedder, real stores and watcher) serves the whole module over real sockets;
the requests are built by hand (http.client, raw bytes) so nothing is cleaned up on the way.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder
from daemon_helpers import wait_for

from psirag_kb.config import Config
from psirag_kb.service import endpoints as endpoints_module
from psirag_kb.service.daemon import Daemon
from psirag_kb.serving import thread as thread_module

MAX_BODY = 100_000
HANDLER_TIMEOUT_S = 1.0
"""How long a client may take over a request head or body in this module (the product: 30 s)."""
TOKEN = "fuzz-token-" + "f" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NOTES = {
    "zebra.md": "Zebras graze on the savanna at dawn.\n",
    "penguin.md": "Penguins huddle against the antarctic wind.\n",
    "okapi.md": "Okapis hide in the Ituri rainforest.\n",
}


class Served:
    """The running daemon, its folders and a way to talk to it."""

    def __init__(self, daemon: Daemon, docs: Path, outside: Path) -> None:
        self.daemon, self.docs, self.outside = daemon, docs, outside
        self.host, self.port = "127.0.0.1", daemon.api.server_address[1]

    def call(self, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        """One request over a fresh connection (with the token unless `headers` are given);
        the status and the JSON body (checked)."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=20)
        try:
            connection.request(method, path, body=body,
                               headers=AUTH if headers is None else headers)
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        if method == "HEAD":
            assert data == b""
            return response.status, {}
        assert response.getheader("Content-Type", "").startswith("application/json"), data
        return response.status, json.loads(data)

    def post(self, path: str, payload: Any) -> tuple[int, dict[str, Any]]:
        return self.call("POST", path, json.dumps(payload).encode(),
                         {"Content-Type": "application/json", **AUTH})

    def raw(self, data: bytes, half_close: bool = True, timeout: float = 20.0) -> bytes:
        """Send raw bytes (then end our side, unless told not to) and read until EOF."""
        with socket.create_connection((self.host, self.port), timeout=timeout) as sock:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
            return read_all(sock)

    def sources(self, text: str) -> set[str]:
        status, body = self.post("/api/query", {"text": text, "mode": "sparse", "k": 10})
        assert status == 200, body
        return {r["source"] for r in body["results"]}


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def responses(data: bytes) -> list[tuple[int, dict[str, Any]]]:
    """Parse back-to-back HTTP responses (each with a JSON body and a Content-Length)."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = {k.strip().lower(): v.strip() for k, v in
                  (line.split(":", 1) for line in lines[1:])}
        assert fields["content-type"].startswith("application/json"), head
        size = int(fields["content-length"])
        out.append((status, json.loads(rest[:size])))
        data = rest[size:]
    return out


def one_error(data: bytes, status: int) -> str:
    """The error text of the only response in `data`; a bare JSON body is an HTTP/0.9 answer."""
    if data.startswith(b"HTTP/"):
        [(got, body)] = responses(data)
        assert got == status, (got, body)
    else:
        body = json.loads(data)
    assert isinstance(body["error"], str) and body["error"], body
    return body["error"]


def assert_error(result: tuple[int, dict[str, Any]], status: int, fragment: str = "") -> None:
    got, body = result
    assert got == status, (got, body)
    assert set(body) == {"error"} and isinstance(body["error"], str), body
    assert fragment.lower() in body["error"].lower(), body


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A daemon over three notes, a symlink to an outside folder, small body limit and timeout."""
    base = tmp_path_factory.mktemp("fuzz")
    docs, outside = base / "docs", base / "outside"
    docs.mkdir()
    outside.mkdir()
    for name, text in NOTES.items():
        (docs / name).write_text(text)
    (outside / "secret.md").write_text("The secret launch code is swordfish.\n")
    (docs / "linked").symlink_to(outside, target_is_directory=True)
    config = Config().with_data_dir(base / "data")
    config = config.replace("watch", folders=[str(docs)], quiet_period_s=0.2)
    config = config.replace("api", port=0, max_body_bytes=MAX_BODY, token=TOKEN)
    assert 0 < endpoints_module.TIMEOUT_S <= 60  # a silent client cannot hold a connection forever
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PSIRAG_KB_TOKEN", raising=False)
        patch.setattr(endpoints_module, "TIMEOUT_S", HANDLER_TIMEOUT_S)  # a body
        patch.setattr(thread_module, "TIMEOUT_S", HANDLER_TIMEOUT_S)  # a request head
        daemon = Daemon(config, embedder=FakeEmbedder())
        daemon.start()
        try:
            here = Served(daemon, docs, outside)
            wait_for(lambda: here.sources("zebras") == {str(docs / "zebra.md")})
            wait_for(lambda: daemon.watcher.queue_size == 0
                     and here.call("GET", "/api/status")[1]["files"]["indexed"] == len(NOTES))
            yield here
        finally:
            daemon.stop()


# -- bodies ---------------------------------------------------------------------------------------

MALFORMED = {
    "truncated": (b'{"text": "zeb', "malformed JSON"),
    "not json": (b"zebras please", "malformed JSON"),
    "empty": (b"", "malformed JSON"),
    "array": (b'["text", "zebras"]', "JSON object"),
    "string": (b'"zebras"', "JSON object"),
    "null": (b"null", "JSON object"),
    "NaN": (b"NaN", "JSON object"),
    "text NaN": (b'{"text": NaN}', "type str"),
    "k NaN": (b'{"text": "zebras", "k": NaN}', "type int"),
    "k Infinity": (b'{"text": "zebras", "k": -Infinity}', "type int"),
    "k 5000 digits": (b'{"text": "zebras", "k": ' + b"9" * 5000 + b"}", "malformed JSON"),
    "nested arrays": (b"[" * 10_000 + b"]" * 10_000, "malformed JSON"),
    "nested objects": (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "malformed JSON"),
    "nested in a field": (b'{"text": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "malformed JSON"),
    "invalid utf-8": (b"\xff\xfe\xfd", "malformed JSON"),
    "invalid utf-8 in a string": (b'{"text": "\xc3\x28"}', "malformed JSON"),
    "utf-8 BOM": (b'\xef\xbb\xbf{"text": "zebras"}', "malformed JSON"),
}


@pytest.mark.parametrize("endpoint", ["/api/query", "/api/answer", "/api/reindex"])
@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_bodies_are_400(served: Served, endpoint: str, name: str) -> None:
    body, fragment = MALFORMED[name]
    if endpoint == "/api/reindex":  # its one field is "path"
        body = body.replace(b'"text"', b'"path"')
        if b'"k"' in body and fragment != "malformed JSON":
            fragment = "unknown field"
    result = served.call("POST", endpoint, body, {"Content-Type": "application/json", **AUTH})
    assert_error(result, 400, fragment)


WRONG_QUERY = [
    ({"text": 5}, "type str"), ({"text": ["zebras"]}, "type str"), ({"text": None}, "type str"),
    ({"text": {"$ne": ""}}, "type str"), ({"text": True}, "type str"), ({"text": 1.5}, "type str"),
    ({"text": "zebras", "k": "5"}, "type int"), ({"text": "zebras", "k": -1}, "between"),
    ({"text": "zebras", "k": 0}, "between"), ({"text": "zebras", "k": 10**30}, "between"),
    ({"text": "zebras", "k": 2**63}, "between"), ({"text": "zebras", "k": 1001}, "between"),
    ({"text": "zebras", "k": 2.5}, "type int"), ({"text": "zebras", "k": 5.0}, "type int"),
    ({"text": "zebras", "k": True}, "type int"), ({"text": "zebras", "k": [5]}, "type int"),
    ({"text": "zebras", "mode": "nonsense"}, "mode"), ({"text": "zebras", "mode": 3}, "type str"),
    ({"text": "zebras", "mode": ["sparse"]}, "type str"),
    ({"text": "zebras", "summarize": "yes"}, "type bool"),
    ({"text": "zebras", "summarize": 1}, "type bool"),
    ({"text": "zebras", "colour": "red"}, "unknown field"),
    ({"text": "zebras", "__proto__": {}}, "unknown field"),
    ({"mode": "sparse"}, "missing field"), ({}, "missing field"),
    ({"text": ""}, "empty"), ({"text": " \n\t "}, "empty"),
]
WRONG_ANSWER = [
    ({"text": 5}, "type str"), ({"text": None}, "type str"), ({"text": ["x"]}, "type str"),
    ({"text": ""}, "empty"), ({"text": "zebras", "k": "3"}, "type int"),
    ({"text": "zebras", "k": -3}, "between"), ({"text": "zebras", "k": 10**30}, "between"),
    ({"text": "zebras", "k": 1.5}, "type int"), ({"text": "zebras", "k": False}, "type int"),
    ({"text": "zebras", "mode": "agent"}, "unknown field"), ({}, "missing field"),
]
WRONG_REINDEX = [
    ({"path": 5}, "type str"), ({"path": None}, "type str"), ({"path": ["/"]}, "type str"),
    ({"path": {"a": 1}}, "type str"), ({"path": True}, "type str"), ({"path": ""}, "absolute"),
    ({"path": "/tmp", "force": True}, "unknown field"), ({}, "missing field"),
]


@pytest.mark.parametrize("endpoint, payload, fragment", [
    *[("/api/query", p, f) for p, f in WRONG_QUERY],
    *[("/api/answer", p, f) for p, f in WRONG_ANSWER],
    *[("/api/reindex", p, f) for p, f in WRONG_REINDEX],
])
def test_wrong_field_types_and_values_are_400(served: Served, endpoint: str, payload: Any,
                                              fragment: str) -> None:
    assert_error(served.post(endpoint, payload), 400, fragment)


@pytest.mark.parametrize("mode", ["sparse", "dense", "hybrid", "tree"])
@pytest.mark.parametrize("text", [
    "\x00", "\ud800 zebras", "((( zebras", 'zebras" AND OR NOT', "text:zebras", "*", "zebras~2^3",
    "🦓 zebras", "\u202ezebras", "z" * 20_000, "zebras " * 2000, "-", "[1 TO 5]",
])
def test_strange_query_texts_never_fail_the_server(served: Served, mode: str, text: str) -> None:
    status, body = served.post("/api/query", {"text": text, "mode": mode, "k": 5})
    assert status in (200, 400), (status, body)
    assert ("results" in body) if status == 200 else set(body) == {"error"}


def test_valid_requests_with_every_field(served: Served) -> None:
    status, body = served.post("/api/query", {"text": "zebras", "mode": "sparse", "k": 1000,
                                              "summarize": None})
    assert status == 200 and body["results"][0]["source"] == str(served.docs / "zebra.md")
    status, body = served.post("/api/query", {"text": "penguins", "mode": None, "k": None})
    assert status == 200 and body["results"]
    connection = http.client.HTTPConnection(served.host, served.port, timeout=20)
    try:
        connection.request("POST", "/api/answer", json.dumps({"text": "okapis", "k": 1}).encode(),
                           headers=AUTH)
        response = connection.getresponse()
        lines = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    finally:
        connection.close()
    assert response.status == 200 and lines[-1]["answer"]["status"] == "no_llm"


# -- lengths and framing --------------------------------------------------------------------------

def request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in
                                                              (AUTH | headers).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def test_huge_bodies_are_413(served: Served) -> None:
    big = json.dumps({"text": "zebras " * (MAX_BODY // 5)}).encode()
    assert_error(served.call("POST", "/api/query", big), 413, "limit")
    assert_error(served.call("POST", "/api/reindex", big), 413, "limit")
    # a Content-Length far above the limit with a short body: refused without reading it all
    data = served.raw(request("POST", "/api/query", {"Content-Length": str(10**12)}, b'{"text"'))
    assert "limit" in one_error(data, 413)


@pytest.mark.parametrize("length, fragment", [
    ("-5", "invalid Content-Length"), ("abc", "invalid Content-Length"),
    ("1e3", "invalid Content-Length"), ("", "invalid Content-Length"),
    ("0x10", "invalid Content-Length"),
])
def test_bad_content_length_is_400(served: Served, length: str, fragment: str) -> None:
    data = served.raw(request("POST", "/api/query", {"Content-Length": length},
                              b'{"text": "zebras"}'))
    assert fragment in one_error(data, 400)


def test_content_length_larger_than_the_body(served: Served) -> None:
    body = b'{"text": "zebras"}'
    headers = {"Content-Length": str(len(body) + 50)}
    data = served.raw(request("POST", "/api/query", headers, body))  # then EOF
    assert "ended after" in one_error(data, 400)
    data = served.raw(request("POST", "/api/query", headers, body), half_close=False)
    assert "did not arrive" in one_error(data, 408)  # the client stalls: the handler times out


def test_missing_length_and_chunked_bodies_are_411(served: Served) -> None:
    data = served.raw(request("POST", "/api/query", {}, b'{"text": "zebras"}'))
    assert "missing Content-Length" in one_error(data, 411)
    chunked = b'12\r\n{"text": "zebras"}\r\n0\r\n\r\n'
    data = served.raw(request("POST", "/api/query", {"Transfer-Encoding": "chunked"}, chunked))
    assert "chunked" in one_error(data, 411)
    both = {"Transfer-Encoding": "chunked", "Content-Length": "18"}
    data = served.raw(request("POST", "/api/query", both, chunked))
    assert "chunked" in one_error(data, 411)


def test_keep_alive_after_errors_never_desynchronises(served: Served) -> None:
    body = b'{"text": "zebras"}'
    first = request("POST", "/api/nowhere", {"Content-Length": str(len(body))}, body)
    second = request("GET", "/api/health", {})
    answers = responses(served.raw(first + second))
    assert [status for status, _ in answers] in ([404], [404, 200]), answers  # never garbage
    good = request("POST", "/api/query", {"Content-Length": str(len(body))}, body)
    answers = responses(served.raw(good + second + good))
    assert [status for status, _ in answers] in ([200], [200, 200, 200]), answers


# -- routes, ids and paths ------------------------------------------------------------------------

@pytest.mark.parametrize("path", [
    "/api/tree/abc", "/api/tree/0", "/api/tree/-999999", "/api/tree/999999",
    "/api/tree/99999999999999999999", "/api/tree/9223372036854775808", "/api/tree/1.5",
    "/api/tree/1e3", "/api/tree/0x1", "/api/tree/%31", "/api/tree/1%00", "/api/tree/%00",
    "/api/tree/" + "9" * 5000,
    "/api/path/abc", "/api/path/0", "/api/path/-1", "/api/path/999999",
    "/api/path/99999999999999999999", "/api/path/1.0", "/api/path/1%00",
])
def test_unknown_node_and_chunk_ids_are_404(served: Served, path: str) -> None:
    assert_error(served.call("GET", path), 404)


def test_leaf_ids_and_real_ids(served: Served) -> None:
    status, root = served.call("GET", "/api/tree")
    assert status == 200 and root["leaves"] == len(NOTES)
    assert served.call("GET", f"/api/tree/{root['id']}")[1]["id"] == root["id"]
    chunk = served.post("/api/query", {"text": "okapis", "mode": "sparse"})[1]["results"][0]
    assert_error(served.call("GET", f"/api/tree/-{chunk['chunk_id']}"), 404, "leaf")
    status, body = served.call("GET", f"/api/path/{chunk['chunk_id']}")
    assert status == 200 and body["path"][0]["id"] == root["id"]


TRAVERSAL = [
    "/api/tree/../../etc/passwd", "/api/tree/..%2f..%2fetc%2fpasswd",
    "/api/tree/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/api/tree/%2e%2e", "/api/tree/..",
    "/api/path/../../etc/passwd", "/api/path/%2e%2e%2fetc%2fpasswd",
    "/api/../etc/passwd", "/api/%2e%2e/etc/passwd", "//etc/passwd", "///etc/passwd",
    "/api//health", "/api/tree//1", "/api/tree/1/", "/api/health%00", "/api/health/",
    "/etc/passwd", "/", "", "/API/HEALTH", "/api/tree/1/../../../etc/passwd",
]


@pytest.mark.parametrize("path", TRAVERSAL)
def test_traversal_in_urls_is_404(served: Served, path: str) -> None:
    status, body = served.call("GET", path or "/")
    assert_error((status, body), 404)
    assert "root:" not in json.dumps(body)


def test_raw_control_bytes_in_the_request_line(served: Served) -> None:
    """The HTTP parser refuses a request target with control bytes before any routing."""
    data = served.raw(b"GET /api/tree/\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert one_error(data, 400)
    data = served.raw(b"GET /api/tree/\x1b[2J\x07 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert one_error(data, 400)


@pytest.mark.parametrize("raw_path, fragment", [
    ("../", "absolute"), ("../../etc/passwd", "absolute"), ("relative.md", "absolute"),
    ("/etc/passwd", "neither"), ("/", "neither"), ("/etc/../etc/passwd", ".."),
    ("{docs}/../outside/secret.md", ".."), ("{docs}/./../outside/secret.md", ".."),
    ("{outside}/secret.md", "neither"), ("{outside}", "neither"), ("{parent}", "neither"),
    ("{docs}/..", ".."), ("/tmp", "neither"), ("/\ud800", "Unicode"),
    ("{docs}/linked", "neither"), ("{docs}/linked/secret.md", "neither"),
    ("{docs}/linked/../zebra.md", ".."), ("{docs}/zebra.md\x00/etc/passwd", "absolute"),
    ("\x00", "absolute"), ("//etc/passwd", "neither"), ("{docs}//..//..//etc/passwd", ".."),
])
def test_reindex_refuses_paths_outside_the_watched_folders(served: Served, raw_path: str,
                                                           fragment: str) -> None:
    path = raw_path.format(docs=served.docs, outside=served.outside, parent=served.docs.parent)
    assert_error(served.post("/api/reindex", {"path": path}), 400, fragment)
    assert served.sources("swordfish launch code") == set()


def test_reindex_inside_the_folder_works(served: Served) -> None:
    status, body = served.post("/api/reindex", {"path": str(served.docs / "zebra.md")})
    assert status == 200 and body["unchanged"] == 1
    status, body = served.post("/api/reindex", {"path": f"{served.docs}//zebra.md"})
    assert status == 200 and body["unchanged"] == 1
    status, body = served.post("/api/reindex", {"path": str(served.docs / "never-there.md")})
    assert status == 200 and body == {"removed": 0}


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/api/nowhere", 404), ("POST", "/api/nowhere", 404), ("GET", "/api", 404),
    ("PUT", "/api/query", 405), ("DELETE", "/api/query", 405), ("PATCH", "/api/reindex", 405),
    ("DELETE", "/api/tree/1", 405), ("PUT", "/api/health", 405), ("GET", "/api/query", 405),
    ("GET", "/api/reindex", 405), ("GET", "/api/answer", 405), ("POST", "/api/health", 405),
    ("POST", "/api/tree", 405), ("OPTIONS", "/api/query", 405), ("OPTIONS", "*", 404),
    ("TRACE", "/api/health", 405), ("CONNECT", "127.0.0.1:1", 404), ("FOO", "/api/health", 405),
])
def test_unknown_routes_and_methods(served: Served, method: str, path: str, status: int) -> None:
    assert_error(served.call(method, path, b"{}" if method != "GET" else None, AUTH), status)


def test_head_is_refused_without_a_body(served: Served) -> None:
    assert served.call("HEAD", "/api/health")[0] == 405
    assert served.call("HEAD", "/api/nowhere")[0] == 404


@pytest.mark.parametrize("path, status", [
    ("/api/health?x=1", 200), ("/api/health?", 200), ("/api/status?verbose=true&x", 200),
    ("/api/tree?id=../../etc/passwd", 200), ("/api/health?" + "a=b&" * 2000, 200),
    ("/api/query?text=zebras", 405), ("/api/nowhere?api/health", 404),
    ("/api/tree/abc?1", 404), ("/api/tree/%3F1", 404),
])
def test_query_strings_are_ignored(served: Served, path: str, status: int) -> None:
    got, body = served.call("GET", path)
    assert got == status, body
    assert ("error" in body) == (status >= 400)


def test_long_urls(served: Served) -> None:
    assert_error(served.call("GET", "/api/tree/" + "1" * 60_000), 404)
    host = b"Host: 127.0.0.1\r\n"
    data = served.raw(b"GET /api/health?" + b"a" * 65_536 + b" HTTP/1.1\r\n" + host + b"\r\n")
    assert one_error(data, 414)
    data = served.raw(b"GET /api/health HTTP/1.1\r\n" + host + b"X-Long: " + b"a" * 70_000
                      + b"\r\n\r\n")
    assert one_error(data, 431)
    many = b"".join(b"X-H%d: 1\r\n" % n for n in range(150))
    data = served.raw(b"GET /api/health HTTP/1.1\r\n" + host + many + b"\r\n")
    assert one_error(data, 431)


@pytest.mark.parametrize("line", [
    b"GARBAGE", b"GET", b"GET /api/health HTTP/1.1 extra", b"GET /api/health HTTP/9.9",
    b"GET /api/health HTTP/1.1\"", b"GET /api/health HTTP/1.1'\"\\", b"GET /api/health FTP/1.1",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(32)),
    b"GET /api/health HTTP/1.\xff", b"\xff\xfe\xfd \xfc HTTP/1.1", b"POST /api/query HTTP/0.9",
    b"GET /api/health HTTP/1.1\r\n: empty name", b"GET /api/health HTTP/1.1\r\nNoColon",
])
def test_garbage_request_lines_get_json_errors(served: Served, line: bytes) -> None:
    data = served.raw(line + b"\r\n\r\n")
    assert data, "no answer at all"
    status = int(data.split()[1]) if data.startswith(b"HTTP/") else 400
    if status == 200:  # a tolerated header defect: a normal answer
        assert responses(data)[0][1]["ok"] is True
        return
    assert 400 <= status < 600
    one_error(data, status)


def test_http_0_9_request_is_answered_as_json(served: Served) -> None:
    """HTTP/0.9 is not spoken: the request gets a JSON 400, not a hang or garbage."""
    data = served.raw(b"GET /api/health\r\n\r\n")
    assert "malformed" in one_error(data, 400)


# -- slow clients ---------------------------------------------------------------------------------

def test_slow_loris_does_not_block_other_clients(served: Served) -> None:
    before = threading.active_count()
    stalled = []
    partials = [b"POST /api/query HTTP/1.1\r\nHost: x\r\nContent-Le",
                b"GET /api/hea",
                request("POST", "/api/query", {"Content-Length": "100"}, b'{"text": "zeb')]
    for n in range(12):
        sock = socket.create_connection((served.host, served.port), timeout=10)
        sock.sendall(partials[n % len(partials)])
        stalled.append(sock)
    try:
        for _ in range(5):  # everybody else is served meanwhile
            assert served.call("GET", "/api/health")[0] == 200
            assert served.sources("okapis") == {str(served.docs / "okapi.md")}
        deadline = time.monotonic() + 10 * HANDLER_TIMEOUT_S
        for sock in stalled:  # the server gives up on each stalled client and closes it
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            data = read_all(sock)
            if data:  # a partial body is answered 408 before the close
                assert "did not arrive" in one_error(data, 408)
    finally:
        for sock in stalled:
            sock.close()
    wait_for(lambda: threading.active_count() <= before + 1, timeout=10)


# -- a daemon bound off loopback ------------------------------------------------------------------

@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A daemon bound to 0.0.0.0 with a token (PSIRAG_KB_TOKEN unset)."""
    base = tmp_path_factory.mktemp("exposed")
    docs = base / "docs"
    docs.mkdir()
    (docs / "zebra.md").write_text(NOTES["zebra.md"])
    config = Config().with_data_dir(base / "data")
    config = config.replace("watch", folders=[str(docs)], quiet_period_s=0.2)
    config = config.replace("api", host="0.0.0.0", port=0, auth_failures_per_minute=1000,
                            token="s3cret-t0ken-0123456789abcdefghijkl")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PSIRAG_KB_TOKEN", raising=False)
        daemon = Daemon(config, embedder=FakeEmbedder())
        daemon.start()
        try:
            yield Served(daemon, docs, base)
        finally:
            daemon.stop()


RIGHT = {"Authorization": "Bearer s3cret-t0ken-0123456789abcdefghijkl"}


@pytest.mark.parametrize("headers, path", [
    ({"Authorization": "Bearer wrong"}, "/api/health"),
    ({"Authorization": "Basic czNjcmV0LXQwa2Vu"}, "/api/status"),
    ({"Authorization": "Basic s3cret-t0ken-0123456789abcdefghijkl"}, "/api/status"),
    ({"Authorization": "s3cret-t0ken-0123456789abcdefghijkl"}, "/api/status"),
    ({"Authorization": "Bearer"}, "/api/status"), ({"Authorization": "Bearer "}, "/api/status"),
    ({"Authorization": "Bearer s3cret-t0ke"}, "/api/status"),
    ({"Authorization": "Bearer s3cret-t0ken-0123456789abcdefghijkl2"}, "/api/status"),
    ({"Authorization": "Bearer s3cret-t0ken-0123456789abcdefghijkl x"}, "/api/status"),
    ({"Authorization": "Bearer s3cret-t0k\xe9n"}, "/api/status"),
    ({"X-Token": "s3cret-t0ken-0123456789abcdefghijkl"}, "/api/status"),
    ({"Cookie": "token=s3cret-t0ken-0123456789abcdefghijkl"}, "/api/status"),
    ({}, "/api/status?token=s3cret-t0ken-0123456789abcdefghijkl"),
    ({}, "/api/status?access_token=s3cret-t0ken-0123456789abcdefghijkl"),
    ({}, "/api/nowhere"), ({}, "/api/tree/../../etc/passwd"),
])
def test_off_loopback_every_request_needs_the_token(exposed: Served, headers: dict[str, str],
                                                    path: str) -> None:
    status, body = exposed.call("GET", path, headers=headers)
    assert_error((status, body), 401, "token")


def test_health_without_a_token_says_only_the_state(exposed: Served) -> None:
    assert exposed.call("GET", "/api/health", headers={}) == (200, {"ok": True,
                                                                    "state": "serving"})
    status, body = exposed.call("GET", "/api/health", headers=RIGHT)
    assert status == 200 and body["pid"] == os.getpid()


def test_off_loopback_with_the_right_token(exposed: Served) -> None:
    assert exposed.daemon.api.server_address[0] == "0.0.0.0"
    body = json.dumps({"text": "zebras", "mode": "sparse"}).encode()
    assert_error(exposed.call("POST", "/api/query", body), 401, "token")
    assert_error(exposed.call("POST", "/api/query", b"{bad", headers={}), 401, "token")
    assert exposed.call("GET", "/api/health", headers=RIGHT)[0] == 200
    wait_for(lambda: exposed.call("POST", "/api/query", body, RIGHT)[1]["results"])
    status, found = exposed.call("POST", "/api/query", body, RIGHT)
    assert status == 200 and found["results"][0]["source"] == str(exposed.docs / "zebra.md")
    assert_error(exposed.call("POST", "/api/query", b"{bad", RIGHT), 400, "malformed")
    assert_error(exposed.call("GET", "/api/nowhere", headers=RIGHT), 404)


# -- afterwards -----------------------------------------------------------------------------------

def test_the_daemon_still_answers_correctly_after_everything(served: Served) -> None:
    assert served.call("GET", "/api/health")[1]["ok"] is True
    for name in NOTES:
        word = NOTES[name].split()[0].lower()
        assert served.sources(word) == {str(served.docs / name)}
    status = served.call("GET", "/api/status")[1]
    assert status["files"]["indexed"] == len(NOTES) and not status["problems"]
    assert os.getpid() == status["daemon"]["pid"]
    assert served.sources("swordfish") == set()

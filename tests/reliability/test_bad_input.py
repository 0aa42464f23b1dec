"""Bad input against the real daemon: every bad file gets a recorded reason, nothing stops it.

The daemon runs in a thread (fake embedder; real DuckDB, Tantivy, hnswlib and watchdog). Each
case drops bad files next to a good one and checks that the bad file's state and reason are
recorded where a user sees them (`problems` and `daemon.errors` of /api/status), that the good
file is indexed and that the daemon still answers /api/health and /api/query.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import api, wait_for, watching
from memory_probe import reader_growth

import psirag_kb.ingest.reading as reading
from psirag_kb.config import Config
from psirag_kb.service.daemon import Daemon

QUIET = 0.2
SAMPLE_PDF = Path(__file__).parent.parent / "fixtures" / "sample.pdf"
MB = 1024 * 1024


# -- helpers ------------------------------------------------------------------------------------


def status(daemon: Daemon) -> dict[str, Any]:
    code, body = api(daemon, "GET", "/api/status")
    assert code == 200, body
    return body


def sources(daemon: Daemon, text: str) -> list[str]:
    """Sources of the sparse results for a query, one entry per chunk."""
    code, body = api(daemon, "POST", "/api/query", {"text": text, "mode": "sparse", "k": 50})
    assert code == 200, body
    return [r["source"] for r in body["results"]]


def problems(daemon: Daemon) -> dict[str, tuple[str, str]]:
    """path -> (state, reason) of the skipped and failed files, as /api/status reports them."""
    return {p["path"]: (p["state"], p["reason"]) for p in status(daemon)["problems"]}


def errors(daemon: Daemon) -> dict[str, str]:
    """path -> error of the daemon's recent errors."""
    return {e["path"]: e["error"] for e in status(daemon)["daemon"]["errors"]}


def idle(daemon: Daemon) -> bool:
    return daemon.watcher.queue_size == 0


def assert_serving(daemon: Daemon, word: str, path: Path) -> None:
    """The daemon is alive: health answers, the watcher runs and a good file is found once."""
    code, health = api(daemon, "GET", "/api/health")
    assert code == 200 and health["ok"] is True and health["pid"] == os.getpid()
    assert daemon.watcher._thread.is_alive()
    wait_for(lambda: sources(daemon, word) == [str(path)])


def make_config(config: Config, folder: Path, **ingest: Any) -> Config:
    config = watching(config, folder, QUIET)
    return config.replace("ingest", **ingest) if ingest else config


def good(folder: Path, word: str) -> Path:
    """A well-formed note mentioning a distinctive word."""
    path = folder / f"good-{word}.md"
    path.write_text(f"A perfectly ordinary note about the {word}.\n")
    return path


@pytest.fixture
def start(config: Config, fake_embedder) -> Iterator[Callable[..., Daemon]]:
    """Start daemons on `config`'s data directory; all are stopped at the end."""
    running: list[Daemon] = []

    def _start(folder: Path, quiet: float = QUIET, **ingest: Any) -> Daemon:
        settings = make_config(config, folder, **ingest).replace("watch", quiet_period_s=quiet)
        daemon = Daemon(settings, embedder=fake_embedder)
        daemon.start()
        running.append(daemon)
        return daemon

    yield _start
    for daemon in running:
        daemon.stop()


# -- unreadable content -------------------------------------------------------------------------


def _truncated_pdf() -> bytes:
    data = SAMPLE_PDF.read_bytes()
    return data[: len(data) // 2]


CONTENT_CASES = [
    # name, bytes, state, exact reason (or prefix ending in "…")
    ("binary.txt", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 40, "skipped",
     "binary content (NUL bytes)"),
    ("controls.txt", bytes(range(1, 9)) * 500, "skipped", "binary content (control characters)"),
    ("latin.txt", b"caf\xe9 \x81\x8d\x8f\x90\x9d " * 50, "skipped",
     "undecodable text (neither UTF-8 nor plausible Latin-1/Windows-1252)"),
    ("bad-utf16.txt", b"\xff\xfe" + b"\x00\xd8a\x00" * 20, "skipped",
     "undecodable text (invalid utf-16-le: illegal UTF-16 surrogate)"),
    ("empty.md", b"", "skipped", "empty file"),
    ("blank.md", b"  \n\n\t\n", "skipped", "empty file"),
    ("garbage.pdf", random.Random(0).randbytes(4000), "skipped", "PDF could not be parsed: …"),
    ("truncated.pdf", _truncated_pdf(), "skipped", "PDF could not be parsed: …"),
    ("image.png", b"\x89PNG\r\n\x1a\n" + bytes(100), "skipped",
     "unsupported file type .png (an image)"),
]


def test_bad_content_is_recorded_with_its_reason(start, docs):
    daemon = start(docs)
    for name, data, _, _ in CONTENT_CASES:
        (docs / name).write_bytes(data)
    shutil.copy(SAMPLE_PDF, docs / "sample.pdf")  # control: the intact PDF is readable
    ok = good(docs, "ocelot")
    assert_serving(daemon, "ocelot", ok)
    recorded = wait_for(lambda: (lambda p: p if len(p) == len(CONTENT_CASES) else None)(
        problems(daemon)))
    for name, _, state, reason in CONTENT_CASES:
        got_state, got_reason = recorded[str(docs / name)]
        assert got_state == state, name
        if reason.endswith("…"):
            assert got_reason.startswith(reason[:-1]) and len(got_reason) > len(reason), name
        else:
            assert got_reason == reason, name
    wait_for(lambda: idle(daemon))
    assert status(daemon)["files"] == {"indexed": 2, "skipped": len(CONTENT_CASES), "failed": 0}
    assert set(sources(daemon, "abstract trees leaves depth")) == {str(docs / "sample.pdf")}
    assert_serving(daemon, "ocelot", ok)


# -- size ---------------------------------------------------------------------------------------


def _sparse(path: Path, size: int) -> Path:
    """A sparse file of `size` bytes (reading it would still cost `size` bytes of memory)."""
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def test_100_mb_file_is_refused_before_it_is_read(start, docs):
    daemon = start(docs)
    huge = _sparse(docs / "huge.txt", 100 * MB)
    ok = good(docs, "narwhal")
    assert_serving(daemon, "narwhal", ok)
    state, reason = wait_for(lambda: problems(daemon).get(str(huge)))
    assert state == "skipped"
    assert reason == f"file too large ({100 * MB} bytes > limit 20000000)"


def test_a_file_over_the_limit_costs_the_reader_no_memory(tmp_path):
    """The reader alone, in a fresh process: refusing a 100 MB and a 200 MB file takes no more
    memory than either would to read (a reader that read it before refusing it fails)."""
    small = reader_growth(_sparse(tmp_path / "huge.txt", 100 * MB), 20_000_000)
    large = reader_growth(_sparse(tmp_path / "huger.txt", 200 * MB), 20_000_000)
    assert small[1] == f"file too large ({100 * MB} bytes > limit 20000000)"
    assert large[1] == f"file too large ({200 * MB} bytes > limit 20000000)"
    assert small[0] < 10 * MB and large[0] < 10 * MB, (small, large)
    assert abs(large[0] - small[0]) < 10 * MB


def _large_page(path: Path, size: int) -> Path:
    """A page of about `size` bytes: a big inline script between two sentences."""
    line = b"var bundle = 'abcdefghijklmnopqrstuvwxyz0123456789';\n"
    with open(path, "wb") as handle:
        handle.write(b"<html><body><p>The large page opens with a quetzal.</p>\n<script>\n")
        handle.write(line * ((size - 200) // len(line)))
        handle.write(b"</script>\n<p>It closes with a kinkajou.</p></body></html>\n")
    return path


def test_large_file_under_a_raised_limit_is_indexed(start, docs):
    """A 21 MB page (a big inline script around two sentences) under a 32 MB limit."""
    daemon = start(docs, max_file_bytes=32 * MB)
    large = _large_page(docs / "large.html", 21 * MB)  # over the default 20 MB limit
    assert large.stat().st_size > 20_000_000
    wait_for(lambda: str(large) in sources(daemon, "kinkajou"), timeout=40)
    assert str(large) in sources(daemon, "quetzal")
    code, body = api(daemon, "POST", "/api/query", {"text": "kinkajou", "mode": "sparse"})
    assert "bundle" not in body["results"][0]["text"]
    assert status(daemon)["files"] == {"indexed": 1, "skipped": 0, "failed": 0}


def test_large_file_under_a_raised_limit_is_read_with_bounded_memory(tmp_path):
    """The reader alone, in a fresh process, reading a 12 MB and a 24 MB page (limit raised to
    32 MB): its peak memory grows with the file by less than 2.5 bytes per byte. It holds the
    file's bytes until they are decoded, then the text and the HTML parser's copy of the
    script: two copies at most; a reader holding a third copy (or reading the file twice)
    fails."""
    size = 12 * MB
    small = reader_growth(_large_page(tmp_path / "small.html", size), 32 * MB)
    large = reader_growth(_large_page(tmp_path / "large.html", 2 * size), 32 * MB)
    for _, outcome in (small, large):
        assert outcome.startswith("indexed "), outcome
    per_byte = (large[0] - small[0]) / size
    assert per_byte < 2.5, (f"peak RSS {small[0] / MB:.1f} MB for 12 MB, {large[0] / MB:.1f} MB "
                            f"for 24 MB: {per_byte:.2f} bytes per byte of file")
    assert large[0] < 2.5 * 2 * size


# -- files that vanish or cannot be opened ------------------------------------------------------


def test_file_created_and_deleted_at_once_leaves_nothing(start, docs):
    daemon = start(docs)
    for n in range(5):
        flash = docs / f"flash{n}.md"
        flash.write_text("A fleeting note about a firefly.\n")
        flash.unlink()
    ok = good(docs, "pangolin")
    assert_serving(daemon, "pangolin", ok)
    wait_for(lambda: idle(daemon))
    assert sources(daemon, "firefly") == []
    assert status(daemon)["files"] == {"indexed": 1, "skipped": 0, "failed": 0}
    assert status(daemon)["daemon"]["errors"] == []


def test_file_deleted_between_event_and_read(start, docs, monkeypatch):
    """The file vanishes inside the reader: nothing is recorded (no failure, no record), and its
    delete event finds nothing to clean up."""
    daemon = start(docs)
    real = reading.read_document
    vanished: list[Path] = []

    def vanish_then_read(path: Path, **kwargs: Any) -> Any:
        if path.name == "vanishing.md":
            path.unlink()
            vanished.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(reading, "read_document", vanish_then_read)
    gone = docs / "vanishing.md"
    gone.write_text("A note about a mayfly that will not be there.\n")
    ok = good(docs, "axolotl")
    assert_serving(daemon, "axolotl", ok)
    wait_for(lambda: vanished)
    wait_for(lambda: idle(daemon))
    assert str(gone) not in errors(daemon) and str(gone) not in problems(daemon)
    assert daemon.kb.stores.store.file(str(gone)) is None
    assert sources(daemon, "mayfly") == []
    assert status(daemon)["files"] == {"indexed": 1, "skipped": 0, "failed": 0}
    assert_serving(daemon, "axolotl", ok)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_file_chmod_000(start, docs):
    daemon = start(docs)
    locked = docs / "locked.md"
    locked.write_text("A secret note about a dormouse.\n")
    locked.chmod(0)
    ok = good(docs, "tapir")
    assert_serving(daemon, "tapir", ok)
    state, reason = wait_for(lambda: problems(daemon).get(str(locked)))
    assert state == "failed"
    assert reason == f"cannot read: [Errno 13] Permission denied: '{locked}'"
    assert wait_for(lambda: errors(daemon).get(str(locked))) == reason  # noted after the commit
    locked.chmod(0o644)  # fixed by the user: the next event indexes it
    locked.touch()
    wait_for(lambda: sources(daemon, "dormouse") == [str(locked)])


def test_unreadable_file_simulated(start, docs, monkeypatch):
    """The same as chmod 000, by making the open fail (root can read anything)."""
    daemon = start(docs)
    real = reading.path_hash

    def denied(path: Path) -> str:
        if Path(path).name == "locked.md":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(reading, "path_hash", denied)
    locked = docs / "locked.md"
    locked.write_text("A secret note about a dormouse.\n")
    ok = good(docs, "tapir")
    assert_serving(daemon, "tapir", ok)
    state, reason = wait_for(lambda: problems(daemon).get(str(locked)))
    assert state == "failed"
    assert reason == f"cannot read: [Errno 13] Permission denied: '{locked}'"
    assert wait_for(lambda: errors(daemon).get(str(locked))) == reason  # noted after the commit
    assert sources(daemon, "dormouse") == []


# -- links and names ----------------------------------------------------------------------------


def _links(folder: Path) -> None:
    """a -> b, b -> a, and a folder link back to its parent."""
    (folder / "a.md").symlink_to("b.md")
    (folder / "b.md").symlink_to("a.md")
    (folder / "sub").mkdir()
    (folder / "sub" / "inner.md").write_text("An inner note about a marmot.\n")
    (folder / "sub" / "up").symlink_to("..")
    (folder / "self").symlink_to(".")


@pytest.mark.parametrize("when", ["before start", "while running"])
def test_symlink_loops_terminate_and_index_once(start, docs, when):
    if when == "before start":
        _links(docs)
        ok = good(docs, "wombat")
        daemon = start(docs)
    else:
        daemon = start(docs)
        _links(docs)
        ok = good(docs, "wombat")
    assert_serving(daemon, "wombat", ok)
    wait_for(lambda: sources(daemon, "marmot") == [str(docs / "sub" / "inner.md")])
    expected = sorted([str(ok), str(docs / "sub" / "inner.md")])

    def indexed() -> list[str]:
        return sorted(f.path for f in daemon.kb.stores.store.files() if f.state == "indexed")

    wait_for(lambda: idle(daemon))
    assert indexed() == expected  # nothing reached through a/b, sub/up or self
    daemon.watcher.scan()  # a full rescan terminates too and adds nothing
    # events for a looping link find nothing to read; a scan records it as failed
    loop = "Too many levels of symbolic links"
    assert wait_for(lambda: (lambda p: p if len(p) == 2 else None)(problems(daemon))) == {
        str(docs / n): ("failed", f"cannot read: [Errno 40] {loop}: '{docs / n}'")
        for n in ("a.md", "b.md")
    }
    wait_for(lambda: idle(daemon))
    assert indexed() == expected
    assert not any("/up/" in f.path or "/self/" in f.path for f in daemon.kb.stores.store.files())
    assert status(daemon)["chunks"] == 2
    assert sources(daemon, "wombat") == [str(ok)]


@pytest.mark.parametrize("when", ["before start", "while running"])
def test_link_to_a_file_inside_is_not_a_duplicate(start, docs, tmp_path, when):
    outside = tmp_path / "outside"
    outside.mkdir()
    target, far = good(docs, "pangolin"), good(outside, "axolotl")

    def link() -> None:
        (docs / "alias.md").symlink_to(target)
        (docs / "far.md").symlink_to(far)

    if when == "before start":
        link()
    daemon = start(docs)
    if when == "while running":
        assert_serving(daemon, "pangolin", target)
        link()
    far_link = str(docs / "far.md")  # outside: not followed, skipped with its reason
    wait_for(lambda: problems(daemon).get(far_link, ("",))[0] == "skipped")
    wait_for(lambda: idle(daemon))
    assert sources(daemon, "axolotl") == []
    assert sources(daemon, "pangolin") == [str(target)]  # inside: only under its own name
    assert [f.path for f in daemon.kb.stores.store.files() if f.state == "indexed"] == [str(target)]


ODD_NAMES = [
    "with space.md", "ünïcødé ✓ 日本.md", "new\nline.md", "-leading-dash.md", "a#b.md",
    "#tag.md", "100%.md", "%20encoded%2F.md", "semi;colon & 'quote\".md", "back\\slash.md",
]


def test_odd_characters_in_names(start, docs):
    daemon = start(docs)
    words = {}
    for n, name in enumerate(ODD_NAMES):
        word = f"oddity{n}x"
        (docs / name).write_text(f"A note named oddly mentions {word}.\n")
        words[name] = word
    for name, word in words.items():
        wait_for(lambda word=word, name=name: sources(daemon, word) == [str(docs / name)])
    assert status(daemon)["files"]["indexed"] == len(ODD_NAMES)
    code, report = api(daemon, "POST", "/api/reindex", {"path": str(docs / "new\nline.md")})
    assert code == 200 and report["unchanged"] == 1
    (docs / "new\nline.md").unlink()
    wait_for(lambda: sources(daemon, words["new\nline.md"]) == [])


def test_name_that_is_not_utf8(start, docs, tmp_path):
    """One undecodable file name must not stop the start-up scan of the rest of the folder."""
    raw = os.fsencode(docs) + b"/caf\xe9-latin1.md"
    with open(raw, "wb") as handle:
        handle.write(b"A note about a lynx with a Latin-1 name.\n")
    ok = good(docs, "lemming")
    daemon = start(docs)
    assert_serving(daemon, "lemming", ok)
    shown = f"{docs}/caf\\xe9-latin1.md"
    reason = "file name is not valid UTF-8; rename the file to index it"
    assert wait_for(lambda: errors(daemon).get(shown)) == reason
    later = good(docs, "vole")  # and live events after it still work
    with open(os.fsencode(docs) + b"/\xff\xfe.md", "wb") as handle:
        handle.write(b"Another note about a lynx.\n")
    assert wait_for(lambda: errors(daemon).get(f"{docs}/\\xff\\xfe.md")) == reason
    assert_serving(daemon, "vole", later)
    assert sources(daemon, "lynx") == []
    assert status(daemon)["files"] == {"indexed": 2, "skipped": 0, "failed": 0}


# -- timing -------------------------------------------------------------------------------------


def test_file_written_in_slow_appends_is_indexed_once_with_its_final_content(start, docs):
    quiet = 1.0  # pauses of a tenth of it: a stalled test thread cannot fake a finished write
    daemon = start(docs, quiet=quiet)
    ok = good(docs, "dingo")
    assert_serving(daemon, "dingo", ok)
    wait_for(lambda: idle(daemon))
    generation = status(daemon)["generation"]
    growing = docs / "growing.md"
    parts = [f"Part {n} of the slowly written report mentions heron{n}.\n" for n in range(8)]
    with open(growing, "w", encoding="utf-8") as handle:
        for part in parts:  # each pause is well inside the quiet period
            handle.write(part)
            handle.flush()
            time.sleep(quiet / 10)
    wait_for(lambda: sources(daemon, "heron7") == [str(growing)])
    wait_for(lambda: idle(daemon))
    after = status(daemon)
    assert after["generation"] == generation + 1, "an intermediate version was indexed"
    code, body = api(daemon, "POST", "/api/query", {"text": "heron0", "mode": "sparse"})
    assert code == 200 and body["results"][0]["text"] == "".join(parts).strip()
    assert after["files"]["indexed"] == 2 and not after["problems"]


# -- folders ------------------------------------------------------------------------------------


def test_watched_folder_renamed_away_and_back(start, docs, tmp_path):
    daemon = start(docs)
    note = good(docs, "gecko")
    assert_serving(daemon, "gecko", note)
    away = tmp_path / "away"
    os.rename(docs, away)
    wait_for(lambda: status(daemon)["files"].get("unavailable") == 1)
    assert sources(daemon, "gecko") == [str(note)]  # kept, and found, while it is away
    assert api(daemon, "GET", "/api/health")[0] == 200
    os.rename(away, docs)
    wait_for(lambda: status(daemon)["files"]["indexed"] == 1)
    assert sources(daemon, "gecko") == [str(note)]
    (docs / "after.md").write_text("Written after the return: an iguana.\n")  # watched again
    wait_for(lambda: sources(daemon, "iguana") == [str(docs / "after.md")])
    assert status(daemon)["files"] == {"indexed": 2, "skipped": 0, "failed": 0}


def test_watched_folder_deleted_and_recreated_with_new_content(start, docs):
    daemon = start(docs)
    old = good(docs, "beaver")
    (docs / "sub").mkdir()
    (docs / "sub" / "deep.md").write_text("A deep note about an otter.\n")
    assert_serving(daemon, "beaver", old)
    wait_for(lambda: sources(daemon, "otter"))
    shutil.rmtree(docs)
    docs.mkdir()
    new = good(docs, "badger")
    assert_serving(daemon, "badger", new)
    wait_for(lambda: sources(daemon, "beaver") == [] and sources(daemon, "otter") == [])
    (docs / "later.md").write_text("A later note about a stoat.\n")  # the new folder is watched
    wait_for(lambda: sources(daemon, "stoat") == [str(docs / "later.md")])
    wait_for(lambda: idle(daemon))
    assert status(daemon)["files"] == {"indexed": 2, "skipped": 0, "failed": 0}


def test_missing_folder_in_config_is_waited_for(start, tmp_path, caplog):
    missing = tmp_path / "not-yet"
    with caplog.at_level(logging.WARNING, logger="psirag_kb"):
        daemon = start(missing)
    assert f"watched folder {missing} does not exist; waiting for it" in caplog.text
    assert api(daemon, "GET", "/api/health")[0] == 200
    code, body = api(daemon, "POST", "/api/query", {"text": "anything", "mode": "sparse"})
    assert code == 200 and body["results"] == []
    missing.mkdir()
    note = good(missing, "jerboa")
    assert_serving(daemon, "jerboa", note)
    (missing / "second.md").write_text("A second note about a gerbil.\n")  # and it is watched
    wait_for(lambda: sources(daemon, "gerbil") == [str(missing / "second.md")])

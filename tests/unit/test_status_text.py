"""The status rows the CLI and the TUI share, and the CLI's plain status lines."""

from __future__ import annotations

from psirag_kb.status_text import (
    ERROR,
    OK,
    WARN,
    Row,
    abstracts_line,
    clock,
    human_bytes,
    llm_hosts,
    local_time,
    problems,
    stale_indexes,
    status_lines,
    tree_trouble,
    unavailable,
)

HOSTS = [
    {"host": "http://a:1", "rate_per_s": 1.5, "answered": 3, "backoffs": 0, "backed_off_s": 0,
     "last_error": None},
    {"host": "http://b:2", "rate_per_s": 0.0, "answered": 0, "backoffs": 2, "backed_off_s": 12.0,
     "last_error": "refused"},
]


def test_sizes_and_times_read_as_people_write_them() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(2048) == "2.0 KB"
    assert human_bytes(5 * 1024**4) == "5120.0 GB"
    assert clock(125) == "2:05"
    assert local_time(None) == "?"
    assert len(local_time(0, seconds=True)) == len("1970-01-01 00:00:00")


def test_rows_carry_what_went_wrong_and_how_badly() -> None:
    status = {
        "indexes": {"dense": {"state": "stale", "reason": "behind"}, "bm25": {"state": "ok"}},
        "problems": [{"state": "failed", "path": "/x", "reason": "bad"},
                     {"state": "skipped", "path": "/y", "reason": "big"}],
        "unavailable": [{"since": None, "files": 3, "reason": "gone"}],
        "tree": {"state": "missing", "reason": "rebuilding"},
    }
    assert stale_indexes(status) == [Row("dense", "stale", "behind", ERROR)]
    assert [(r.label, r.severity) for r in problems(status)] == [("failed", ERROR),
                                                                  ("skipped", WARN)]
    assert unavailable(status) == [Row("?", "3 file(s)", "gone", WARN)]
    assert tree_trouble(status) == Row("tree", "missing", "rebuilding", ERROR)
    assert tree_trouble({"tree": {"state": "ok"}}) is None
    assert stale_indexes({}) == problems({}) == unavailable({}) == []


def test_llm_hosts_are_rows_only_when_there_are_several() -> None:
    assert llm_hosts({"hosts": HOSTS[:1]}) == []
    rows = llm_hosts({"hosts": HOSTS})
    assert rows[0] == Row("http://a:1", "1.50 chats/s, 3 answered", severity=OK)
    assert rows[1].severity == WARN
    line = abstracts_line({"dirty": 4, "source": "ollama", "kind": "llm", "hosts": HOSTS})
    assert line.splitlines() == [
        "abstracts: 4 dirty (ollama llm)",
        "  host http://a:1: 1.50 chats/s, 3 answered",
        "  host http://b:2: 0.00 chats/s, 0 answered, backed off 2x (retry in 12 s: refused)",
    ]


def test_the_daemons_long_jobs_read_as_files_done_of_total() -> None:
    status = {"data_dir": "/d", "files": {"indexed": 51, "skipped": 0, "failed": 0},
              "chunks": 3859,
              "model": "m", "dim": 384, "stores": {}, "abstracts": {},
              "tree": {"depth": 0, "abstract_nodes": 0, "nodes_per_layer": []},
              "watch": ["/notes"],
              "daemon": {"pid": 7, "url": "http://127.0.0.1:1", "queue": 2, "running": [
                  {"name": "scan", "done": 51, "total": 694, "since": 0.0, "eta_s": 185.0},
                  {"name": "backup", "done": None, "total": None, "since": 0.0,
                   "eta_s": None}]}}
    lines = status_lines(status)
    at = lines.index("daemon: pid 7 at http://127.0.0.1:1, 2 queued, watching /notes")
    assert lines[at + 1:at + 3] == ["  scan: 51 of 694 files, 3:05 left", "  backup: running"]

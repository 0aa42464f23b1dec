"""A schema-driven fuzzer against a running daemon: schemathesis reads the daemon's own
/api/openapi.json and sends the requests it generates from it, as a reader and as the admin.
No answer may be a 5xx; each must have a status code, media type, headers and body the
document declares for it; a method a path does not serve is 405 with `Allow`; a request
without its token is 401; and the daemon still answers afterwards."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import api, wait_for, watching

from psirag_kb.config import Config
from psirag_kb.service.daemon import Daemon

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance", "unsupported_method",
          "allow_header_conformance", "missing_required_header", "ignored_auth")
"""Left out: positive_data_acceptance and negative_data_rejection, which judge the request
schemas (several refuse more than they declare: docs/reliability/fuzzing.md)."""
NEVER: dict[str, str] = {}
"""Operations the fuzzer never calls, with why (none: `reembed` is fuzzed with an empty
[embedding] models_dir and the Hugging Face hub offline, so a generated path is refused and a
generated name is looked for in the local cache only)."""
LAST = ("forget",)
"""Run alone after the others: a generated "/" as the admin forgets every file, which would
leave the other operations nothing to find."""
NOTES = {
    "pike.md": "# Pike\n\nThe pike waits in still shallow water among the reeds.\n\n"
               "## Feeding\n\nIt strikes at small fish from cover at dawn.\n",
    "carp.md": "# Carp\n\nThe carp roots in soft mud for larvae and seeds.\n",
    "notes/heron.txt": "Herons stand still at the edge of the pond for an hour at a time.\n",
    "notes/page.html": "<html><body><h1>Otters</h1><p>Otters hunt eels at night.</p>"
                       "</body></html>\n",
}


@dataclass
class Served:
    """The daemon under the fuzzer and its two callers' tokens."""

    daemon: Daemon
    admin: str
    reader: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, minilm: Any) -> Iterator[Served]:
    """A daemon on the real model watching a small folder of real files (notes, a PDF, a
    Word file), with a [backup] dir, an empty [embedding] models_dir and a reader, the hub
    offline; limits raised so that the fuzzer's floods are answered, not throttled (the
    limiters have their own tests)."""
    import huggingface_hub.constants

    with pytest.MonkeyPatch.context() as offline:
        offline.setenv("HF_HUB_OFFLINE", "1")
        offline.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        yield from _served(tmp_path_factory.mktemp("fuzz"), minilm)


def _served(base: Path, minilm: Any) -> Iterator[Served]:
    docs = base / "docs"
    for name, text in NOTES.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text)
    shutil.copy(FIXTURES / "sample.pdf", docs / "sample.pdf")
    shutil.copy(FIXTURES / "docs" / "testWORD.docx", docs / "word.docx")
    config = watching(Config().with_data_dir(base / "data"), docs, 0.2)
    config = config.replace("backup", dir=str(base / "backups"), every_hours=0.0)
    (base / "models").mkdir()
    config = config.replace("embedding", models_dir=str(base / "models"))
    config = config.replace("api", person_requests_per_minute=1_000_000,
                            auth_failures_per_minute=1_000_000)
    daemon = Daemon(config, embedder=minilm)
    daemon.start()
    try:
        wait_for(lambda: sum(daemon.kb.stores.store.state_counts().values())
                 == len(NOTES) + 2, 120, "every file read")
        # a name is refused at once, not after a minute of retries to reach the hub
        code, body = api(daemon, "POST", "/api/reembed", {"model": "no-such-model"})
        assert code == 400 and "could not be loaded" in body["error"], body
        assert daemon.people is not None
        reader = daemon.people.add("rita", "reader", [str(docs)])
        yield Served(daemon, daemon.api.token, reader)
    finally:
        daemon.stop()


def fuzz(served: Served, token: str, report: Path, examples: int,
         operations: tuple[str, ...] = (), phases: str = "examples,coverage,fuzzing"
         ) -> dict[str, Any]:
    """Run schemathesis against the daemon with this token; its JSON report (the run's output
    is the assertion's message when it found anything)."""
    url = served.daemon.api.url
    chosen = [arg for name in operations for arg in ("--include-operation-id", name)]
    left = [arg for name in (*NEVER, *(() if operations else LAST))
            for arg in ("--exclude-operation-id", name)]
    command = [sys.executable, "-m", "schemathesis.cli", "run", f"{url}/api/openapi.json",
               "-H", f"Authorization: Bearer {token}", "--workers", "1", "--seed", "41",
               "--max-examples", str(examples), "--phases", phases, "--checks", ",".join(CHECKS),
               "--request-timeout", "60", "--no-shrink", "--report", "json",
               "--report-json-path", str(report), *chosen, *left]
    run = subprocess.run(command, capture_output=True, text=True, timeout=60 * examples + 600,
                         check=False)
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]
    return json.loads(report.read_text())


def still_answers(served: Served, docs: str) -> None:
    """The daemon answers its probes, the admin's status and a search by a reader added now
    (the admin's run may have rotated or revoked the first one's token)."""
    daemon = served.daemon
    assert api(daemon, "GET", "/api/health", token="")[0] == 200
    assert api(daemon, "GET", "/api/ready")[0] == 200
    assert api(daemon, "GET", "/api/status")[0] == 200
    name = f"after{len(daemon.people.listed())}" if daemon.people else "after"
    status, added = api(daemon, "POST", "/api/users",
                        {"name": name, "role": "reader", "read": [docs]})
    assert status == 200, added
    status, found = api(daemon, "POST", "/api/query", {"text": "pike reeds"},
                        token=added["token"])
    assert status == 200 and isinstance(found["results"], list), found


def _tested(report: dict[str, Any]) -> str:
    return (f"{report['operations']['tested']} operations, {report['test_cases']['generated']} "
            f"test cases in {report['running_time']:.0f} s")


def test_the_api_answers_its_own_schema_as_a_reader_and_as_the_admin(
        served: Served, tmp_path: Path) -> None:
    """A few examples per operation: the reader first, generated from the schema only (the
    refusals of a reader's role; the admin's run may rotate or revoke them), then the admin
    with the coverage phase too (edge values, missing fields and headers, methods a path does
    not serve), then forget alone."""
    runs = {"reader": fuzz(served, served.reader, tmp_path / "reader.json", 2,
                           phases="examples,fuzzing"),
            "admin": fuzz(served, served.admin, tmp_path / "admin.json", 2)}
    docs = str(served.daemon.folders[0])
    still_answers(served, docs)
    runs["admin, forget"] = fuzz(served, served.admin, tmp_path / "forget.json", 3, LAST)
    for who, report in runs.items():
        assert report["operations"]["errored"] == 0, (who, report["operations"])
        assert not report["failures"], (who, report["failures"])
        print(f"{who}: {_tested(report)}")
    assert runs["reader"]["operations"]["tested"] == runs["admin"]["operations"]["tested"]
    assert runs["admin"]["operations"]["tested"] >= 30
    assert api(served.daemon, "GET", "/api/health", token="")[0] == 200


@pytest.mark.long
@pytest.mark.timeout(3600)
def test_a_long_fuzz_with_stateful_sequences(served: Served, tmp_path: Path) -> None:
    """A hundred examples per operation and schemathesis's stateful sequences (links
    between operations), as the reader and as the admin."""
    phases = "examples,coverage,fuzzing,stateful"
    for who, token in (("reader", served.reader), ("admin", served.admin)):
        report = fuzz(served, token, tmp_path / f"{who}.json", 100, phases=phases)
        assert not report["failures"], (who, report["failures"])
        print(f"{who}: {_tested(report)}")
    still_answers(served, str(served.daemon.folders[0]))

"""One writer, many readers: concurrent changes lose nothing, indexes agree, queries never wait."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import FakeEmbedder
from daemon_helpers import api, wait_for

from psirag_kb.config import Config
from psirag_kb.kb import KnowledgeBase
from psirag_kb.service.daemon import Daemon
from psirag_kb.storage.dense import DenseIndex
from psirag_kb.storage.sparse import SparseIndex
from tui.format import status_markup

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]


class WideEmbedder(FakeEmbedder):
    """The bag-of-words embedder with room enough that distinct words rarely share a slot."""

    dim = 1024


class SlowEmbedder(WideEmbedder):
    """The bag-of-words embedder with a delay per text, so writes overlap as with a real model."""

    def embed(self, texts: list[str]) -> np.ndarray:
        time.sleep(0.015 * len(texts))
        return super().embed(texts)


def daemon_config(data: Path, folder: Path, **watch: Any) -> Config:
    config = Config().with_data_dir(data)
    config = config.replace("watch", folders=[str(folder)], **({"quiet_period_s": 0.2} | watch))
    return config.replace("api", port=0)


def query(daemon: Daemon, text: str, mode: str = "hybrid", k: int = 10) -> list[dict[str, Any]]:
    status, body = api(daemon, "POST", "/api/query", {"text": text, "mode": mode, "k": k})
    assert status == 200, body
    return body["results"]


def finds(daemon: Daemon, text: str, path: Path) -> bool:
    return any(r["source"] == str(path) for r in query(daemon, text))


def idle(daemon: Daemon) -> bool:
    return api(daemon, "GET", "/api/status")[1]["daemon"]["queue"] == 0


def rows_per_file(kb: KnowledgeBase) -> dict[str, tuple[int, int]]:
    """path -> (chunks the file record says, chunk rows that exist)."""
    return {path: (said, found) for path, said, found in kb.stores.store.db.execute(
        "SELECT f.path, f.chunks, count(c.id) FROM files f LEFT JOIN chunks c ON c.file_id = f.id "
        "WHERE f.state = 'indexed' GROUP BY f.path, f.chunks").fetchall()}


# -- the data directory is found by path, not by string prefix ----------------------------------


def test_folder_whose_name_extends_the_data_dirs_is_indexed_and_kept(tmp_path: Path) -> None:
    """Data dir ~/kb, watched ~/kb-notes: the watcher, every rescan and reindex keep its files."""
    data, notes = tmp_path / "kb", tmp_path / "kb-notes"
    notes.mkdir()
    first = notes / "axolotl.md"
    first.write_text("Axolotls regrow their limbs and hearts.\n")
    daemon = Daemon(daemon_config(data, notes, rescan_interval_s=0.3), embedder=FakeEmbedder())
    daemon.start()
    try:
        wait_for(lambda: finds(daemon, "axolotls regrow", first))
        second = notes / "capybara.md"
        second.write_text("Capybaras are calm rodents of the wetlands.\n")
        wait_for(lambda: finds(daemon, "capybaras wetlands", second))
        runs = next(j["runs"] for j in api(daemon, "GET", "/api/status")[1]["daemon"]["jobs"]
                    if j["name"] == "rescan")
        wait_for(lambda: next(j["runs"] for j in api(daemon, "GET", "/api/status")[1]["daemon"]
                              ["jobs"] if j["name"] == "rescan") >= runs + 2)
        assert api(daemon, "POST", "/api/reindex", {"path": str(notes)})[0] == 200
        assert finds(daemon, "axolotls regrow", first)
        assert finds(daemon, "capybaras wetlands", second)
        assert api(daemon, "GET", "/api/status")[1]["files"]["indexed"] == 2
    finally:
        daemon.stop()


def test_data_dir_inside_the_watched_folder_is_skipped_without_being_hidden(
        tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    data = docs / "kbdata"  # not hidden: only its path keeps it out
    docs.mkdir()
    note = docs / "note.md"
    note.write_text("Tardigrades survive the vacuum of space.\n")
    daemon = Daemon(daemon_config(data, docs, rescan_interval_s=0.3), embedder=FakeEmbedder())
    daemon.start()
    try:
        wait_for(lambda: finds(daemon, "tardigrades vacuum", note))
        (data / "stray.md").write_text("A markdown file inside the data directory.\n")
        assert api(daemon, "POST", "/api/reindex", {"path": str(docs)})[0] == 200
        status = api(daemon, "GET", "/api/status")[1]
        assert status["files"] == {"indexed": 1, "skipped": 0, "failed": 0}, status["problems"]
        assert api(daemon, "POST", "/api/reindex", {"path": str(data / "stray.md")})[0] == 400
    finally:
        daemon.stop()


# -- a storm of concurrent writers ---------------------------------------------------------------


STABLE = ("{name} keeps a steady paragraph about river {n} and its {w} banks, where herons "
          "wait among reeds for fish that swim past slowly in the cold morning water, and "
          "nothing in this paragraph changes when the file is edited.")


def storm_text(index: int, version: int, rng: random.Random) -> str:
    """Stable paragraphs (their chunks are reused on an edit) around one that changes."""
    name = f"file{index:03d}"
    stable = [STABLE.format(name=name, n=n, w=f"w{index}x{n}") for n in range(4)]
    changing = (f"The current version of {name} says storm{index:03d}v{version:04d} is the "
                "word to look for in this paragraph, which changes with every edit made.")
    stable.insert(rng.randrange(len(stable) + 1), changing)
    return "\n\n".join(stable) + "\n"


def test_storm_of_watcher_events_rescans_and_reindex_calls_loses_nothing(tmp_path: Path) -> None:
    """Edits, deletions and creations, with reindex calls, rescans and upkeep running at once,
    end in the same knowledge base as a clean ingest of the final folder."""
    docs = tmp_path / "docs"
    docs.mkdir()
    rng = random.Random(13)
    version: dict[int, int] = {}
    superseded: list[str] = []
    files = 40
    for index in range(files):
        version[index] = 0
        (docs / f"f{index:03d}.md").write_text(storm_text(index, 0, rng))
    config = daemon_config(tmp_path / "data", docs, quiet_period_s=0.05, rescan_interval_s=0.4,
                           maintain_interval_s=0.9, store_interval_s=0.7)
    daemon = Daemon(config, embedder=SlowEmbedder())
    daemon.start()
    statuses: list[tuple[int, str]] = []
    stop = threading.Event()

    def reindex() -> None:
        pick = random.Random(7)
        while not stop.is_set():
            path = docs / f"f{pick.randrange(files):03d}.md"
            code, body = api(daemon, "POST", "/api/reindex", {"path": str(path)})
            statuses.append((code, str(body.get("error", ""))))

    def read() -> None:
        pick = random.Random(8)
        while not stop.is_set():
            body = {"text": f"storm{pick.randrange(files):03d}", "k": 5}
            code, answer = api(daemon, "POST", "/api/query", body)
            statuses.append((code, str(answer.get("error", ""))))

    threads = [threading.Thread(target=reindex), threading.Thread(target=reindex),
               threading.Thread(target=read)]
    try:
        wait_for(lambda: api(daemon, "GET", "/api/status")[1]["files"]["indexed"] == files,
                 timeout=60)
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 8.0
        while time.monotonic() < deadline:
            index = rng.randrange(files)
            path = docs / f"f{index:03d}.md"
            if path.exists() and rng.random() < 0.1:
                path.unlink()
                superseded.append(f"storm{index:03d}v{version[index]:04d}")
            else:
                if path.exists():
                    superseded.append(f"storm{index:03d}v{version[index]:04d}")
                version[index] += 1
                path.write_text(storm_text(index, version[index], rng))
            time.sleep(rng.uniform(0.0, 0.03))
        stop.set()
        for thread in threads:
            thread.join()

        def caught_up() -> bool:
            """The watcher has seen the last writes: nothing queued, and BM25 finds every
            file's current word in that file."""
            if not idle(daemon):
                return False
            for path in docs.iterdir():
                token = f"storm{int(path.stem[1:]):03d}v{version[int(path.stem[1:])]:04d}"
                if not any(r["source"] == str(path) for r in query(daemon, token, "sparse")):
                    return False
            return True

        wait_for(caught_up, timeout=120, what="the index caught up with the storm's last writes")
        assert api(daemon, "POST", "/api/reindex", {"path": str(docs)})[0] == 200
        wait_for(lambda: idle(daemon), timeout=120)
        assert {code for code, _ in statuses} == {200}, sorted(set(statuses))[:5]
        status = api(daemon, "GET", "/api/status")[1]
        assert status["problems"] == [] and status["files"]["failed"] == 0
        # a file read while the editor wrote it is recorded and retried, nothing else went wrong
        unexpected = [e for e in status["daemon"]["errors"]
                      if "changed while being read" not in e["error"]]
        assert not unexpected, unexpected
        present = sorted(docs.iterdir())
        for path in present:
            index = int(path.stem[1:])
            token = f"storm{index:03d}v{version[index]:04d}"
            # by BM25 for the word, and by a hybrid query for the sentence around it (a lone
            # made-up word is outvoted in hybrid fusion by the other rankings; the 40 files'
            # sentences differ by two words, so the bag-of-words vectors of the others can fill
            # the first 10 places: k is 20)
            sentence = next(p for p in path.read_text().split("\n\n") if token in p)
            for text, mode in ((token, "sparse"), (sentence, "hybrid")):
                assert any(r["source"] == str(path) and token in r["text"]
                           for r in query(daemon, text, mode, k=20)), (token, mode)
        for token in superseded:
            assert not any(token in r["text"] for r in query(daemon, token, "sparse")), token
    finally:
        stop.set()
        daemon.stop()

    with KnowledgeBase(config, embedder=WideEmbedder()) as stormed:
        after_storm = rows_per_file(stormed)
        stores = stormed.stores
        counts = (stores.store.chunk_count(), stores.sparse.count(), stores.dense.count)
        assert stormed.stores.tree_index.problems() == []
        assert np.array_equal(stores.tree_index.chunk_ids(), stores.store.all_vectors()[0])
    clean_config = Config().with_data_dir(tmp_path / "clean")
    with KnowledgeBase(clean_config, embedder=WideEmbedder()) as clean:
        clean.ingest([docs])
        clean_rows = rows_per_file(clean)
        clean_chunks = clean.stores.store.chunk_count()
    assert {p: said for p, (said, _) in after_storm.items()} == \
        {p: said for p, (said, _) in clean_rows.items()}
    assert all(said == found for said, found in after_storm.values()), after_storm
    assert counts == (clean_chunks,) * 3
    assert sorted(after_storm) == [str(p) for p in present]


# -- a derived index that fails after the DuckDB commit ------------------------------------------


def _disk_full(*args: Any, **kwargs: Any) -> None:
    raise OSError(28, "No space left on device")


def _sparse_fails_after_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tantivy commits, then writing its generation file fails (as on a full disk)."""
    monkeypatch.setattr(SparseIndex, "_set_generation", _disk_full)


FAULTS: dict[str, tuple[str, Callable[[pytest.MonkeyPatch], None]]] = {
    "bm25 before its commit": ("bm25", lambda m: m.setattr(SparseIndex, "apply", _disk_full)),
    "bm25 after its commit": ("bm25", _sparse_fails_after_commit),
    "hnswlib": ("dense", lambda m: m.setattr(DenseIndex, "apply", _disk_full)),
}


def _notes(folder: Path, start: int, count: int) -> None:
    folder.mkdir(exist_ok=True)
    for n in range(start, start + count):
        (folder / f"n{n:03d}.md").write_text(f"Note about marker{n:03d}.\n")


def _everything_found(kb: KnowledgeBase, folder: Path, count: int) -> None:
    """Every note's marker finds it by BM25 and by the dense index, and the counts agree."""
    stores = kb.stores
    assert stores.sparse.count() == stores.dense.count == stores.store.chunk_count() == count
    for n in range(count):
        path = str(folder / f"n{n:03d}.md")
        for mode in ("sparse", "dense", "hybrid"):
            found = [r["source"] for r in kb.query(f"marker{n:03d}", mode=mode, k=5)["results"]]
            assert path in found, (mode, n)


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("repair", ["while running", "at restart"])
def test_index_that_fails_after_the_database_commit_is_rebuilt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, repair: str) -> None:
    name, install = FAULTS[fault]
    folder = tmp_path / "notes"
    config = Config().with_data_dir(tmp_path / "data")
    _notes(folder, 0, 20)
    with KnowledgeBase(config, embedder=WideEmbedder()) as kb:
        kb.ingest([folder])
    _notes(folder, 20, 20)
    with monkeypatch.context() as patch:
        install(patch)
        if repair == "at restart":  # the disk stays full: the rebuild fails too
            patch.setattr(SparseIndex, "rebuild", _disk_full)
            patch.setattr(DenseIndex, "rebuild", _disk_full)
        kb = KnowledgeBase(config, embedder=WideEmbedder())
        try:
            report = kb.ingest([folder])  # committed to DuckDB: the call succeeds
            assert report.added == 20
            if repair == "at restart":
                status = kb.status()
                assert status["indexes"][name]["state"] == "stale"
                assert f"Index[/b] {name} [red]stale" in status_markup(status, "here")  # the TUI
                # queries go on with the other retrievers, and say so
                result = kb.query("marker033", mode="hybrid", k=5)
                assert result["degraded"] == [name]
                assert str(folder / "n033.md") in [r["source"] for r in result["results"]]
        finally:
            if repair == "at restart":
                kb.close()
    if repair == "while running":
        try:
            wait_for(lambda: kb.status()["indexes"][name]["state"] == "ok")
            _everything_found(kb, folder, 40)
            _notes(folder, 40, 1)  # and later changes reach the rebuilt index
            kb.ingest([folder])
            _everything_found(kb, folder, 41)
        finally:
            kb.close()
        return
    with KnowledgeBase(config, embedder=WideEmbedder()) as kb:
        assert kb.status()["indexes"] == {"bm25": {"state": "ok"}, "dense": {"state": "ok"}}
        _everything_found(kb, folder, 40)


# -- queries never wait for a write --------------------------------------------------------------


@pytest.fixture
def kb_with_notes(tmp_path: Path) -> Iterator[tuple[KnowledgeBase, Path]]:
    folder = tmp_path / "notes"
    _notes(folder, 0, 30)
    with KnowledgeBase(Config().with_data_dir(tmp_path / "data"), embedder=WideEmbedder()) as kb:
        kb.ingest([folder])
        yield kb, folder


def _blocked(target: object, name: str, monkeypatch: pytest.MonkeyPatch
             ) -> tuple[threading.Event, threading.Event]:
    """Make `target.name` wait for a release; returns (entered, release)."""
    entered, release = threading.Event(), threading.Event()
    original = getattr(target, name)

    def wait_then_run(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(60)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, wait_then_run)
    return entered, release


def _answers_within(seconds: float, call: Callable[[], Any]) -> Any:
    """Run a call on its own thread; fail if it has not returned in time."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, "the call waited for the write in progress"
    return out[0]


@pytest.mark.parametrize("write", ["drift repair", "a batch of files inside its transaction"])
def test_queries_answer_while_a_long_write_is_in_progress(
        kb_with_notes: tuple[KnowledgeBase, Path], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path, write: str) -> None:
    kb, folder = kb_with_notes
    import psirag_kb.kb as kb_module
    from psirag_kb.tree.index import TreeIndex

    if write == "drift repair":
        entered, release = _blocked(kb_module, "repair", monkeypatch)
        writing = threading.Thread(target=kb.repair_drift)
    else:
        entered, release = _blocked(TreeIndex, "update", monkeypatch)
        _notes(folder, 30, 30)
        writing = threading.Thread(target=kb.ingest, args=([folder],))
    writing.start()
    try:
        assert entered.wait(30)
        for mode in ("hybrid", "sparse", "dense", "tree"):
            results = _answers_within(5, lambda m=mode: kb.query("marker007", mode=m, k=5))
            assert str(folder / "n007.md") in [r["source"] for r in results["results"]]
        assert _answers_within(5, kb.status)["chunks"] == 30
        assert _answers_within(5, kb.node)["leaves"] == 30
    finally:
        release.set()
        writing.join(60)
    if write != "drift repair":
        assert str(folder / "n047.md") in [r["source"] for r in
                                           kb.query("marker047", k=5)["results"]]


# -- a command started while the daemon starts ---------------------------------------------------

RUNNER = """
import json, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from conftest import FakeEmbedder
from psirag_kb.config import load_config
{body}
"""
DAEMON_BODY = """
from psirag_kb.service.daemon import run_daemon
sys.exit(run_daemon(load_config(Path(sys.argv[1])), embedder=FakeEmbedder()))
"""
STATUS_BODY = """
from psirag_kb.service.client import connect
client = connect(load_config(Path(sys.argv[1])), embedder=FakeEmbedder())
try:
    print(json.dumps({{"chunks": client.status()["chunks"], "via": type(client).__name__}}))
finally:
    client.close()
"""


def _python(body: str, config: Path) -> subprocess.Popen:
    code = RUNNER.format(tests=str(TESTS), body=body.format())
    return subprocess.Popen([sys.executable, "-c", code, str(config)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_command_started_with_the_daemon_never_kills_it(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    _notes(docs, 0, 3)
    config = tmp_path / "config.toml"
    config.write_text(f'[storage]\ndata_dir = "{tmp_path / "data"}"\n'
                      f'[watch]\nfolders = ["{docs}"]\nquiet_period_s = 0.2\n[api]\nport = 0\n')
    for _ in range(3):
        daemon = _python(DAEMON_BODY, config)
        try:
            status = _python(STATUS_BODY, config)
            out, err = status.communicate(timeout=120)
            assert status.returncode == 0, err
            assert json.loads(out)["chunks"] in (0, 3)
            url = wait_for(lambda pid=daemon.pid: _url(tmp_path / "data", pid), 60)
            assert daemon.poll() is None, daemon.communicate()[1][-2000:]
            with _urlopen(url + "/api/health") as response:
                assert response.status == 200
        finally:
            daemon.terminate()
            daemon.wait(30)
        assert not (tmp_path / "data" / "daemon.json").exists()  # a clean stop, even mid-start


def _url(data: Path, pid: int) -> str | None:
    """The URL in daemon.json once the daemon with this pid wrote it."""
    try:
        info = json.loads((data / "daemon.json").read_text())
    except (OSError, ValueError, KeyError):
        return None
    return info["url"] if info.get("pid") == pid else None


def _urlopen(url: str) -> Any:
    import urllib.request

    return urllib.request.urlopen(url, timeout=10)


# -- the embedding model from many threads -------------------------------------------------------


def test_the_model_embeds_and_counts_tokens_from_many_threads(minilm) -> None:
    """Without the model's lock this fails ("Unable to create tensor ...": one thread's
    count_tokens switches the shared tokenizer's truncation off under another's embed); seen
    in 2 runs of 2 with the lock replaced by a no-op."""
    model = minilm._model  # the real model, no memo
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for n in range(40):
                text = f"thread {seed} sentence {n} about rivers, herons and reeds " * (n % 7 + 1)
                assert model.embed([text, text.upper(), text[:20]]).shape == (3, 384)
                assert model.count_tokens(text * 3) > 0
        except BaseException as exc:  # noqa: BLE001 - collected and reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]


# -- tree edits are committed with their transaction or dropped with it --------------------------


@pytest.mark.parametrize("write", ["drift repair", "abstract batch"])
def test_tree_edits_rolled_back_with_their_transaction_leave_no_rebuild_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        write: str) -> None:
    from psirag_kb.storage.store import Store
    from psirag_kb.tree import rows

    folder = tmp_path / "notes"
    config = Config().with_data_dir(tmp_path / "data")
    _notes(folder, 0, 55)
    kb = KnowledgeBase(config, embedder=WideEmbedder())
    try:
        kb.ingest([folder])
        _notes(folder, 55, 5)
        kb.ingest([folder])  # incremental edits: the subtrees a drift repair looks at
        before = kb.node()
        assert kb.tree_status()["depth"] >= 2
        original = rows.write_tree

        def write_then_fail(store: Store, live: Any, full: bool = False) -> None:
            original(store, live, full)
            raise OSError(28, "No space left on device")  # the transaction rolls back

        with monkeypatch.context() as patch:
            patch.setattr(rows, "write_tree", write_then_fail)
            with pytest.raises(OSError):
                if write == "drift repair":
                    kb.repair_drift(tolerance=-1.0)  # rebuild every subtree it can
                else:
                    kb.regenerate_abstracts()
        assert kb.node() == before  # the view is the tree DuckDB holds
        status = kb.tree_status()
        assert status["dirty"] == status["abstract_nodes"]  # nothing regenerated was kept
        _notes(folder, 60, 5)  # later writes build on the same tree as DuckDB's
        kb.ingest([folder])
    finally:
        kb.close()
    with caplog.at_level("WARNING", logger="psirag_kb"), \
            KnowledgeBase(config, embedder=WideEmbedder()) as reopened:
        assert "cannot be used" not in caplog.text
        assert reopened.stores.tree_index.problems() == []
        stores = reopened.stores
        assert np.array_equal(stores.tree_index.chunk_ids(), stores.store.all_vectors()[0])
        assert reopened.tree_status()["leaves"] == 65


"""A command-line `maintain` never locks readers out: `status` and `query` go through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from daemon_helpers import wait_for

from psirag_kb.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_small"
ROOT = Path(__file__).resolve().parents[2]


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    """`psirag-kb` in a thread, waited for with a deadline (a locked-out reader hangs)."""
    out: dict[str, int] = {}
    thread = threading.Thread(target=lambda: out.update(rc=main(argv)), daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), f"{argv} did not answer while maintain ran"
    printed = capsys.readouterr()
    return out["rc"], printed.out, printed.err


def test_status_and_query_answer_while_a_slow_maintain_runs(config, tmp_path, fake_ollama,
                                                              capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join((FIXTURES / "corpus.jsonl").read_text().splitlines()[:40]))
    data = ["--data-dir", str(config.data_dir)]
    assert main([*data, "ingest", "--no-abstracts", "--jsonl", str(corpus)]) == 0
    capsys.readouterr()
    release = threading.Event()

    def slow(body: dict) -> str:  # the model answers only once the readers were served
        release.wait(120)
        return "a keyword, another keyword"

    fake_ollama.script(fn=slow)
    settings = tmp_path / "config.toml"
    settings.write_text(f'[llm]\nenabled = true\nhost = "{fake_ollama.url}"\ntimeout_s = 150.0\n'
                        "grounding = false\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    maintain = subprocess.Popen(
        [sys.executable, "-m", "psirag_kb", "--config", str(settings), *data, "maintain",
         "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: fake_ollama.chats or maintain.poll() is not None, timeout=120)
        assert maintain.poll() is None, maintain.communicate()
        rc, out, err = run_main([*data, "status", "--json"], capsys)
        assert rc == 0 and "waiting" not in err, (out, err)
        status = json.loads(out)
        assert status["abstracts"]["running"] is True  # its progress, seen from here
        assert status["daemon"]["serving_for"] == "maintain"
        rc, out, err = run_main([*data, "query", "--json", "Who is the demon Gallu?"], capsys)
        assert rc == 0 and json.loads(out)["results"] and "waiting" not in err
        assert maintain.poll() is None  # all of it while maintain was still at work
    finally:
        release.set()
        printed, logged = maintain.communicate(timeout=300)
    assert maintain.returncode == 0, logged
    assert json.loads(printed)["abstracts"]["regenerated"] > 0
    assert "abstracts: 0/" in logged and "nodes/s" in logged  # progress lines, no terminal

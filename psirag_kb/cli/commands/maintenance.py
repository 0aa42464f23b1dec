"""`maintain` and `reembed`: upkeep run here or followed in the daemon that owns the stores."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from psirag_kb.cli.connection import open_kb, print_report
from psirag_kb.cli.progress import AbstractBar
from psirag_kb.config import Config
from psirag_kb.errors import KBError

FOLLOW_S = 1.0
"""Seconds between two looks at a daemon's status while it runs maintain for the command."""


def _maintain_via_daemon(daemon: Any) -> dict[str, Any]:
    """Have the daemon that owns the stores run maintain on its writer (an admin only), showing
    its progress from its status until the run ends; the run's report."""
    asked = daemon.maintain()
    print(f"maintain runs in the daemon (pid {asked['pid']}, {daemon.url}); Ctrl-C stops "
          "following it, not the run", file=sys.stderr)
    view = AbstractBar(None)
    with view:
        while True:
            status = daemon.status()
            job = next((j for j in status.get("daemon", {}).get("jobs", [])
                        if j["name"] == "maintain"), None)
            if job is None:
                raise KBError(f"the daemon at {daemon.url} reports no maintain job")
            if job["runs"] > asked["runs"]:
                break
            view.show(status.get("abstracts") or {})
            time.sleep(FOLLOW_S)
    if job.get("error"):
        raise KBError(f"maintain failed in the daemon: {job['error']}")
    return job.get("result") or {}


def cmd_maintain(args: argparse.Namespace, config: Config) -> int:
    """Run upkeep as the data directory's owner, serving the read API meanwhile (so `query` and
    `status` go on, and show its progress), or hand it to the daemon that owns the stores (the
    local one, or --server's; an admin only); on a terminal abstract regeneration shows nodes
    done, rate and ETA, without one it logs a progress line now and then."""
    from psirag_kb.service.client import remote_daemon, running_daemon
    from psirag_kb.service.daemon import Daemon

    daemon = remote_daemon(config) or running_daemon(config)
    if daemon is not None:
        print_report(_maintain_via_daemon(daemon), args.json)
        return 0
    owner = Daemon(config.replace("api", host="127.0.0.1", port=0), serve_only=True)
    owner.start()
    try:
        with AbstractBar(owner.kb):
            report = owner.kb.maintain()
    finally:
        owner.stop()
    print_report(report, args.json)
    return 0


def _follow_reembed(status: Any, model: str) -> dict[str, Any]:
    """Print a reembed's progress from `status()` until it ends; the last status."""
    while True:
        now = status()
        running = now.get("reembed") or {}
        if running.get("state") == "failed":
            raise KBError(f"reembed failed: {running.get('error', '')}; the current model "
                          "serves (`status` shows it)")
        if not running or running.get("state") in ("done", "cancelled", "stopped"):
            if now.get("model") != model:
                raise KBError(f"the reembed to {model} ended without a switch "
                              f"({running.get('state', 'gone')}); the model is {now.get('model')}")
            return {"model": now["model"], "dim": now["dim"], "chunks": now["chunks"]}
        eta = running.get("eta_s")
        print(f"reembed: {running['done']}/{running['total']} chunks, {running['rate']:.1f}/s, "
              f"{'ETA ?' if eta is None else f'ETA {eta:.0f} s'} ({running['state']})",
              file=sys.stderr, flush=True)
        time.sleep(FOLLOW_S)


def cmd_reembed(args: argparse.Namespace, config: Config) -> int:
    """Start (or cancel) a reembed in the daemon when one runs, else here; follow it. The
    daemon loads a model's name or a folder inside its [embedding] models_dir (it refuses any
    other folder); here, with none running, a folder from anywhere."""
    from psirag_kb.ingest.reembed import model_name
    from psirag_kb.service.client import remote_daemon, running_daemon

    if bool(args.model) == bool(args.cancel):
        raise KBError("give --model NAME_OR_PATH or --cancel")
    remote = remote_daemon(config)
    daemon = remote or running_daemon(config)
    if daemon is not None:
        # a folder of this machine goes to the local daemon as its absolute path
        model = model_name(args.model) if args.model and remote is None else args.model or ""
        started = daemon.reembed(model, cancel=args.cancel)
        if args.cancel:
            print_report(started, args.json)
            return 0
        print(f"reembed to {started['model']} runs in the daemon ({daemon.url}); Ctrl-C stops "
              "following it, not the reembed (`reembed --cancel` stops it)", file=sys.stderr)
        print_report(_follow_reembed(lambda: daemon.call("status"), started["model"]), args.json)
        return 0
    with open_kb(config) as kb:
        if args.cancel:
            print_report(kb.cancel_reembed(), args.json)
            return 0
        started = kb.reembed(args.model)
        print(f"reembed to {started['model']}: Ctrl-C stops it; the next `reembed --model` "
              "with the same model (or the daemon) resumes where it was", file=sys.stderr)
        print_report(_follow_reembed(kb.status, started["model"]), args.json)
    return 0

"""`ingest` and `forget`: files into the index and out of it, here or through the daemon."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from psirag_kb.cli.connection import local_only, open_kb
from psirag_kb.cli.progress import AbstractBar, ProgressBar
from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.paths import inside


def _ingest_via_daemon(args: argparse.Namespace, config: Config) -> int | None:
    """Forward an ingest to the daemon that owns the data directory, if one runs."""
    from psirag_kb.service.client import running_daemon

    daemon = running_daemon(config)
    if daemon is None:
        return None
    if args.jsonl:
        raise KBError(f"a daemon owns {config.data_dir} ({daemon.url}); stop it to ingest "
                      "a --jsonl corpus")
    if getattr(args, "ray", None) is not None:
        print(f"note: --ray is not passed on; the daemon at {daemon.url} reads and embeds where "
              "its own [compute] ray_address says", file=sys.stderr)
    reports = [daemon.reindex(path) for path in args.paths]
    if args.json:
        print(json.dumps({"daemon": daemon.url, "reports": reports}))
    else:
        for path, report in zip(args.paths, reports, strict=True):
            counts = ", ".join(f"{k} {v}" for k, v in report.items() if isinstance(v, int))
            print(f"{path}: {counts} (by the daemon at {daemon.url})")
    return 0


def _sum_reports(reports: list[Any]) -> Any:
    """One report adding up the counts, problems and timings of several."""
    from psirag_kb.ingest.report import IngestReport

    total = IngestReport()
    for report in reports:
        for key, value in report.__dict__.items():
            if isinstance(value, int):
                setattr(total, key, getattr(total, key) + value)
        total.problems.extend(report.problems)
        for stage, seconds in report.seconds.items():
            total.timed(stage, seconds)
        total.tree_build = report.tree_build or total.tree_build
        total.compute = report.compute or total.compute
    return total


def _where_line(compute: dict[str, Any]) -> str:
    """Where an ingest read and embedded, for its report."""
    rate = (f"{compute['files']} files, {compute['chunks']} chunks in {compute['seconds']:.1f} s"
            + (f" ({compute['chunks_per_s']:.1f} chunks/s)" if compute["chunks_per_s"] else ""))
    if compute["where"] != "ray":
        return f"ran on this machine, not on Ray at {compute['ray_address']} " \
               f"({compute['reason']}): {rate}"
    nodes = ", ".join(compute["nodes"]) or "?"
    gone = "" if compute["finished_on_ray"] else "; the cluster went away, this machine " \
                                                  "finished the rest"
    return (f"ran on Ray at {compute['ray_address']}: {compute['workers']} worker(s) on "
            f"{nodes}: {rate}{gone}")


def _print_ingest(total: Any, chunks: int, abstracts: dict[str, Any] | None) -> None:
    """An ingest's counts, abstracts, compute, timings and problems as text."""
    print(
        f"added {total.added}, updated {total.updated}, unchanged {total.unchanged}, "
        f"removed {total.removed}, skipped {total.skipped}, failed {total.failed}"
        + (f", unavailable {total.unavailable}" if total.unavailable else "")
        + (f", restored {total.restored}" if total.restored else "") + "; "
        f"{total.chunks_embedded} chunks embedded, {total.chunks_kept} kept, {chunks} in total"
    )
    if abstracts is not None and abstracts["regenerated"]:
        print(f"abstracts: {abstracts['regenerated']} tree nodes given abstracts and labels")
    if total.compute:
        print(_where_line(total.compute))
    if total.seconds:
        print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in total.seconds.items()))
    for path, state, reason in total.problems:
        print(f"  {state}: {path}: {reason}")


def cmd_ingest(args: argparse.Namespace, config: Config) -> int:
    """Index files, folders and JSONL corpora here (or have the running daemon reindex them),
    then write the tree's keyword abstracts."""
    if not args.paths and not args.jsonl:
        raise KBError("give files or folders to ingest, or --jsonl CORPUS")
    local_only(config, "ingest")
    if args.ray is not None:
        config = config.replace("compute", ray_address=args.ray)
    forwarded = _ingest_via_daemon(args, config)
    if forwarded is not None:
        return forwarded
    with open_kb(config) as kb, ProgressBar("indexing") as progress:
        reports = [kb.ingest_jsonl(path, progress) for path in args.jsonl]
        if args.paths:
            reports.append(kb.ingest(args.paths, progress))
        total = _sum_reports(reports)
        abstracts = None
        if not args.no_abstracts:
            with AbstractBar(kb):
                abstracts = kb.regenerate_abstracts(offline=True)
            total.timed("abstracts", abstracts["seconds"])
        chunks = kb.chunk_count()
    if args.json:
        extra = {"chunks_total": chunks} | ({} if abstracts is None else {"abstracts": abstracts})
        print(json.dumps(total.as_dict() | extra))
        return 0
    _print_ingest(total, chunks, abstracts)
    return 0


def cmd_forget(args: argparse.Namespace, config: Config) -> int:
    """Remove files or folders from the index, through the daemon when one runs."""
    local_only(config, "forget")
    from psirag_kb.service.client import running_daemon

    paths = [os.path.abspath(os.path.expanduser(p)) for p in args.paths]
    daemon = running_daemon(config)
    if daemon is not None:
        removed = sum(daemon.forget(path)["removed"] for path in paths)
    else:
        with open_kb(config) as kb:
            removed = kb.forget(paths)
    if args.json:
        print(json.dumps({"removed": removed}))
    else:
        print(f"removed {removed} file(s) from the index")
        watched = [p for p in paths if any(inside(p, f) for f in config.watch.folders)]
        for path in watched:
            print(f"  {path} is inside a watched folder: a rescan indexes what is on disk "
                  "again; drop it from [watch] folders to keep it out")
    return 0

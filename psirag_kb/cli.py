"""The `psirag-kb` command line: every command opens the facade and calls one method."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from psirag_kb.config import DEFAULT_MODEL, Config, load_config
from psirag_kb.errors import KBError
from psirag_kb.locations import place
from psirag_kb.paths import inside
from psirag_kb.people import ROLES
from psirag_kb.search.retrieval import EVAL_MODES, MODES

log = logging.getLogger("psirag_kb")


def _version_text() -> str:
    """`psirag-kb --version`: the release and its database schema."""
    from psirag_kb import __version__
    from psirag_kb.storage.migrations import SCHEMA_VERSION

    return f"psirag-kb {__version__} (database schema {SCHEMA_VERSION})"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="psirag-kb", description="An always-on knowledge base for document folders."
    )
    parser.add_argument("--config", type=Path, help="config file (default: ./config.toml)")
    parser.add_argument("--data-dir", type=Path, help="data directory (overrides [storage])")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=_version_text(),
                        help="this release and the schema version of the databases it writes")
    parser.add_argument("--server", metavar="URL",
                        help="a remote daemon for query, status, tree, tui, mcp and users "
                             "(overrides PSIRAG_KB_URL and [api] server); its token comes from "
                             "PSIRAG_KB_TOKEN, --token-file or [api] token / token_file")
    parser.add_argument("--token-file", metavar="FILE",
                        help="a file holding the daemon's API token (overrides [api] token_file)")
    parser.add_argument("--insecure-http", action="store_true",
                        help="allow an http:// --server beyond loopback, sending the token in "
                             "clear text (sets [api] insecure_http)")
    commands = parser.add_subparsers(dest="command", required=True)

    ingest = commands.add_parser("ingest", help="index files and folders")
    ingest.add_argument("paths", nargs="*", type=Path, help="files or folders (recursive)")
    ingest.add_argument("--jsonl", type=Path, action="append", default=[],
                        help='a benchmark corpus of {"id","title","text"} lines')
    ingest.add_argument("--json", action="store_true", help="print the report as JSON")
    ingest.add_argument("--no-abstracts", action="store_true",
                        help="leave the tree's keyword abstracts to `maintain` or the daemon")
    ingest.add_argument("--ray", metavar="ADDRESS",
                        help="read and embed on a Ray cluster: HOST:PORT of its head, or auto "
                             "(the `ray start` cluster on this machine); overrides [compute] "
                             "ray_address")

    forget = commands.add_parser(
        "forget", help="remove files or folders from the index on purpose (a folder that "
                       "vanished keeps its files as unavailable until then)")
    forget.add_argument("paths", nargs="+", type=Path, help="indexed files or folders")
    forget.add_argument("--json", action="store_true", help="print the result as JSON")

    query = commands.add_parser("query", help="search the knowledge base")
    query.add_argument("text", help="the question or search terms")
    query.add_argument("--mode", choices=(*MODES, "agent"),
                       help="retrieval mode (default: from config); agent answers with the LLM")
    query.add_argument("-k", type=int, help="number of results")
    query.add_argument("--summarize", action="store_true",
                       help="18 passages from the tree alone, in corpus order, summarised by "
                            "the LLM when one is enabled")
    query.add_argument("--in", dest="within", action="append", metavar="PATH",
                       help="only results from files under this folder, or this file "
                            "(repeatable)")
    query.add_argument("--json", action="store_true", help="print one JSON object")
    query.add_argument("--conversation", metavar="ID",
                       help="a turn of this stored conversation (`chat` prints its id): a "
                            "follow-up is searched with the earlier turns' subject")

    chat = commands.add_parser(
        "chat", help="ask questions in a conversation: follow-ups are resolved against the "
                     "earlier turns (a REPL on a terminal; one question per line on a pipe)")
    chat.add_argument("--conversation", metavar="ID", help="continue this conversation")
    chat.add_argument("--mode", choices=(*MODES, "agent"),
                      help="retrieval mode (default: from config); agent answers with the LLM")
    chat.add_argument("-k", type=int, help="number of results")
    chat.add_argument("--in", dest="within", action="append", metavar="PATH",
                      help="only results from files under this folder, or this file")
    chat.add_argument("--json", action="store_true", help="print one JSON object per question")

    talks = commands.add_parser("conversations", help="list, show, rename or delete your "
                                                      "stored conversations")
    talk_actions = talks.add_subparsers(dest="action")
    talk_actions.add_parser("list", help="your conversations, most recent first (the default)")
    for action, what in (("show", "a conversation's turns"), ("delete", "delete one")):
        one = talk_actions.add_parser(action, help=what)
        one.add_argument("id")
    rename = talk_actions.add_parser("rename", help="give one a new title")
    rename.add_argument("id")
    rename.add_argument("title")
    talks.add_argument("--json", action="store_true", help="print one JSON object")

    evaluate = commands.add_parser("eval", help="recall of each mode on benchmark questions")
    evaluate.add_argument("--corpus", type=Path, action="append", required=True,
                          help="JSONL corpus (repeatable: corpora are mixed as distractors)")
    evaluate.add_argument("--questions", type=Path, required=True,
                          help='JSONL of {"question", "supporting_ids"}')
    evaluate.add_argument("--modes", default="sparse,dense,tree,hybrid",
                          help=f"comma-separated, from {','.join(EVAL_MODES)},flat_whole "
                               "(exact cosine over whole passages, the baseline)")
    evaluate.add_argument("-k", type=int, default=5, help="retrieval depth (at least 5)")
    evaluate.add_argument("--batches", type=int, default=1,
                          help="feed the corpora in N shuffled incremental batches")
    evaluate.add_argument("--abstracts", action="store_true",
                          help="generate abstracts before querying (timed as abstract_s)")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")

    tree = commands.add_parser("tree", help="show a tree node (the root by default)")
    tree.add_argument("node", nargs="?", type=int, help="abstract node id")
    tree.add_argument("--json", action="store_true", help="print one JSON object")

    hops = commands.add_parser("hops", help="predict how many retrieval hops a question needs")
    hops.add_argument("question", nargs="?", help="the question")
    hops.add_argument("--eval", type=Path, metavar="FILE",
                      help='score a labelled JSONL of {"question", "hops"}')
    hops.add_argument("--json", action="store_true", help="print one JSON object")

    maintain = commands.add_parser("maintain", help="repair drifted subtrees, refresh abstracts")
    maintain.add_argument("--json", action="store_true", help="print one JSON object")

    backup = commands.add_parser(
        "backup", help="copy the knowledge base into a new folder while it goes on serving "
                       "(through the running daemon, else in-process)")
    backup.add_argument("dest", help="a new or empty folder (with --server: on the daemon's "
                                     "machine)")
    backup.add_argument("--json", action="store_true", help="print one JSON object")
    restore = commands.add_parser(
        "restore", help="bring a backup back into an empty data directory (no daemon on it)")
    restore.add_argument("src", type=Path, help="a folder `backup` wrote")
    restore.add_argument("--force", action="store_true",
                         help="replace what the data directory holds")
    restore.add_argument("--json", action="store_true", help="print one JSON object")
    reembed = commands.add_parser(
        "reembed", help="embed every chunk with another model in the background, then switch "
        "to it (queries and indexing go on meanwhile)")
    reembed.add_argument("--model", metavar="NAME_OR_PATH",
                         help="the new model: a sentence-transformers name or local folder "
                         "(a static model from `distill`)")
    reembed.add_argument("--cancel", action="store_true",
                         help="stop the running reembed and keep the current model")
    reembed.add_argument("--json", action="store_true", help="print one JSON object")

    status = commands.add_parser("status", help="what is indexed")
    status.add_argument("--json", action="store_true", help="print one JSON object")

    commands.add_parser("tui", help="the terminal UI (through the daemon when one runs)")
    commands.add_parser("mcp", help="serve the knowledge base to an AI assistant over MCP (stdio)")

    distill = commands.add_parser(
        "distill", help="make a fast static embedding model from a local one (needs model2vec)")
    distill.add_argument("out_dir", type=Path, metavar="OUT_DIR",
                         help="new folder for the model; then set [embedding] model to it")
    distill.add_argument("--pca-dims", type=int, default=256, metavar="N",
                         help="dimensions of the static model (default 256)")
    distill.add_argument("--source", default=DEFAULT_MODEL, metavar="MODEL",
                         help="local sentence-transformers folder (default: the bundled MiniLM)")
    distill.add_argument("--json", action="store_true", help="print one JSON object")

    users = commands.add_parser(
        "users", help="people of a team server: tokens, roles, folder grants (through the "
                      "running daemon, else on the data directory)")
    people = users.add_subparsers(dest="action", required=True)
    add = people.add_parser("add", help="create a person and print their token once")
    add.add_argument("name")
    add.add_argument("--role", choices=ROLES, default="reader",
                     help="reader (search and read), editor (also reindex inside their "
                          "grants), admin (everything, including people), monitor (metrics and "
                          "health only); default reader")
    add.add_argument("--read", action="append", default=[], metavar="PATH",
                     help="a folder or file they may read (repeatable)")
    add.add_argument("--json", action="store_true", help='print {"name", "token"}')
    listed = people.add_parser("list", help="names, roles, grants, created, last used")
    listed.add_argument("--json", action="store_true", help="print one JSON object")
    for action, what in (("grant", "let NAME read PATH too"),
                         ("ungrant", "take a grant of NAME away")):
        change = people.add_parser(action, help=what)
        change.add_argument("name")
        change.add_argument("--read", action="append", required=True, metavar="PATH",
                            help="a folder or file (repeatable)")
        change.add_argument("--json", action="store_true", help="print one JSON object")
    revoke = people.add_parser("revoke", help="remove a person; their token stops working")
    revoke.add_argument("name")
    revoke.add_argument("--json", action="store_true", help="print one JSON object")
    rotate = people.add_parser("rotate", help="give a person a new token (the old one stops)")
    rotate.add_argument("name")
    rotate.add_argument("--json", action="store_true", help='print {"name", "token"}')

    daemon = commands.add_parser("daemon", help="watch folders and serve the HTTP API")
    daemon.add_argument("--watch", type=Path, action="append", default=[], metavar="DIR",
                        help="also watch this folder (repeatable; adds to [watch] folders)")
    daemon.add_argument("--host", help="bind address (overrides [api] host)")
    daemon.add_argument("--port", type=int, help="TCP port, 0 for any (overrides [api] port)")
    daemon.add_argument("--web-port", type=int, metavar="N",
                        help="the team's web page on port N, 0 for any (overrides [web] port)")
    daemon.add_argument("--no-web", action="store_true", help="serve no web page")
    return parser


def _config(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    if args.data_dir is not None:
        config = config.with_data_dir(args.data_dir.resolve())
    server = args.server or os.environ.get("PSIRAG_KB_URL", "") or config.api.server
    if server != config.api.server:
        config = config.replace("api", server=server)
    if args.token_file:
        config = config.replace("api", token_file=args.token_file)
    if args.insecure_http:
        config = config.replace("api", insecure_http=True)
    return config


def _local_only(config: Config, command: str) -> None:
    """Refuse a command that works on this machine's data directory when a server is named."""
    if config.api.server:
        raise KBError(f"`{command}` works on this machine's data directory, not on the remote "
                      f"daemon {config.api.server}; a remote daemon indexes the folders it "
                      "watches (drop --server / PSIRAG_KB_URL to work locally)")


@contextmanager
def _open(config: Config) -> Iterator[Any]:
    """The knowledge base in-process, holding the data directory until the command ends."""
    from psirag_kb.service.client import daemon_info, open_local

    local = open_local(config)
    if local is None:
        info = daemon_info(config.data_dir) or {}
        pid = info.get("pid", "?")
        raise KBError(
            f"the daemon (pid {pid}, {info.get('url', 'starting')}) owns {config.data_dir}; "
            f"stop it with `kill {pid}` first"
        )
    with local:
        yield local.kb


def _client(config: Config):
    """The running daemon's API, or the knowledge base in-process."""
    from psirag_kb.service.client import connect

    return closing(connect(config))


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


class _ProgressBar:
    """A rich progress bar on a terminal, silence otherwise."""

    def __init__(self, label: str) -> None:
        self._progress = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self._progress = Progress(
                "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=Console(stderr=True), transient=True,
            )
            self._task = self._progress.add_task(label, total=None)

    def __enter__(self) -> _ProgressBar:
        if self._progress:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress:
            self._progress.stop()

    def __call__(self, done: int, total: int, current: str) -> None:
        if self._progress:
            self._progress.update(self._task, completed=done, total=total)


def cmd_ingest(args: argparse.Namespace, config: Config) -> int:
    if not args.paths and not args.jsonl:
        raise KBError("give files or folders to ingest, or --jsonl CORPUS")
    _local_only(config, "ingest")
    if args.ray is not None:
        config = config.replace("compute", ray_address=args.ray)
    forwarded = _ingest_via_daemon(args, config)
    if forwarded is not None:
        return forwarded
    from psirag_kb.ingest.report import IngestReport

    total = IngestReport()
    with _open(config) as kb, _ProgressBar("indexing") as progress:
        reports = [kb.ingest_jsonl(path, progress) for path in args.jsonl]
        if args.paths:
            reports.append(kb.ingest(args.paths, progress))
        for report in reports:
            for key, value in report.__dict__.items():
                if isinstance(value, int):
                    setattr(total, key, getattr(total, key) + value)
            total.problems.extend(report.problems)
            for stage, seconds in report.seconds.items():
                total.timed(stage, seconds)
            total.tree_build = report.tree_build or total.tree_build
            total.compute = report.compute or total.compute
        abstracts = None
        if not args.no_abstracts:
            with _AbstractBar(kb):
                abstracts = kb.regenerate_abstracts(offline=True)
            total.timed("abstracts", abstracts["seconds"])
        chunks = kb.chunk_count()
    if args.json:
        extra = {"chunks_total": chunks} | ({} if abstracts is None else {"abstracts": abstracts})
        print(json.dumps(total.as_dict() | extra))
        return 0
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
    return 0


def _where_line(compute: dict[str, Any]) -> str:
    """Where an ingest read and embedded, for its report (issue 34)."""
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


def cmd_forget(args: argparse.Namespace, config: Config) -> int:
    _local_only(config, "forget")
    from psirag_kb.service.client import running_daemon

    paths = [os.path.abspath(os.path.expanduser(p)) for p in args.paths]
    daemon = running_daemon(config)
    if daemon is not None:
        removed = sum(daemon.forget(path)["removed"] for path in paths)
    else:
        with _open(config) as kb:
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


def _since(when: float | None) -> str:
    """A time as local date and time."""
    return "?" if when is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(when))


def _print_results(result: dict[str, Any]) -> None:
    print(f"{len(result['results'])} results for {result['query']!r} ({result['mode']})")
    if result.get("note"):
        print(result["note"])
    for item in result["results"]:
        where = place(item)
        text = " ".join(item["text"].split())
        if len(text) > 300:
            text = text[:297] + "..."
        print(f"\n{item['rank']:>2}. [{item['score']:.3f}] {where}\n    {text}")
        if item.get("unavailable"):
            gone = item["unavailable"]
            print(f"    (unavailable since {_since(gone.get('since'))}: {gone.get('reason')})")


def _print_answer(result: dict[str, Any]) -> None:
    """An agent answer (or its fallback), then its citations and steps."""
    if result["status"] in ("answered", "not_mentioned"):
        print(f"Answer: {result['answer']}")
    else:
        print(f"No answer ({result['status']}): {result['message']}")
    if result["citations"]:
        print("\nCitations:")
    for cited in result.get("nodes", []):  # a question about the whole collection
        print(f"  [{cited['number']}] node {cited['node']} ({cited['leaves']} passages): "
              f"{cited['label']}")
    for number, cited in enumerate(result["citations"], start=1):
        where = place(cited)
        text = " ".join(cited["text"].split())
        print(f"  [{cited.get('number', number)}] {where}: "
              f"{text[:157] + '...' if len(text) > 160 else text}")
    print(f"\nSteps ({result['hops']} hop(s) predicted):")
    for number, step in enumerate(result["steps"], start=1):
        found = ", ".join(p["source"] for p in step["passages"]) or "nothing new"
        action = f" -> {step['action']}" if "action" in step else ""
        print(f"  {number}. {step['query']!r}: {found}{action}")


def cmd_query(args: argparse.Namespace, config: Config) -> int:
    with _client(config) as kb:
        within = args.within and [p if config.api.server else os.path.abspath(p)
                                  for p in args.within]
        if args.conversation is not None:
            if args.summarize:
                raise KBError("--summarize does not continue a conversation; drop one of them")
            result = kb.ask(args.text, conversation=args.conversation, mode=args.mode,
                            k=args.k, **({"within": within} if within else {}))
        else:
            result = kb.query(args.text, mode=args.mode, k=args.k, summarize=args.summarize,
                              **({"within": within} if within else {}))
    if args.json:
        print(json.dumps(result))
    else:
        _print_result(result)
    return 0


def _print_result(result: dict[str, Any]) -> None:
    """A query's or a conversation turn's result as text (the query searched first, when a
    follow-up was rewritten)."""
    if result.get("rewrite") not in (None, "as_is"):
        print(f"searched: {result['searched']}\n")
    if result["mode"] == "agent":
        _print_answer(result)
    else:
        if result.get("note"):
            print(f"Note: {result['note']}\n")
        if result.get("summary"):
            print(f"Summary: {result['summary']}\n")
            for cited in result.get("nodes", []):
                print(f"  [{cited['number']}] node {cited['node']} ({cited['leaves']} "
                      f"passages): {cited['label']}")
        elif result.get("abstracts"):
            print("Abstracts of the covering nodes:")
            for node in result["abstracts"]:
                print(f"  node {node['node']}: {node['abstract'] or '(no abstract yet)'}")
            print()
        _print_results(result)


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return str(n)  # pragma: no cover


def cmd_backup(args: argparse.Namespace, config: Config) -> int:
    """Have the daemon that owns the stores copy them between two commits (or do it
    in-process), with people, audit and a manifest."""
    with _client(config) as kb:
        remote = getattr(kb, "remote", False)
        report = kb.backup(args.dest if remote else os.path.abspath(args.dest))
    if args.json:
        print(json.dumps(report))
        return 0
    where = "" if not remote else " (on the daemon's machine)"
    stale = {k: v for k, v in report.get("indexes", {}).items() if v != "ok"}
    print(f"backup of generation {report['generation']} ({report['chunks']} chunks) in "
          f"{report['path']}{where}: {len(report['files'])} files, {_human(report['bytes'])}, "
          f"{report['seconds']} s (writes waited {report['writer_held_s']} s)")
    for name, state in stale.items():
        print(f"  {name}: {state}")
    return 0


def cmd_restore(args: argparse.Namespace, config: Config) -> int:
    """Verify a backup's manifest and copy it into the data directory (empty, or replaced
    with --force), holding the directory so no daemon opens it meanwhile."""
    from psirag_kb.storage.backup import restore
    from psirag_kb.storage.datadir import COMMAND, DaemonError, DataDirLock

    lock = DataDirLock(config.data_dir)
    found = lock.try_acquire(COMMAND, "restore")  # named: a daemon starting waits for it
    if found is not None:
        raise DaemonError(f"{found.describe()} holds {config.data_dir}; stop it before "
                          "restoring into it")
    try:
        report = restore(args.src, config.data_dir, args.force)
    finally:
        lock.release()
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"restored {report['path']} (generation {report['generation']}, {report['chunks']} "
          f"chunks, {_human(report['bytes'])}) into {report['data_dir']} in "
          f"{report['seconds']} s; start it with `psirag-kb --data-dir {report['data_dir']} "
          "daemon`")
    return 0


def cmd_status(args: argparse.Namespace, config: Config) -> int:
    with _client(config) as kb:
        status = kb.status()
    if args.json:
        print(json.dumps(status))
        return 0
    files = status["files"]
    print(f"data directory: {status['data_dir']}")
    print(
        f"files: {files['indexed']} indexed, {files.get('unavailable', 0)} unavailable, "
        f"{files['skipped']} skipped, {files['failed']} failed"
    )
    device = (f" on {status['device']} ({status['device_reason']})"
              if status.get("device") else "")
    print(f"chunks: {status['chunks']}   model: {status['model']} ({status['dim']}-d){device}")
    compute = status.get("compute") or {}
    if compute.get("ray_address"):
        workers = (f", {compute['workers']} worker(s) on {', '.join(compute['nodes'])}"
                   if compute.get("workers") else "")
        print(f"ingest on Ray at {compute['ray_address']}: {compute['state']}{workers}")
    tree = status["tree"]
    print(f"tree: depth {tree['depth']}, {tree['abstract_nodes']} abstract nodes, "
          f"nodes per layer {tree['nodes_per_layer']}")
    if tree.get("state", "ok") != "ok":
        print(f"tree: {tree['state']} ({tree.get('reason', '')}); queries use BM25 and the "
              "dense index until it is rebuilt (by the daemon, `ingest` or `maintain`)")
    print(_abstracts_line(status.get("abstracts", {})))
    for name, index in status.get("indexes", {}).items():
        if index["state"] == "stale":
            print(f"index {name}: stale, being rebuilt from the database ({index['reason']}); "
                  "queries leave it out meanwhile")
    stores = status["stores"]
    sizes = (f"{k.removesuffix('_bytes')} {_human(v)}" for k, v in stores.items())
    print("stores: " + ", ".join(sizes))
    if last := status.get("backup"):
        print(f"last backup: {_since(last['taken'])}, generation {last['generation']}, "
              f"{_human(last['bytes'])}, {last['path']}")
    for problem in status["problems"]:
        print(f"  {problem['state']}: {problem['path']}: {problem['reason']}")
    for gone in status.get("unavailable", []):
        print(f"  unavailable since {_since(gone['since'])}: {gone['files']} file(s): "
              f"{gone['reason']} (still searchable; `psirag-kb forget PATH` removes them)")
    if "daemon" in status:
        daemon = status["daemon"]
        queued = f"{daemon['queue']} queued, " if "queue" in daemon else ""
        print(f"daemon: pid {daemon['pid']} at {daemon['url']}, {queued}"
              f"watching {', '.join(status.get('watch', [])) or 'nothing'}")
        for root in daemon.get("watching", []):
            if root.get("polled"):
                print(f"  polled every {root['interval_s']:g} s: {root['folder']}: "
                      f"{root['reason']}")
    for encoding, count in status.get("encodings", {}).items():
        print(f"  {count} file(s) decoded from {encoding}")
    return 0


def _abstracts_line(abstracts: dict[str, Any]) -> str:
    """Dirty abstracts, a run in progress (done of total, rate, time left) and the last run."""
    line = (f"abstracts: {abstracts.get('dirty', 0)} dirty ({abstracts.get('source', 'offline')} "
            f"{abstracts.get('kind', 'keyword')})")
    if abstracts.get("running"):
        eta = abstracts.get("eta_s")
        line += (f", writing {abstracts['done']} of {abstracts['total']} at "
                 f"{abstracts['rate_per_s']:.2f} nodes/s"
                 + ("" if eta is None else f", {int(eta) // 60}:{int(eta) % 60:02d} left"))
    last = abstracts.get("last_run")
    if last:
        result = abstracts.get("last_result", {})
        line += (f"; last run {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(last))}: "
                 f"{result.get('regenerated', 0)} written")
    if abstracts.get("refused"):
        line += (f"; {abstracts['refused']} LLM abstracts refused as unsupported by their text "
                 "(the offline ones stay)")
    if abstracts.get("junk"):
        waiting = abstracts.get("nodes_backed_off", 0)
        line += (f"; {abstracts['junk']} unusable LLM replies ({waiting} nodes wait to be "
                 "asked again)")
    if abstracts.get("last_error"):
        line += f"; last error: {abstracts['last_error']}"
    hosts = abstracts.get("hosts") or []
    if len(hosts) > 1:
        line += "".join(f"\n  host {h}" for h in _host_lines(hosts))
    return line


def _host_lines(hosts: list[dict[str, Any]]) -> list[str]:
    """One line per LLM host: its rate over the run, answers, and backoffs."""
    out = []
    for host in hosts:
        line = (f"{host['host']}: {host['rate_per_s']:.2f} chats/s, {host['answered']} answered")
        if host["backoffs"]:
            line += f", backed off {host['backoffs']}x"
        if host["backed_off_s"]:
            line += f" (retry in {host['backed_off_s']:.0f} s: {host['last_error']})"
        out.append(line)
    return out


def cmd_eval(args: argparse.Namespace, config: Config) -> int:
    from psirag_kb.evaluation import evaluate
    from psirag_kb.kb import KnowledgeBase

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in (*EVAL_MODES, "flat_whole")]
    if unknown or not modes:
        raise KBError(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(EVAL_MODES)}")
    report = evaluate(config, args.corpus, args.questions, modes, k=args.k,
                      batches=args.batches, abstracts=args.abstracts,
                      data_dir=args.data_dir.resolve() if args.data_dir else None,
                      open_kb=KnowledgeBase)
    if args.json:
        print(json.dumps(report))
        return 0
    timings = report["timings"]
    print(f"{report['questions']} questions over {report['passages']} passages; "
          f"embedding {timings['embed_s']} s, tree build {timings['tree_build_s']} s")
    print(f"{'mode':<12} {'recall@2':>9} {'recall@5':>9} {'ms/query':>9}")
    for mode, row in report["modes"].items():
        print(f"{mode:<12} {row['recall@2']:>9.4f} {row['recall@5']:>9.4f} "
              f"{row['ms_per_query']:>9.2f}")
    return 0


def cmd_tree(args: argparse.Namespace, config: Config) -> int:
    with _client(config) as kb:
        node = kb.node(args.node)
    if args.json:
        print(json.dumps(node))
        return 0
    state = " (stale)" if node["dirty"] else ""
    print(f"node {node['id']} on layer {node['layer']}, {node['leaves']} leaves{state}")
    if node.get("label") or node["abstract"]:
        print(f"  {node.get('label') or node['abstract']}")
    for child in node["children"]:
        text = " ".join((child.get("label") or child["abstract"]).split()) or "(no abstract yet)"
        if len(text) > 110:
            text = text[:107] + "..."
        label = f"chunk {child['id']}" if child["kind"] == "leaf" else f"node {child['id']}"
        print(f"  - {label} [{child['leaves']} leaves]: {text}")
    return 0


def cmd_hops(args: argparse.Namespace, config: Config) -> int:
    from psirag_kb.ingest.embedding import make_embedder
    from psirag_kb.search.hops import HopDiscriminator, load_labelled

    if (args.question is None) == (args.eval is None):
        raise KBError("give a QUESTION or --eval FILE")
    model = HopDiscriminator.load()
    embedder = make_embedder(config.embedding, config.storage.cache_dir)
    if args.eval is not None:
        labelled = load_labelled(args.eval)
        vectors = embedder.embed([q for q, _ in labelled])
        _print_report(model.evaluate(labelled, vectors), args.json)
        return 0
    hops = model.predict(args.question, embedder.embed([args.question])[0])
    if args.json:
        print(json.dumps({"question": args.question, "hops": hops}))
    else:
        print(hops)
    return 0


def cmd_distill(args: argparse.Namespace, config: Config) -> int:
    from psirag_kb.ingest.distill import distill_static

    made = distill_static(args.out_dir, args.source, args.pca_dims)
    if args.json:
        print(json.dumps(made))
        return 0
    print(f"distilled {made['source']} into {made['path']} ({made['tokens']} tokens x "
          f"{made['dim']} dimensions, {made['distill_s']} s)")
    print(f"use it for a new data directory with: [embedding] model = {json.dumps(made['path'])}")
    return 0


def cmd_maintain(args: argparse.Namespace, config: Config) -> int:
    """Run upkeep as the data directory's owner, serving the read API meanwhile (so `query` and
    `status` go on, and show its progress), or hand it to the daemon that owns the stores (the
    local one, or --server's; an admin only); on a terminal abstract regeneration shows nodes
    done, rate and ETA, without one it logs a progress line now and then."""
    from psirag_kb.service.client import remote_daemon, running_daemon
    from psirag_kb.service.daemon import Daemon

    daemon = remote_daemon(config) or running_daemon(config)
    if daemon is not None:
        _print_report(_maintain_via_daemon(daemon), args.json)
        return 0
    owner = Daemon(config.replace("api", host="127.0.0.1", port=0), serve_only=True)
    owner.start()
    try:
        with _AbstractBar(owner.kb):
            report = owner.kb.maintain()
    finally:
        owner.stop()
    _print_report(report, args.json)
    return 0


def cmd_reembed(args: argparse.Namespace, config: Config) -> int:
    """Start (or cancel) a reembed in the daemon when one runs, else here; follow it."""
    from psirag_kb.service.client import remote_daemon, running_daemon

    if bool(args.model) == bool(args.cancel):
        raise KBError("give --model NAME_OR_PATH or --cancel")
    daemon = remote_daemon(config) or running_daemon(config)
    if daemon is not None:
        started = daemon.reembed(args.model or "", cancel=args.cancel)
        if args.cancel:
            _print_report(started, args.json)
            return 0
        print(f"reembed to {started['model']} runs in the daemon ({daemon.url}); Ctrl-C stops "
              "following it, not the reembed (`reembed --cancel` stops it)", file=sys.stderr)
        _print_report(_follow_reembed(daemon.status, started["model"]), args.json)
        return 0
    with _open(config) as kb:
        if args.cancel:
            _print_report(kb.cancel_reembed(), args.json)
            return 0
        started = kb.reembed(args.model)
        print(f"reembed to {started['model']}: Ctrl-C stops it; the next `reembed --model` "
              "with the same model (or the daemon) resumes where it was", file=sys.stderr)
        _print_report(_follow_reembed(kb.status, started["model"]), args.json)
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


FOLLOW_S = 1.0
"""Seconds between two looks at a daemon's status while it runs maintain for the command."""


def _maintain_via_daemon(daemon: Any) -> dict[str, Any]:
    """Have the daemon that owns the stores run maintain on its writer (an admin only), showing
    its progress from its status until the run ends; the run's report."""
    asked = daemon.maintain()
    print(f"maintain runs in the daemon (pid {asked['pid']}, {daemon.url}); Ctrl-C stops "
          "following it, not the run", file=sys.stderr)
    view = _AbstractBar(None)
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


PROGRESS_LOG_S = 30.0
"""Seconds between the progress lines `maintain` logs without a terminal."""


class _AbstractBar:
    """While open, abstract regeneration shows nodes done, rate and ETA on a terminal, and an
    interruption says how many abstracts were kept (with `kb` None: shows what `show` gets)."""

    def __init__(self, kb: Any) -> None:
        self.kb = kb
        self.bar = None
        self.logged = -PROGRESS_LOG_S
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.bar = Progress("[progress.description]{task.description}", BarColumn(),
                                MofNCompleteColumn(), TextColumn("{task.fields[speed]}"),
                                console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("abstracts", total=None, speed="")

    def __enter__(self) -> _AbstractBar:
        if self.kb is not None:
            self.kb.abstract_job.on_progress = self.show
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
        if self.kb is None:
            return
        self.kb.abstract_job.on_progress = None
        if kind is KeyboardInterrupt:
            done = self.kb.abstract_job.last_result.get("regenerated", 0)
            print(f"abstracts kept: {done} written before the interruption", file=sys.stderr)

    def show(self, progress: dict[str, Any]) -> None:
        """Draw one progress snapshot of the abstract job (a line now and then without a
        terminal)."""
        if not progress.get("running"):
            return
        eta = progress["eta_s"]
        speed = f"{progress['rate_per_s']:.2f} nodes/s, " + (
            "ETA ?" if eta is None else f"ETA {int(eta) // 60}:{int(eta) % 60:02d}")
        if progress["failed"]:
            speed += f", {progress['failed']} failed"
        hosts = progress.get("hosts") or []
        if len(hosts) > 1:
            speed += ", " + " ".join(f"{h['host'].split('://')[-1]} {h['rate_per_s']:.2f}/s"
                                     for h in hosts)
        handled = progress["done"] + progress["failed"] + progress["skipped"]
        if self.bar is not None:
            self.bar.update(self.task, completed=handled, total=progress["total"], speed=speed)
            return
        now = time.monotonic()
        if now - self.logged >= PROGRESS_LOG_S or handled >= progress["total"]:
            self.logged = now
            print(f"abstracts: {handled}/{progress['total']} nodes, {speed}", file=sys.stderr,
                  flush=True)


def _print_report(report: dict[str, Any], as_json: bool) -> None:
    """A report as one JSON object, or as `key: value` lines."""
    if as_json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        print(f"{key}: {value}")


def cmd_daemon(args: argparse.Namespace, config: Config) -> int:
    from psirag_kb.service.daemon import run_daemon

    if args.host is not None:
        config = config.replace("api", host=args.host)
    if args.port is not None:
        config = config.replace("api", port=args.port)
    if args.web_port is not None:
        config = config.replace("web", port=args.web_port, enabled=True)
    if args.no_web:
        config = config.replace("web", enabled=False)
    return run_daemon(config, [p.resolve() for p in args.watch], verbose=args.verbose)


def _users_call(config: Config) -> Any:
    """`users` commands: the remote or running daemon's API (admin token), else people.json
    in the data directory (a running daemon sees that within a second)."""
    from psirag_kb.people import People, Users
    from psirag_kb.service.client import remote_daemon, running_daemon

    daemon = remote_daemon(config) or running_daemon(config)
    if daemon is not None:
        return daemon.users
    users = Users(People(config.data_dir))

    def local(action: str, name: str = "", role: str | None = None,
              read: list[str] | None = None) -> dict[str, Any]:
        if action == "list":
            return users.list()
        if action == "add":
            return users.add(name, role or "reader", read or [])
        if action in ("revoke", "rotate"):
            return getattr(users, action)(name)
        return getattr(users, action)(name, read or [])

    return local


def cmd_users(args: argparse.Namespace, config: Config) -> int:
    call = _users_call(config)
    read = [p if config.api.server else os.path.abspath(os.path.expanduser(p))
            for p in getattr(args, "read", None) or []]
    if args.action == "list":
        result = call("list")
    elif args.action == "add":
        result = call("add", args.name, args.role, read)
    else:
        result = call(args.action, args.name, read=read)
    if args.json:
        print(json.dumps({"name": result["name"], "token": result["token"]}
                         if "token" in result else result))
        return 0
    if "token" in result:
        print(f"token of {result['name']} (shown this once; give it to them, they set "
              f"PSIRAG_KB_TOKEN or [api] token_file):\n{result['token']}")
    elif "users" in result:
        for person in result["users"]:
            source = person.get("source", "token")
            print(f"{person['name']:<20} {person['role']:<7} {source:<5} created "
                  f"{_when(person['created'])}, last used {_when(person['last_used'])}"
                  + (f", last sign-in {_when(person.get('last_sign_in'))}"
                     if source != "token" else ""))
            if person.get("groups"):
                print(f"    groups {', '.join(person['groups'])}")
            for grant in person["grants"]:
                print(f"    reads {grant}")
            for grant in person.get("group_grants", []):
                if grant not in person["grants"]:
                    print(f"    reads {grant} (from a group)")
            for token in person.get("tokens", []):
                print(f"    token {token['name']}: made {_when(token['created'])}, last used "
                      f"{_when(token['last_used'])}")
        if not result["users"]:
            print("nobody yet: `psirag-kb users add NAME --read FOLDER`")
    elif "revoked" in result:
        print(f"{result['revoked']} removed; their token no longer works")
    else:
        print(f"{result['name']} ({result['role']}) reads: "
              f"{', '.join(result['grants']) or 'nothing'}")
    return 0


def _when(stamp: float | None) -> str:
    return "never" if not stamp else time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


def cmd_tui(args: argparse.Namespace, config: Config) -> int:
    from psirag_kb.service.client import HTTPClient, remote_daemon, running_daemon
    from psirag_kb.service.handover import HandoverClient, connect_session

    try:
        from tui.app import run
    except ImportError as exc:
        raise KBError(f"the terminal UI cannot start ({exc}); reinstall psirag-kb") from None
    config.data_dir.mkdir(parents=True, exist_ok=True)
    # The screen belongs to the TUI: log to a file instead of stderr.
    logging.basicConfig(filename=config.data_dir / "tui.log", force=True,
                        level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    client = connect_session(config, "tui")
    reconnect = None
    if isinstance(client, HTTPClient):
        reconnect = (lambda: remote_daemon(config)) if client.remote else \
            (lambda: running_daemon(config))
    elif isinstance(client, HandoverClient):  # a daemon handed over to may go away later
        reconnect = lambda: running_daemon(config, quiet=True)  # noqa: E731
    run(client, reconnect)
    return 0


def cmd_mcp(args: argparse.Namespace, config: Config) -> int:
    from contextlib import redirect_stdout

    from psirag_kb.service.handover import connect_session

    try:
        from psirag_kb.service.mcp import build_server
    except ImportError as exc:
        raise KBError(f"the MCP server cannot start ({exc}); install it with "
                      "`pip install 'mcp>=2.3'`") from None
    with redirect_stdout(sys.stderr):  # stdout carries the protocol alone
        client = connect_session(config, "mcp")
    with closing(client):
        build_server(client).run("stdio")  # the SDK diverts fd 1 to stderr while it serves
    return 0


def cmd_chat(args: argparse.Namespace, config: Config) -> int:
    """A conversation: each line is a question; a follow-up is searched with the subject of
    the earlier turns ("searched: ..." says how)."""
    interactive = sys.stdin.isatty() and not args.json
    with _client(config) as kb:
        within = args.within and [p if config.api.server else os.path.abspath(p)
                                  for p in args.within]
        conversation = args.conversation or kb.new_conversation()["id"]
        if args.conversation:
            kb.conversation(conversation)  # an unknown id fails before the first question
        if interactive:
            print(f"conversation {conversation} (continue it later with `psirag-kb chat "
                  f"--conversation {conversation}`); an empty line or Ctrl-D ends it",
                  file=sys.stderr)
        while True:
            try:
                line = input("> " if interactive else "")
            except EOFError:
                break
            if not line.strip():
                if interactive:
                    break
                continue
            try:
                result = kb.ask(line, conversation=conversation, mode=args.mode, k=args.k,
                                **({"within": within} if within else {}))
            except KBError as exc:  # one bad question does not end the conversation
                print(f"error: {exc}", file=sys.stderr)
                continue
            if args.json:
                print(json.dumps(result), flush=True)
            else:
                if not interactive:
                    print(f"Q: {line.strip()}")
                _print_result(result)
                print(flush=True)
    return 0


def cmd_conversations(args: argparse.Namespace, config: Config) -> int:
    """List, show, rename or delete the caller's stored conversations."""
    action = args.action or "list"
    with _client(config) as kb:
        if action == "list":
            result = kb.conversations()
        elif action == "show":
            result = kb.conversation(args.id)
        elif action == "rename":
            result = kb.rename_conversation(args.id, args.title)
        else:
            result = kb.delete_conversation(args.id)
    if args.json:
        print(json.dumps(result))
    elif action == "list":
        for talk in result["conversations"]:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(talk["updated"]))
            print(f"{talk['id']}  {when}  {talk['turns']:3d} turn(s)  {talk['title']}")
        if not result["conversations"]:
            print("no conversations yet: start one with `psirag-kb chat`")
    elif action == "show":
        print(f"{result['title']} ({result['id']})")
        for turn in result["turns"]:
            searched = (f"  (searched: {turn['searched']})"
                        if turn["rewrite"] != "as_is" else "")
            print(f"\n{turn['turn']}. {turn['question']}{searched}")
            if turn.get("answer"):
                print(f"   {turn['answer']}")
            for passage in turn["passages"]:
                if passage.get("withheld"):
                    print(f"   [{passage['rank']}] withheld (no longer readable to you)")
                else:
                    print(f"   [{passage.get('number', passage['rank'])}] {place(passage)}")
    elif action == "rename":
        print(f"{result['id']}: {result['title']}")
    else:
        print(f"deleted {result['deleted']}")
    return 0


COMMANDS = {
    "chat": cmd_chat, "conversations": cmd_conversations,
    "tui": cmd_tui,
    "mcp": cmd_mcp,
    "ingest": cmd_ingest, "forget": cmd_forget, "query": cmd_query, "status": cmd_status,
    "eval": cmd_eval,
    "backup": cmd_backup, "restore": cmd_restore,
    "tree": cmd_tree, "maintain": cmd_maintain, "hops": cmd_hops, "daemon": cmd_daemon,
    "reembed": cmd_reembed,
    "distill": cmd_distill, "users": cmd_users,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = _config(args)
        return COMMANDS[args.command](args, config)
    except KBError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

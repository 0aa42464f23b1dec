"""The `psirag-kb` argument parser: shared option groups and one small builder per command."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from psirag_kb.config import DEFAULT_MODEL
from psirag_kb.people import ROLES
from psirag_kb.search.retrieval import EVAL_MODES, MODES

JSON_HELP = "print one JSON object"
TOKEN_JSON_HELP = 'print {"name", "token"}'
Commands = argparse._SubParsersAction


def _version_text() -> str:
    """`psirag-kb --version`: the release and its database schema."""
    from psirag_kb import __version__
    from psirag_kb.storage.migrations import SCHEMA_VERSION

    return f"psirag-kb {__version__} (database schema {SCHEMA_VERSION})"


def json_option(help: str = JSON_HELP) -> argparse.ArgumentParser:
    """The `--json` switch of a command, with its help."""
    group = argparse.ArgumentParser(add_help=False)
    group.add_argument("--json", action="store_true", help=help)
    return group


def search_options(within_help: str) -> argparse.ArgumentParser:
    """What `query` and `chat` share: the retrieval mode, the depth and the folders searched."""
    group = argparse.ArgumentParser(add_help=False)
    group.add_argument("--mode", choices=(*MODES, "agent"),
                       help="retrieval mode (default: from config); agent answers with the LLM")
    group.add_argument("-k", type=int, help="number of results")
    group.add_argument("--in", dest="within", action="append", metavar="PATH", help=within_help)
    return group


def global_options() -> argparse.ArgumentParser:
    """Where the data and the daemon are: config file, data directory, server and token."""
    group = argparse.ArgumentParser(add_help=False)
    group.add_argument("--config", type=Path, metavar="FILE",
                       help="config file (default: ./config.toml)")
    group.add_argument("--data-dir", type=Path, metavar="DIR",
                       help="data directory (overrides [storage])")
    group.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    group.add_argument("--version", action="version", version=_version_text(),
                       help="this release and the schema version of the databases it writes")
    group.add_argument("--server", metavar="URL",
                       help="a remote daemon for query, status, tree, tui, mcp and users "
                            "(overrides PSIRAG_KB_URL and [api] server); its token comes from "
                            "PSIRAG_KB_TOKEN, --token-file or [api] token / token_file")
    group.add_argument("--token-file", metavar="FILE",
                       help="a file holding the daemon's API token (overrides [api] token_file)")
    group.add_argument("--insecure-http", action="store_true",
                       help="allow an http:// --server beyond loopback, sending the token in "
                            "clear text (sets [api] insecure_http)")
    return group


def _ingest(commands: Commands) -> None:
    ingest = commands.add_parser("ingest", help="index files and folders",
                                 parents=[json_option("print the report as JSON")])
    ingest.add_argument("paths", nargs="*", type=Path, help="files or folders (recursive)")
    ingest.add_argument("--jsonl", type=Path, action="append", default=[], metavar="FILE",
                        help='a benchmark corpus of {"id","title","text"} lines')
    ingest.add_argument("--no-abstracts", action="store_true",
                        help="leave the tree's keyword abstracts to `maintain` or the daemon")
    ingest.add_argument("--ray", metavar="ADDRESS",
                        help="read and embed on a Ray cluster: HOST:PORT of its head, or auto "
                             "(the `ray start` cluster on this machine); overrides [compute] "
                             "ray_address")
    forget = commands.add_parser(
        "forget", parents=[json_option("print the result as JSON")],
        help="remove files or folders from the index on purpose (a folder that vanished keeps "
             "its files as unavailable until then)")
    forget.add_argument("paths", nargs="+", type=Path, help="indexed files or folders")


def _query(commands: Commands) -> None:
    query = commands.add_parser("query", help="search the knowledge base", parents=[
        search_options("only results from files under this folder, or this file (repeatable)"),
        json_option()])
    query.add_argument("text", help="the question or search terms")
    query.add_argument("--summarize", action="store_true",
                       help="18 passages from the tree alone, in corpus order, summarised by "
                            "the LLM when one is enabled")
    query.add_argument("--conversation", metavar="ID",
                       help="a turn of this stored conversation (`chat` prints its id): a "
                            "follow-up is searched with the earlier turns' subject")


def _chat(commands: Commands) -> None:
    chat = commands.add_parser(
        "chat", parents=[search_options("only results from files under this folder, or this "
                                        "file"),
                         json_option("print one JSON object per question")],
        help="ask questions in a conversation: follow-ups are resolved against the earlier "
             "turns (a REPL on a terminal; one question per line on a pipe)")
    chat.add_argument("--conversation", metavar="ID", help="continue this conversation")
    talks = commands.add_parser("conversations", parents=[json_option()],
                                help="list, show, rename or delete your stored conversations")
    actions = talks.add_subparsers(dest="action")
    actions.add_parser("list", help="your conversations, most recent first (the default)")
    for action, what in (("show", "a conversation's turns"), ("delete", "delete one")):
        actions.add_parser(action, help=what).add_argument("id")
    rename = actions.add_parser("rename", help="give one a new title")
    rename.add_argument("id")
    rename.add_argument("title")


def _eval(commands: Commands) -> None:
    evaluate = commands.add_parser("eval", help="recall of each mode on benchmark questions",
                                   parents=[json_option()])
    evaluate.add_argument("--corpus", type=Path, action="append", required=True, metavar="FILE",
                          help="JSONL corpus (repeatable: corpora are mixed as distractors)")
    evaluate.add_argument("--questions", type=Path, required=True, metavar="FILE",
                          help='JSONL of {"question", "supporting_ids"}')
    evaluate.add_argument("--modes", default="sparse,dense,tree,hybrid",
                          help=f"comma-separated, from {','.join(EVAL_MODES)},flat_whole "
                               "(exact cosine over whole passages, the baseline)")
    evaluate.add_argument("-k", type=int, default=5, help="retrieval depth (at least 5)")
    evaluate.add_argument("--batches", type=int, default=1, metavar="N",
                          help="feed the corpora in N shuffled incremental batches")
    evaluate.add_argument("--abstracts", action="store_true",
                          help="generate abstracts before querying (timed as abstract_s)")

def _tree(commands: Commands) -> None:
    tree = commands.add_parser("tree", help="show a tree node (the root by default)",
                               parents=[json_option()])
    tree.add_argument("node", nargs="?", type=int, help="abstract node id")
    hops = commands.add_parser("hops", help="predict how many retrieval hops a question needs",
                               parents=[json_option()])
    hops.add_argument("question", nargs="?", help="the question")
    hops.add_argument("--eval", type=Path, metavar="FILE",
                      help='score a labelled JSONL of {"question", "hops"}')
    commands.add_parser("maintain", help="repair drifted subtrees, refresh abstracts",
                        parents=[json_option()])


def _backup(commands: Commands) -> None:
    backup = commands.add_parser(
        "backup", parents=[json_option()],
        help="copy the knowledge base into a new folder while it goes on serving: with no "
             "daemon running, in-process; else the daemon takes it into its [backup] dir (its "
             "API never writes elsewhere) and this command moves it to DEST",
        description="Copy the knowledge base into DEST while it goes on serving. With no daemon "
                    "running, this command opens the data directory and writes DEST itself. With "
                    "a daemon running, over its API a backup is named, never placed: the daemon "
                    "takes it into its [backup] dir (refused with 409 when none is set: set "
                    "[backup] dir in its config.toml and restart it), then this command, the OS "
                    "user at the daemon's machine, moves it to DEST. With --server, DEST is the "
                    "backup's name in that daemon's [backup] dir.")
    backup.add_argument("dest", help="a new or empty folder on this machine; with --server: "
                                     "the backup's name in that daemon's [backup] dir")
    restore = commands.add_parser(
        "restore", parents=[json_option()],
        help="bring a backup back into an empty data directory (no daemon on it)")
    restore.add_argument("src", type=Path, help="a folder `backup` wrote")
    restore.add_argument("--force", action="store_true",
                         help="replace what the data directory holds")


def _models(commands: Commands) -> None:
    reembed = commands.add_parser(
        "reembed", parents=[json_option()],
        help="embed every chunk with another model in the background, then switch to it "
             "(queries and indexing go on meanwhile)")
    reembed.add_argument("--model", metavar="NAME_OR_PATH",
                         help="the new model: a sentence-transformers name or local folder "
                              "(a static model from `distill`); with a daemon running, a "
                              "folder must be inside its [embedding] models_dir")
    reembed.add_argument("--cancel", action="store_true",
                         help="stop the running reembed and keep the current model")


def _status(commands: Commands) -> None:
    commands.add_parser("status", help="what is indexed", parents=[json_option()])
    commands.add_parser("tui", help="the terminal UI (through the daemon when one runs)")
    commands.add_parser("mcp", help="serve the knowledge base to an AI assistant over MCP (stdio)")


def _distill(commands: Commands) -> None:
    distill = commands.add_parser(
        "distill", parents=[json_option()],
        help="make a fast static embedding model from a local one (needs model2vec)")
    distill.add_argument("out_dir", type=Path, metavar="OUT_DIR",
                         help="new folder for the model; then set [embedding] model to it")
    distill.add_argument("--pca-dims", type=int, default=256, metavar="N",
                         help="dimensions of the static model (default 256)")
    distill.add_argument("--source", default=DEFAULT_MODEL, metavar="MODEL",
                         help="local sentence-transformers folder (default: the bundled MiniLM)")


def _users(commands: Commands) -> None:
    users = commands.add_parser(
        "users", help="people of a team server: tokens, roles, folder grants (through the "
                      "running daemon, else on the data directory)")
    people = users.add_subparsers(dest="action", required=True)
    add = people.add_parser("add", help="create a person and print their token once",
                            parents=[json_option(TOKEN_JSON_HELP)])
    add.add_argument("name")
    add.add_argument("--role", choices=ROLES, default="reader",
                     help="reader (search and read), editor (also reindex inside their "
                          "grants), admin (everything, including people), monitor (metrics and "
                          "health only); default reader")
    add.add_argument("--read", action="append", default=[], metavar="PATH",
                     help="a folder or file they may read (repeatable)")
    people.add_parser("list", help="names, roles, grants, created, last used",
                      parents=[json_option()])
    for action, what in (("grant", "let NAME read PATH too"),
                         ("ungrant", "take a grant of NAME away")):
        change = people.add_parser(action, help=what, parents=[json_option()])
        change.add_argument("name")
        change.add_argument("--read", action="append", required=True, metavar="PATH",
                            help="a folder or file (repeatable)")
    people.add_parser("revoke", help="remove a person; their token stops working",
                      parents=[json_option()]).add_argument("name")
    people.add_parser("rotate", help="give a person a new token (the old one stops)",
                      parents=[json_option(TOKEN_JSON_HELP)]).add_argument("name")


def _daemon(commands: Commands) -> None:
    daemon = commands.add_parser("daemon", help="watch folders and serve the HTTP API")
    daemon.add_argument("--watch", type=Path, action="append", default=[], metavar="DIR",
                        help="also watch this folder (repeatable; adds to [watch] folders)")
    daemon.add_argument("--host", help="bind address (overrides [api] host)")
    daemon.add_argument("--port", type=int, help="TCP port, 0 for any (overrides [api] port)")
    daemon.add_argument("--web-port", type=int, metavar="N",
                        help="the team's web page on port N, 0 for any (overrides [web] port)")
    daemon.add_argument("--no-web", action="store_true", help="serve no web page")


BUILDERS: tuple[Callable[[Commands], None], ...] = (
    _ingest, _query, _chat, _eval, _tree, _backup, _models, _status, _distill, _users, _daemon,
)
"""The commands' builders, in the order `psirag-kb --help` lists the commands."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of `psirag-kb` and all its commands."""
    parser = argparse.ArgumentParser(
        prog="psirag-kb", description="An always-on knowledge base for document folders.",
        parents=[global_options()])
    commands = parser.add_subparsers(dest="command", required=True)
    for build in BUILDERS:
        build(commands)
    return parser

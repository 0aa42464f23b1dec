"""The console script's `main`: parse the command line, load the config, run one command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from psirag_kb.cli.commands.backup import cmd_backup, cmd_restore
from psirag_kb.cli.commands.indexing import cmd_forget, cmd_ingest
from psirag_kb.cli.commands.inspecting import cmd_status, cmd_tree
from psirag_kb.cli.commands.maintenance import cmd_maintain, cmd_reembed
from psirag_kb.cli.commands.models import cmd_distill, cmd_eval, cmd_hops
from psirag_kb.cli.commands.querying import cmd_chat, cmd_conversations, cmd_query
from psirag_kb.cli.commands.serving import cmd_daemon, cmd_mcp, cmd_tui
from psirag_kb.cli.commands.users import cmd_users
from psirag_kb.cli.connection import config_from
from psirag_kb.cli.parser import build_parser
from psirag_kb.config import Config
from psirag_kb.errors import KBError

COMMANDS: dict[str, Callable[[argparse.Namespace, Config], int]] = {
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
"""Each command's handler by its name on the command line."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = config_from(args)
        return COMMANDS[args.command](args, config)
    except KBError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

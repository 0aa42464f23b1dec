"""`daemon`, `tui` and `mcp`: serving the knowledge base, and the sessions that use it."""

from __future__ import annotations

import argparse
import logging
import sys
from contextlib import closing

from psirag_kb.config import Config
from psirag_kb.errors import KBError


def cmd_daemon(args: argparse.Namespace, config: Config) -> int:
    """Watch folders and serve the HTTP API (and the web page) until stopped."""
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


def cmd_tui(args: argparse.Namespace, config: Config) -> int:
    """The terminal UI on a session with the daemon (or in-process), reconnecting when it can."""
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
    """Serve the knowledge base to an AI assistant over MCP on stdio."""
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

"""How a command reaches the knowledge base: its config, in-process, or through a daemon."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from typing import Any

from psirag_kb.config import Config, load_config
from psirag_kb.errors import KBError


def config_from(args: argparse.Namespace) -> Config:
    """The config file with the command line's data directory, server and token on top."""
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


def local_only(config: Config, command: str) -> None:
    """Refuse a command that works on this machine's data directory when a server is named."""
    if config.api.server:
        raise KBError(f"`{command}` works on this machine's data directory, not on the remote "
                      f"daemon {config.api.server}; a remote daemon indexes the folders it "
                      "watches (drop --server / PSIRAG_KB_URL to work locally)")


@contextmanager
def open_kb(config: Config) -> Iterator[Any]:
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


def client(config: Config) -> AbstractContextManager[Any]:
    """The running daemon's API, or the knowledge base in-process."""
    from psirag_kb.service.client import connect

    return closing(connect(config))


def local_paths(config: Config, paths: list[str] | None) -> list[str] | None:
    """Folder filters as given for a remote daemon, else made absolute on this machine."""
    return paths and [p if config.api.server else os.path.abspath(p) for p in paths]


def print_report(report: dict[str, Any], as_json: bool) -> None:
    """A report as one JSON object, or as `key: value` lines."""
    if as_json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        print(f"{key}: {value}")

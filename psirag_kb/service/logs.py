"""The daemon's log: stderr and a rotating daemon.log in the data directory."""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

LOG_FILE = "daemon.log"
LOG_BYTES = 5_000_000
LOG_BACKUPS = 3


def configure_logging(data_dir: Path, verbose: bool = False) -> None:
    """Log to stderr (set up by the CLI) and to a rotating daemon.log in the data directory."""
    root = logging.getLogger("psirag_kb")
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    handler = logging.handlers.RotatingFileHandler(
        Path(data_dir) / LOG_FILE, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8"
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")

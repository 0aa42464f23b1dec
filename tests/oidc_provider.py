"""A real OpenID provider for the tests: npm's oidc-provider, installed once into a cache folder
and run by tests/oidc/provider.mjs on loopback, with accounts whose groups a test rewrites."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from skipped import reasons

VERSION = "9.13.3"
SCRIPT = Path(__file__).parent / "oidc" / "provider.mjs"
CLIENT_ID = "psirag-kb-tests"
SKIPPED = "OIDC tests skipped"


def _skip(reason: str) -> None:
    """Skip the test; the summary says so again at the end of the run (never silently)."""
    pytest.skip(f"{SKIPPED}: {reason}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The reason the OIDC tests did not run, plainly, after the run."""
    skipped = reasons(terminalreporter, SKIPPED)
    if skipped:
        terminalreporter.write_sep("=", skipped[0], yellow=True, bold=True)


def cache_folder() -> Path:
    """Where oidc-provider is installed (PSIRAG_KB_TEST_CACHE, else ~/.cache/psirag-kb-tests),
    reused between runs."""
    base = os.environ.get("PSIRAG_KB_TEST_CACHE") or Path.home() / ".cache" / "psirag-kb-tests"
    return Path(base) / "oidc"


def installed() -> Path:
    """The oidc-provider package folder, installed with npm when missing; the test is skipped,
    saying why, when Node, npm or the registry is not there. One process installs at a time
    (make test runs two pytest workers)."""
    folder = cache_folder()
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install(folder)


def _install(folder: Path) -> Path:
    package = folder / "node_modules" / "oidc-provider"
    try:
        if json.loads((package / "package.json").read_text())["version"] == VERSION:
            return package
    except (OSError, ValueError, KeyError):
        pass
    if shutil.which("node") is None or shutil.which("npm") is None:
        _skip("Node.js and npm are not installed")
    if not (folder / "package.json").exists():
        (folder / "package.json").write_text('{"private": true}\n')
    try:
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund",
                               f"oidc-provider@{VERSION}"], cwd=folder, capture_output=True,
                              text=True, timeout=300)
    except subprocess.TimeoutExpired:
        _skip("`npm install oidc-provider` did not finish in 300 s (is "
              "npm's registry reachable?)")
    if done.returncode != 0 or not (package / "package.json").exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        _skip("npm's registry cannot be reached or the install failed "
              f"({' | '.join(tail)})")
    return package


def free_port(host: str) -> int:
    """A port free on `host` now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class Provider:
    """oidc-provider serving `http://host:port` with one confidential client; `accounts` maps
    a login name to its groups (rewritten by `set_groups`)."""

    def __init__(self, folder: Path, host: str = "127.0.0.2") -> None:
        self.host = host
        self.port = free_port(host)
        self.issuer = f"http://{host}:{self.port}"
        self.secret_file = folder / "oidc-secret"
        self.secret_file.write_text("psirag-kb-test-client-secret-0123456789\n")
        self.accounts_file = folder / "accounts.json"
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def set_groups(self, accounts: dict[str, list[str]]) -> None:
        """The accounts and their groups, seen at their next sign-in."""
        temporary = self.accounts_file.with_suffix(".tmp")
        temporary.write_text(json.dumps({name: {"groups": groups}
                                         for name, groups in accounts.items()}))
        os.replace(temporary, self.accounts_file)

    def start(self, redirect_uri: str, wait_s: float = 30.0) -> None:
        """Run the provider until `stop`."""
        package = installed()
        env = dict(os.environ, PSIRAG_OIDC_MODULE=str(package), PSIRAG_OIDC_HOST=self.host,
                   PSIRAG_OIDC_PORT=str(self.port), PSIRAG_OIDC_CLIENT_ID=CLIENT_ID,
                   PSIRAG_OIDC_CLIENT_SECRET=self.secret_file.read_text().strip(),
                   PSIRAG_OIDC_REDIRECT_URI=redirect_uri,
                   PSIRAG_OIDC_ACCOUNTS=str(self.accounts_file))
        self.process = subprocess.Popen(["node", str(SCRIPT)], env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        ready = threading.Event()

        def read() -> None:
            assert self.process is not None and self.process.stdout is not None
            for line in self.process.stdout:
                self.output.append(line.rstrip())
                if line.startswith("listening "):
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + wait_s
        while not ready.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the OpenID provider did not start:\n" +
                                   "\n".join(self.output[-20:]))

    def stop(self) -> None:
        """Stop the provider process (this one only)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def auth_config(self, groups: dict[str, dict[str, Any]], **auth: Any) -> Any:
        """An [auth] configuration naming this provider and these groups."""
        from psirag_kb.config import parse_config

        table = {"oidc": {"issuer": self.issuer, "client_id": CLIENT_ID,
                          "client_secret_file": str(self.secret_file),
                          "scopes": ["openid", "profile", "groups"],
                          "button": "Sign in with Test ID"},
                 "groups": groups, **auth}
        return parse_config({"auth": table}, Path("/")).auth

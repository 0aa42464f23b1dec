"""One KBClient interface for the CLI and TUI: over the daemon's HTTP API, or in-process."""

from __future__ import annotations

import json
import logging
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlencode, urljoin, urlsplit

from psirag_kb.config import Config, server_url
from psirag_kb.errors import ConversationNotFound, KBError, NodeNotFound, TreeEmpty
from psirag_kb.serving.auth import api_token, is_loopback
from psirag_kb.serving.ops import OPS, Op, op
from psirag_kb.storage.datadir import (
    COMMAND,
    DAEMON,
    LOCK_FILE,
    SESSION,
    DataDirLock,
    holder,
    pid_alive,
    takeover_requested,
)

__all__ = ["DAEMON_FILE", "LOCK_FILE", "STARTING_FILE", "HTTPClient", "LocalClient", "NotServing",
           "connect", "open_local", "running_daemon"]

log = logging.getLogger(__name__)

DAEMON_FILE = "daemon.json"
"""In the data directory while a daemon runs: {"pid", "url", "data_dir", "started"}."""
STARTING_FILE = "daemon.starting.json"
"""In the data directory while a daemon starts (its API answers 503 with the reason): {"pid",
"url"}; removed once daemon.json is written."""
DAEMON_START_WAIT_S = 300.0
"""How long a command waits for a starting daemon's API (it may be opening a large KB)."""
TIMEOUT_S = 30.0
LONG_TIMEOUT_S = 3600.0
"""A backup copies the whole knowledge base (minutes at a million chunks on a slow disk); a
reindex may read a whole folder."""
HEALTH_TIMEOUT_S = 2.0
LLM_TIMEOUT_S = 900.0
"""Agent answers and summaries wait for the daemon's LLM calls."""
TIMEOUTS = {"short": HEALTH_TIMEOUT_S, "long": LONG_TIMEOUT_S, "llm": LLM_TIMEOUT_S}
"""An operation's timeout class (see `Op.timeout`) -> seconds; "default" is the client's."""


class KBClient(Protocol):
    """What the CLI and the TUI may ask of a knowledge base (for typing only: most of the
    clients' methods are made from the table of operations, see `_operations`)."""

    def query(self, text: str, mode: str | None = None, k: int | None = None,
              summarize: bool = False, within: list[str] | None = None) -> dict[str, Any]: ...
    def status(self) -> dict[str, Any]: ...
    def chunk(self, chunk_id: int, neighbours: int = 0) -> dict[str, Any]: ...
    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]: ...
    def node(self, node_id: int | None = None) -> dict[str, Any]: ...
    def path(self, chunk_id: int) -> list[dict[str, Any]]: ...
    def reindex(self, path: str | Path) -> dict[str, Any]: ...
    def forget(self, path: str | Path) -> dict[str, Any]: ...
    def ask(self, question: str, conversation: str | None = None,
            history: list[Any] | None = None, mode: str | None = None, k: int | None = None,
            within: list[str] | None = None) -> dict[str, Any]: ...
    def conversations(self) -> dict[str, Any]: ...
    def conversation(self, conversation: str) -> dict[str, Any]: ...
    def new_conversation(self, title: str = "") -> dict[str, Any]: ...
    def rename_conversation(self, conversation: str, title: str) -> dict[str, Any]: ...
    def delete_conversation(self, conversation: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


def daemon_info(data_dir: Path, name: str = DAEMON_FILE) -> dict[str, Any] | None:
    """The daemon.json (or `name`: daemon.starting.json) of a data directory whose process is
    alive, if any."""
    try:
        info = json.loads((Path(data_dir) / name).read_text(encoding="utf-8"))
        pid = int(info["pid"])
        str(info["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if pid_alive(pid) else None


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: urllib would send the Authorization header to its target."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        """Decline, so the 3xx answer reaches the caller as an HTTPError."""
        return None


_OPENER = urllib.request.build_opener(_RefuseRedirects)
_warned: set[str] = set()


def check_transport(url: str, insecure_http: bool = False) -> None:
    """Refuse a plain http:// URL to a host beyond loopback, where the token would travel in
    clear text, unless `insecure_http` allows it (then warn, once per URL)."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        return
    try:
        host = parts.hostname or ""
    except ValueError:
        host = ""
    if is_loopback(host):
        return
    if not insecure_http:
        raise KBError(
            f"address failed: {url} is plain http:// to {host or 'a host'} beyond this machine, "
            "which would send the API token in clear text; use an https:// URL (a TLS reverse "
            "proxy in front of the daemon), or on a network you trust allow it with "
            "--insecure-http or [api] insecure_http = true"
        )
    if url not in _warned:
        _warned.add(url)
        log.warning("sending the API token in clear text over plain http:// to %s "
                    "(--insecure-http / [api] insecure_http); use https:// beyond a trusted "
                    "network", url)


class NotServing(KBError):
    """The daemon answers, but is still starting (waiting for a restore, migrating, opening)."""


class HTTPClient:
    """The knowledge base of a running daemon, over its HTTP API.

    A remote daemon's http:// URL beyond loopback is refused unless `insecure_http`; the local
    daemon's own URL (from daemon.json) is this machine's, so its traffic never leaves it.
    Redirects are never followed, so the token only goes to the URL given.
    """

    def __init__(self, url: str, token: str = "", timeout: float = TIMEOUT_S,
                 remote: bool = False, insecure_http: bool = False) -> None:
        if remote:
            check_transport(url, insecure_http)
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.remote = remote

    if TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            """The methods made from the table of operations (see `_operations`)."""

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              timeout: float | None = None,
              on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with _OPENER.open(request, timeout=timeout or self.timeout) as response:
                if on_step is not None:
                    return _streamed_answer(response, on_step, self.url)
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read().decode("utf-8"))
                message = answer["error"]
            except (ValueError, KeyError, TypeError, OSError):
                answer, message = {}, exc.reason
            if exc.code == 503 and isinstance(answer, dict) and "state" in answer:
                raise NotServing(f"the daemon at {self.url} is not serving yet: "
                                 f"{message}") from None
            if 300 <= exc.code < 400:
                raise KBError(self._redirected(path, exc.headers.get("Location"))) from None
            if exc.code == 404 and path.startswith(("/api/tree/", "/api/path/", "/api/chunk/")):
                raise NodeNotFound(message) from None
            if exc.code == 409 and path.startswith("/api/tree"):
                raise TreeEmpty(message) from None
            if exc.code == 404 and path.startswith("/api/conversations/"):
                raise ConversationNotFound(message) from None
            if exc.code == 401:
                raise KBError(
                    f"token refused by {self.url}: {message}. Give the daemon's token in "
                    "PSIRAG_KB_TOKEN, [api] token or [api] token_file (on the daemon's machine "
                    "it is in the data directory's api.token)"
                ) from None
            raise KBError(f"the daemon at {self.url} answered {exc.code}: {message}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise KBError(self._unreachable(exc)) from None
        except ValueError as exc:  # an answer that is not JSON: not a psirag-kb daemon
            raise KBError(f"{self.url} did not answer as a psirag-kb daemon ({exc})") from None

    def _redirected(self, path: str, location: str | None) -> str:
        """Say where the server points instead of following it (with the token)."""
        if not location:
            return (f"address failed: the server at {self.url} answered a redirect without a "
                    "target; check the server URL")
        target = urljoin(self.url + path, location)
        route, base = path.split("?", 1)[0], target.split("?", 1)[0]
        base = base[: -len(route)] if base.endswith(route) else base
        return (f"address failed: the server at {self.url} redirected to {target}; set the "
                f"server URL to {base.rstrip('/')} (the token is not sent on to a redirect)")

    def _unreachable(self, exc: BaseException) -> str:
        """Say whether the address or TLS failed."""
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ssl.SSLCertVerificationError):
            return (f"TLS failed for {self.url}: the server's certificate is not trusted "
                    f"({reason.verify_message}); set SSL_CERT_FILE to its CA's certificate")
        if isinstance(reason, ssl.SSLError | ssl.CertificateError):
            return (f"TLS failed for {self.url} ({reason}); is the server speaking https on "
                    "that port?")
        if isinstance(reason, ConnectionResetError) and self.url.startswith("http:"):
            return (f"{self.url} reset the connection ({reason}); if the server expects TLS, "
                    "use an https:// URL")
        if self.remote:
            return (f"address failed: cannot reach the daemon at {self.url} ({reason}); check "
                    "the URL in --server / PSIRAG_KB_URL / [api] server and that it runs")
        return (f"the daemon at {self.url} is not reachable ({reason}); it may have stopped: "
                "start it with `psirag-kb daemon`, or retry to use the knowledge base in-process")

    def call(self, operation: str, timeout: float | None = None, /, **args: Any) -> Any:
        """The table's `operation` asked of the daemon, with its app method's arguments (path
        parameters, then the body's or query string's fields; None ones left out), as its row
        says: paths made absolute, defaults filled in, its timeout, the field returned."""
        entry = op(operation)
        args = self._prepared(entry, args)
        timeout = timeout or _timeout(entry, args)
        path = entry.url(args)
        given = {key: value for key, value in args.items() if value is not None}
        if entry.query is not None:
            answer = self._call(entry.method, f"{path}?{urlencode(given)}", timeout=timeout)
        elif entry.method in ("GET", "DELETE"):
            answer = self._call(entry.method, path, timeout=timeout)
        else:
            fields = {} if entry.body is None else entry.body.model_fields
            body = {(fields[key].alias or key): value for key, value in given.items()}
            answer = self._call(entry.method, path, body, timeout=timeout)
        return answer[entry.unwrap] if entry.unwrap else answer

    def _prepared(self, entry: Op, args: dict[str, Any]) -> dict[str, Any]:
        """The arguments as sent: typed path parameters as numbers, paths absolute, folders
        absolute on this machine (as given to a remote daemon), defaults for the missing."""
        for name, kind in entry.params.items():
            key = entry.args.get(name, name)
            if kind != "str" and args.get(key) is not None:
                args[key] = int(args[key])
        for key in entry.paths:
            args[key] = os.path.abspath(args[key])
        for key in entry.folders:
            folders = args.get(key)
            args[key] = [p if self.remote else os.path.abspath(p)
                         for p in folders] if folders else None
        for key, value in entry.defaults.items():
            if args.get(key) is None:
                args[key] = value
        if entry.sparse:
            args = {key: value for key, value in args.items() if value}
        return args

    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Agent mode over POST /api/answer, each streamed step passed to `on_step` (by hand:
        the only operation read as a stream of lines, and in-process a call with a callback)."""
        body: dict[str, Any] = {"text": text} if k is None else {"text": text, "k": k}
        return self._call("POST", op("answer").path, body, timeout=LLM_TIMEOUT_S,
                          on_step=on_step or (lambda _step: None))

    def close(self) -> None:
        """Nothing to release."""


def _streamed_answer(response: Any, on_step: Callable[[dict[str, Any]], None],
                     url: str) -> dict[str, Any]:
    """Read /api/answer's NDJSON lines: steps to `on_step`, then the answer (or its error)."""
    for raw in response:
        try:
            line = json.loads(raw.decode("utf-8"))
        except ValueError:
            raise KBError(f"the daemon at {url} sent an unreadable answer line") from None
        if "step" in line:
            on_step(line["step"])
        elif "answer" in line:
            return line["answer"]
        elif "error" in line:
            raise KBError(f"the daemon at {url} could not answer: {line['error']}")
    raise KBError(f"the daemon at {url} closed the answer stream before the answer")


class LocalClient:
    """The knowledge base opened in this process (holding the data directory's lock)."""

    def __init__(self, kb: Any, lock: DataDirLock | None = None) -> None:
        self.kb = kb
        self._lock = lock

    if TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            """The methods made from the table of operations (see `_operations`)."""

    # By hand: the knowledge base names these otherwise than the daemon's app (path_of,
    # ingest), or answers them in another shape (a manifest, a count) or with a callback.

    def backup(self, dest: str) -> dict[str, Any]:
        """Copy the knowledge base into the new folder `dest`; what was copied."""
        from psirag_kb.storage.backup import summary

        return summary(self.kb.backup(Path(os.path.abspath(dest))))

    def path(self, chunk_id: int) -> list[dict[str, Any]]:
        """The abstract nodes above a chunk, root first."""
        return self.kb.path_of(chunk_id)

    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Agent mode, each step passed to `on_step` as soon as it completes."""
        return self.kb.answer(text, k, on_step)

    def reindex(self, path: str | Path) -> dict[str, Any]:
        """Bring one path up to date now."""
        return self.kb.ingest([path]).as_dict()

    def forget(self, path: str | Path) -> dict[str, Any]:
        """Remove an indexed file or folder on purpose (unavailable files included)."""
        return {"removed": self.kb.forget([path])}

    def call(self, operation: str, /, **args: Any) -> Any:
        """The table's `operation` of the knowledge base in-process (as its owner)."""
        entry = op(operation)
        return getattr(self.kb, entry.target or operation)(**{**entry.fixed, **args})

    def close(self) -> None:
        """Close the stores and free the data directory."""
        try:
            self.kb.close()
        finally:
            if self._lock is not None:
                self._lock.release()

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _timeout(entry: Op, args: dict[str, Any]) -> float | None:
    """The operation's timeout for these arguments (None: the client's)."""
    slow = not entry.slow_if or any(args.get(key) == value
                                    for key, value in entry.slow_if.items())
    return TIMEOUTS.get(entry.timeout) if slow else None


def _takes(entry: Op) -> list[str]:
    """The app method's arguments: path parameters, then the body's or query's fields."""
    names = [entry.args.get(p, p) for p in entry.params]
    for model in (entry.body, entry.query):
        names += list(model.model_fields) if model is not None else []
    return names


def _named(name: str, entries: list[Op]) -> Callable[..., Any]:
    """A client method calling the table's operations `entries` (one, or those sharing the
    method `name`): its positional arguments are the row's `positional`, else the path
    parameters, then the body's fields, as the app method names them. Of several, the one
    named by the `action` given first is called, else the one with the most path parameters
    that are all given; arguments only another one takes are left out."""
    entries = sorted(entries, key=lambda entry: -len(entry.params))
    order = next((e.positional for e in entries if e.positional), ()) or _takes(entries[0])
    actions = {entry.action: entry for entry in entries if entry.action}
    takes = {key for entry in entries for key in [*_takes(entry), *entry.fixed]}
    takes |= {"action"} if actions else set()

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) > len(order):
            raise TypeError(f"{name}() takes {len(order)} positional arguments")
        given = dict(zip(order, args, strict=False))
        if clash := set(given) & set(kwargs) or set(kwargs) - takes:
            raise TypeError(f"{name}() got an unexpected or repeated argument "
                            f"{sorted(clash)[0]!r}")
        given.update(kwargs)
        entry = actions[given.pop("action")] if actions else next(
            entry for entry in entries
            if all(given.get(entry.args.get(p, p)) is not None for p in entry.params))
        known = {*_takes(entry), *entry.fixed}
        return self.call(entry.name, **{k: v for k, v in given.items() if k in known})

    method.__name__ = method.__qualname__ = name
    method.__doc__ = entries[0].summary
    return method


def _operations(cls: type, which: Callable[[Op], bool]) -> None:
    """Give `cls` a method for each client method of the operations `which` admits that it
    does not define itself (named after the row's `client`, else its target)."""
    methods: dict[str, list[Op]] = {}
    for entry in OPS:
        name = entry.client or entry.target
        if name and which(entry):
            methods.setdefault(name, []).append(entry)
    for name, entries in methods.items():
        if name not in vars(cls):
            setattr(cls, name, _named(name, entries))


_operations(HTTPClient, lambda entry: True)
_operations(LocalClient, lambda entry: entry.forwarded or entry.local)


def running_daemon(config: Config, wait_s: float = DAEMON_START_WAIT_S,
                   quiet: bool = False) -> HTTPClient | None:
    """A client for the daemon that owns the data directory, if one runs.

    A daemon that holds the data directory but does not serve yet (it is starting: waiting for
    a restore, migrating the schema, opening its stores) is waited for, up to `wait_s` (saying
    on stderr what it does, unless `quiet`).
    """
    deadline = time.monotonic() + wait_s
    told = ""
    while True:
        info = daemon_info(config.data_dir)
        early = daemon_info(config.data_dir, STARTING_FILE)
        owner = holder(config.data_dir)
        starting = early is not None or (
            owner is not None and owner.role == DAEMON and pid_alive(owner.pid))
        if info is None and not starting:
            return None
        error: KBError | None = None
        doing = ""
        if info is not None:
            client = HTTPClient(info["url"], api_token(config))
            try:
                health = client.call("health")
            except KBError as exc:
                error = exc
            else:
                # a token that may not see the pid (a reader's): daemon.json says who serves
                if int(health.get("pid", info["pid"])) == int(info["pid"]):
                    return client
                if not starting:
                    return None
        elif early is not None:
            doing = starting_state(HTTPClient(early["url"], api_token(config)))
        if time.monotonic() >= deadline:
            pid = (info or early or {}).get("pid") or (owner.pid if owner else "?")
            why = f" ({doing})" if doing else f" ({error})" if error else ""
            raise KBError(
                f"a daemon (pid {pid}) owns {config.data_dir} but does not serve yet{why}; "
                f"retry once it serves (its GET /api/ready answers 200), or stop it with "
                f"`kill {pid}`"
            ) from None
        said = doing or "starting"
        if said != told and not quiet:
            print(f"waiting for the daemon on {config.data_dir}: {said}", file=sys.stderr)
            told = said
        time.sleep(0.2)


def starting_state(client: HTTPClient) -> str:
    """"state: reason" of a daemon that is starting, from its /api/health ("" once it serves,
    or when it does not answer)."""
    try:
        health = client.call("health")
    except KBError:
        return ""
    state = health.get("state")
    if not state or state == "serving":
        return ""
    return f"{state}: {health.get('reason') or 'starting'}"


def open_local(config: Config, embedder: Any = None,
               session: str | None = None) -> LocalClient | None:
    """The knowledge base in-process, holding the data directory; None when a daemon owns it.

    A command holding the data directory is waited for, as is a session (`mcp`, `tui`) that
    is handing it over to a daemon; any other session is named in a KBError, since it holds the
    directory until it ends. `session` names the caller when it is such a session itself.
    """
    from psirag_kb.kb import KnowledgeBase

    lock = DataDirLock(config.data_dir)
    role, name = (SESSION, session) if session else (COMMAND, "")
    told = False
    while (found := lock.try_acquire(role, name)) is not None:
        if found.role == DAEMON:
            return None
        if found.role == SESSION and takeover_requested(config.data_dir) is None:
            raise KBError(
                f"{found.describe()} has the knowledge base in {config.data_dir} open "
                "in-process; start the daemon (`psirag-kb daemon`), which takes it over from "
                f"that session within seconds so both can share it, or end it (`kill "
                f"{found.pid}`)")
        if not told:
            print(f"waiting for {found.describe()} to finish with {config.data_dir}",
                  file=sys.stderr)
            told = True
        time.sleep(0.1)
    try:
        return LocalClient(KnowledgeBase(config, embedder), lock)
    except BaseException:
        lock.release()
        raise


def remote_daemon(config: Config) -> HTTPClient | None:
    """A client for the daemon named by --server / PSIRAG_KB_URL / [api] server, checked."""
    url = server_url(config)
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise KBError(f"address failed: the server URL {url!r} must start with http:// or "
                      "https://")
    check_transport(url, config.api.insecure_http)  # before anything is read or sent
    token = api_token(config)
    if not token:
        raise KBError(f"token missing for {url}: set PSIRAG_KB_TOKEN, [api] token or "
                      "[api] token_file to the daemon's token")
    client = HTTPClient(url, token, remote=True, insecure_http=config.api.insecure_http)
    health = client.call("health", TIMEOUT_S)
    deadline, told = time.monotonic() + DAEMON_START_WAIT_S, ""
    while health.get("state") not in (None, "serving"):  # starting: the reason for an admin
        doing = f"{health['state']}: {health.get('reason') or 'starting'}"
        if time.monotonic() >= deadline:
            raise NotServing(f"the daemon at {url} is not serving yet ({doing}); retry once "
                             "its GET /api/ready answers 200")
        if doing != told:
            print(f"waiting for the daemon at {url}: {doing}", file=sys.stderr)
            told = doing
        time.sleep(1.0)
        health = client.call("health", TIMEOUT_S)
    return client  # a wrong token was answered 401 ("token refused") by the first call


def connect(config: Config, embedder: Any = None, session: str | None = None,
            wrap: Callable[[LocalClient], KBClient] | None = None) -> KBClient:
    """A remote daemon when one is named; else the running daemon's API when one owns the
    data directory; else the KB in-process, given to `wrap` when there is one (a long-lived
    session's HandoverClient: see `handover.connect_session`)."""
    remote = remote_daemon(config)
    if remote is not None:
        return cast(KBClient, remote)  # its methods are made from the table
    while True:
        client = running_daemon(config)
        if client is not None:
            return cast(KBClient, client)
        local = open_local(config, embedder, session)
        if local is not None:
            return cast(KBClient, local) if wrap is None else wrap(local)

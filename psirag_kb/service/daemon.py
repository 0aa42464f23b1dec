"""The always-on daemon: owns the data directory, watches folders, runs jobs, serves the API."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from psirag_kb.access import OWNER, Access
from psirag_kb.config import Config, WebConfig
from psirag_kb.errors import AccessDenied, KBError
from psirag_kb.llm.hosts import CALLS
from psirag_kb.paths import inside
from psirag_kb.people import People
from psirag_kb.service.api import APIServer, Listener
from psirag_kb.service.backups import NamedBackups
from psirag_kb.service.client import DAEMON_FILE, STARTING_FILE
from psirag_kb.service.logs import configure_logging
from psirag_kb.service.model_folders import api_model
from psirag_kb.service.refresher import AbstractRefresher
from psirag_kb.service.scheduler import Jobs
from psirag_kb.service.starting import SERVING, EarlyDoor, Starting
from psirag_kb.service.watcher import FolderWatcher, Stopping
from psirag_kb.service.writes import allowed_path, may_write
from psirag_kb.serving.activity import Activity, progress
from psirag_kb.serving.audit import AuditLog
from psirag_kb.serving.auth import configured_token, ensure_token_file
from psirag_kb.serving.ops import OPS
from psirag_kb.storage import migrations
from psirag_kb.storage.backup import (
    RESTORING,
    check_not_restoring,
    last_backup,
    prune,
    scheduled_name,
    summary,
)
from psirag_kb.storage.datadir import DAEMON, DaemonError, DataDirLock, Holder

log = logging.getLogger(__name__)

__all__ = ["Daemon", "DaemonError", "DataDirLock", "configure_logging", "run_daemon"]

BOUNDARIES_EVERY_S = 2.0
"""How often the daemon looks for grants that moved the tree's partition boundaries."""
CONVERSATIONS_EVERY_S = 60.0
"""How often the daemon deletes expired conversations and those of removed people."""
FORWARDED = frozenset(entry.target for entry in OPS if entry.forwarded and entry.target)
"""The operations the daemon passes to the knowledge base as they are."""
RESTORE_WAIT_S = 3600.0
"""How long a starting daemon waits for a restore writing its data directory (answering 503
"restoring" meanwhile) before it gives up with an error."""


class Daemon:
    """Watcher, scheduler and API around one KnowledgeBase; `start`, then `stop`."""

    def __init__(self, config: Config, watch: Sequence[Path] = (), embedder: Any = None,
                 serve_only: bool = False) -> None:
        self.config = config
        self.serve_only = serve_only
        """Own the data directory and serve the API only: no watching, rescans or scheduled
        jobs (a command such as `maintain` that lets readers in while it writes)."""
        self.data_dir = config.data_dir
        folders = [*config.watch.folders, *watch]
        self.folders = list(dict.fromkeys(Path(os.path.abspath(f)) for f in folders))
        self.embedder = embedder
        self.kb: Any = None
        self.api: APIServer | None = None
        self.web: Any = None
        self.watcher: FolderWatcher | None = None
        self.jobs: Jobs | None = None
        self.refresher: AbstractRefresher | None = None
        self.people: People | None = None
        self._grants: list[str] = []
        """The grants the tree is partitioned at (as people.json held them)."""
        self.audit: AuditLog | None = None
        self.named_backups = NamedBackups(config.backup.dir)
        self.starting = Starting()
        """What the daemon does until it serves (the listener's 503 answers say it)."""
        self.listener: Listener | None = None
        self._restore_seen: float | None = None
        """When the daemon first found a restore writing its data directory (monotonic)."""
        self.started = 0.0
        self.activity = Activity.of(self)
        self._lock = DataDirLock(self.data_dir)
        self._stop = threading.Event()
        self._stopping = threading.Event()

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Listen at once (503 with the reason until the stores are open), own the data
        directory, open the KB, serve, watch, reconcile and schedule."""
        found = self._lock.try_acquire(DAEMON)
        if found is not None and found.role == DAEMON:  # raises naming it (before the port)
            self._lock.acquire(DAEMON, wait_s=None, stop=self._stop)
            found = None
        api = self.config.api
        try:
            self.listener = Listener(api.host, api.port, self.starting, api.allowed_hosts,
                                     api.max_connections, api.forwarded_allow,
                                     EarlyDoor(self.data_dir, api),
                                     api.auth_failures_per_minute)
        except BaseException:
            self._lock.release()
            raise
        try:
            self.listener.start()
            self._write_starting()
            if found is not None:  # waits for a running command (a stop request ends the wait)
                self._lock.acquire(DAEMON, wait_s=None, stop=self._stop,
                                   waiting=self._waiting_for)
            check_not_restoring(self.data_dir)  # a restore cut short: the operator runs it again
            self._open()
        except BaseException:
            self.listener.stop()
            (self.data_dir / STARTING_FILE).unlink(missing_ok=True)
            self._close_kb()
            self._lock.release()
            raise
        self.started = time.time()
        self.kb.start_tree_rebuild()  # a missing tree is rebuilt while queries go on
        if not self.serve_only:
            self._resume_reembed()
        assert self.api is not None  # made by _open
        self.api.start()
        if self.web is not None:
            self.web.start()
        self.activity.start()
        self._write_info()
        if self.serve_only:
            log.info("psirag-kb %d serving %s for %s while it works", os.getpid(),
                     self.api.url, self.data_dir)
            return
        # folders dropped from [watch] folders lose the files they left unavailable
        self.kb.forget_unwatched(self.folders)
        assert self.watcher is not None  # made by _open, as are the jobs and the refresher
        self.watcher.start()
        self.watcher.scan()  # start-up reconciliation: what changed while we were down
        assert self.jobs is not None
        self.jobs.start()
        assert self.refresher is not None
        self.refresher.start()
        threading.Thread(target=self._warm_up, name="psirag-warm-up", daemon=True).start()
        log.info("daemon %d serving %s (page %s) for %s, watching %s", os.getpid(),
                 self.api.url, self.web.url if self.web is not None else "off", self.data_dir,
                 ", ".join(map(str, self.folders)) or "nothing")

    def _open(self) -> None:
        """Open the KB (migrating its schema if it is older) and make the API, the page, the
        watcher and the jobs around it; the listener says what runs meanwhile."""
        from psirag_kb.kb import KnowledgeBase

        api = self.config.api
        self.starting.set("starting", "opening the stores")
        token = (configured_token(api.token, api.token_file, "the config")
                 or ensure_token_file(self.data_dir))
        with migrations.observed(lambda what: self.starting.set("migrating", what)):
            self.kb = KnowledgeBase(self.config, self.embedder)
        self.starting.set("starting", "the stores are open; starting the API")
        self.people = People(self.data_dir)
        self._grants = self.people.grant_paths()  # what the stores partitioned at on open
        self._prune_conversations()  # people revoked while no daemon ran: before serving
        self.audit = AuditLog(self.data_dir, api.audit_max_bytes, api.audit_backups,
                              api.audit_queries)
        self.proxy = self._proxy()
        if watch_only := set(self.folders) - set(self.config.watch.folders):
            log.info("partitioning the tree at --watch folders too: %s",
                     ", ".join(map(str, sorted(watch_only))))
            self.kb.set_boundaries(roots=self.folders)  # each its own subtree
        self.api = APIServer(self, api.host, api.port, token, api.max_body_bytes,
                             allowed_hosts=api.allowed_hosts, mcp_server=_mcp_server(self),
                             max_connections=api.max_connections,
                             failures_per_minute=api.auth_failures_per_minute,
                             people=self.people,
                             person_requests_per_minute=api.person_requests_per_minute,
                             audit=self.audit, proxy=self.proxy, listener=self.listener)
        self.web = self._web_server(token)
        self.watcher = FolderWatcher(self.kb, self.folders, self.config.watch.quiet_period_s,
                                     self.data_dir, poll=self.config.watch.poll,
                                     poll_interval_s=self.config.watch.poll_interval_s)
        self.watcher.tracking = self.activity.tracking
        self.jobs = self._jobs()
        self.refresher = AbstractRefresher(
            self.kb, self._busy, self.config.watch.abstracts_quiet_s,
            arriving=lambda: self.watcher is not None and self.watcher.queue_size > 0)

    def _waiting_for(self, found: Holder) -> None:
        """Say on the API whom the daemon waits for; a restore still writing the data
        directory after RESTORE_WAIT_S ends the wait."""
        if found.name != "restore" and not (self.data_dir / RESTORING).exists():
            self.starting.set("waiting", f"waiting for {found.describe()} to finish with the "
                                         "data directory")
            return
        now = time.monotonic()
        since = self._restore_seen = self._restore_seen or now
        if now - since > RESTORE_WAIT_S:
            raise DaemonError(
                f"a restore (pid {found.pid}) has been writing {self.data_dir} for more than "
                f"{RESTORE_WAIT_S:.0f} s; the daemon stopped waiting for it: start the daemon "
                "again once `psirag-kb restore` has finished, or if that restore hangs, stop it "
                f"(`kill {found.pid}`) and run it again with --force")
        self.starting.set("restoring", f"a restore (pid {found.pid}) is writing the data "
                                       "directory; the daemon opens it once the restore has "
                                       "finished")

    def _write_starting(self) -> None:
        """daemon.starting.json: where a starting daemon answers (written atomically)."""
        assert self.listener is not None  # start made it before
        info = {"pid": os.getpid(), "url": self.listener.url}
        temporary = self.data_dir / (STARTING_FILE + ".tmp")
        temporary.write_text(json.dumps(info), encoding="utf-8")
        os.replace(temporary, self.data_dir / STARTING_FILE)

    def _proxy(self) -> Any:
        """The trusted sign-in proxy of [auth.proxy] (None when not configured)."""
        auth = self.config.auth
        if auth.proxy is None:
            return None
        from psirag_kb.serving.proxy import Proxy

        assert self.people is not None
        return Proxy(auth.proxy, auth.groups, self.people)

    def _web_server(self, token: str) -> Any:
        """The team's page on [web] port (None when [web] enabled is false)."""
        web, api = self.config.web, self.config.api
        if not web.enabled:
            return None
        from psirag_kb.web.server import WebServer

        assert self.api is not None
        # an API on any free port (tests, `make run`) puts the page on one too, unless set
        port = 0 if api.port == 0 and web.port == WebConfig().port else web.port
        try:
            return WebServer(self, api.host, port, token, self.people, self.api.limiter,
                             web.session_minutes, api.allowed_hosts, api.max_connections,
                             self.api.persons, self.audit, self.config.auth, self.proxy,
                             api.forwarded_allow)
        except KBError as exc:
            raise KBError(f"the web page cannot listen on port {port} ({exc}); set [web] port "
                          "(or --web-port), or [web] enabled = false") from exc

    def _warm_up(self) -> None:
        """Load the embedding model now, so the first query does not wait for it, nor (when
        folders are watched) the first edited file for the instance that embeds files."""
        try:
            kb = self._kb()
            kb.embed_query("warm up")
            if self.folders:  # loads it, and the tokenizer copy that counts chunks' tokens
                kb.embedder.count_tokens("warm up")
        except Exception:  # noqa: BLE001 - a model that cannot load fails the first query clearly
            log.warning("could not load the embedding model at start-up", exc_info=True)

    def _jobs(self) -> Jobs:
        watch = self.config.watch
        jobs = Jobs()
        jobs.add("rescan", self._rescan, watch.rescan_interval_s)
        jobs.add("maintain", self.kb.maintain, watch.maintain_interval_s)
        jobs.add("store", self._store_maintenance, watch.store_interval_s)
        jobs.add("people", self._people_seen, 60.0)
        jobs.add("boundaries", self._grants_changed, BOUNDARIES_EVERY_S)
        jobs.add("conversations", self._prune_conversations, CONVERSATIONS_EVERY_S)
        backup = self.config.backup
        if backup.dir and backup.every_hours > 0:
            jobs.add("backup", self._scheduled_backup, backup.every_hours * 3600.0)
        return jobs

    def _prune_conversations(self) -> dict[str, Any]:
        """Delete conversations older than [conversations] keep_days and those of people no
        longer in people.json, or begun before the person of that name was added (removed while
        the daemon was down and added again, or edited by hand)."""
        people = None if self.people is None else {
            p["name"]: float(p["created"]) for p in self.people.listed()}
        return self.kb.prune_conversations(people)

    def _scheduled_backup(self) -> dict[str, Any]:
        """Take a backup into [backup] dir, then delete the oldest beyond [backup] keep."""
        folder = Path(self.config.backup.dir).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        kb = self._kb()
        with self.activity.running("backup"):
            manifest = kb.backup(folder / scheduled_name(kb.generation))
        pruned = prune(folder, self.config.backup.keep)
        shown = summary(manifest)
        shown.pop("files", None)
        return shown | {"pruned": pruned}

    def _grants_changed(self) -> bool:
        """Partition the tree at the grants people.json holds now (a new grant splits the
        affected subtree in the background; reads obey the grant at once meanwhile)."""
        if self.people is None or self.kb is None:
            return False
        grants = self.people.grant_paths()
        if grants == self._grants:
            return False
        self._grants = grants
        return self.kb.set_boundaries(grants=grants)

    def request_stop(self) -> None:
        """Ask `wait` to return (safe from a signal handler)."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop is requested; True when it was."""
        return self._stop.wait(timeout)

    def stop(self) -> None:
        """Stop accepting work, finish the current batch, commit, close the stores."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._stop.set()
        self.activity.stop()
        log.info("daemon stopping")
        if self.web is not None:
            self.web.stop()
        if self.kb is not None:
            self.kb.ingestion.stop()  # running ingests end after their committed batch
        if self.api is not None:
            self.api.stop()
        started = not self.serve_only  # a serving-only owner never started its threads
        if self.watcher is not None and started:
            self.watcher.stop()
        if self.kb is not None:
            self.kb.abstract_job.stop()  # a slow LLM run ends after its node in progress
        if self.refresher is not None and started:
            self.refresher.stop()
        if self.jobs is not None and started:
            self.jobs.shutdown(wait=True)
        self._close_kb()
        if self.people is not None:
            self._people_seen(0.0)
        if self.audit is not None:
            self.audit.close()
        (self.data_dir / DAEMON_FILE).unlink(missing_ok=True)
        (self.data_dir / STARTING_FILE).unlink(missing_ok=True)
        self._lock.release()
        log.info("daemon stopped")

    def _close_kb(self) -> None:
        if self.kb is not None:
            self.kb.close()
            self.kb = None

    def _write_info(self) -> None:
        """daemon.json: how clients find us (written atomically)."""
        assert self.api is not None
        info = {"pid": os.getpid(), "url": self.api.url, "data_dir": str(self.data_dir),
                "started": self.started, "web": None if self.web is None else self.web.url}
        temporary = self.data_dir / (DAEMON_FILE + ".tmp")
        temporary.write_text(json.dumps(info), encoding="utf-8")
        os.replace(temporary, self.data_dir / DAEMON_FILE)
        (self.data_dir / STARTING_FILE).unlink(missing_ok=True)

    # -- jobs -------------------------------------------------------------------------------

    def _rescan(self) -> dict[str, Any]:
        """Ingest the watched folders that exist (catches events the watcher missed)."""
        present = [f for f in self.folders if f.is_dir()]
        if not present:
            return {"folders": 0}
        assert self.watcher is not None
        try:
            with self.activity.tracking("rescan", self.watcher.check_stop) as progress:
                report = self.kb.ingest(present, progress)
        except Stopping:
            return {"stopped": True}
        data = report.as_dict()
        data.pop("problems", None)
        return data

    def _busy(self) -> bool:
        """Whether files are waiting or being indexed, or writes are queued."""
        assert self.watcher is not None
        return self.watcher.queue_size > 0 or self.kb.busy()

    def _people_seen(self, every_s: float = 60.0) -> dict[str, Any]:
        """Write down when people last used their tokens (for `users list`)."""
        try:
            written = self.people is not None and self.people.write_seen(every_s)
        except (OSError, KBError):
            log.warning("could not record when people last used their tokens", exc_info=True)
            written = False
        return {"written": written}

    def _store_maintenance(self) -> dict[str, Any]:
        """Persist the derived indexes and checkpoint DuckDB's write-ahead log."""
        self.kb.checkpoint()
        return {"checkpoint": True}

    # -- the API's application --------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Liveness: pid and data directory, without touching the stores."""
        return {"ok": True, "pid": os.getpid(), "data_dir": str(self.data_dir),
                "state": SERVING}

    def daemon_status(self, access: Access = OWNER) -> dict[str, Any]:
        """The "daemon" object of status (for a person with grants: no counts, no errors, since
        those cover files beyond their grants)."""
        assert self.api is not None and self.watcher is not None and self.jobs is not None
        if not access.everything:
            return {"pid": os.getpid(), "url": self.api.url, "started": self.started}
        return {
            "pid": os.getpid(), "url": self.api.url, "started": self.started,
            "queue": self.watcher.queue_size + self.kb.queued(),
            "processed": self.watcher.processed,
            "errors": list(self.watcher.errors)[-10:], "jobs": self.jobs.status(),
            "running": progress({}, self.activity.running_jobs(), [], time.time()),
            "abstracts": None if self.refresher is None else self.refresher.status(),
            **({"serving_for": "maintain"} if self.serve_only else {}),
            "watching": self.watcher.poll_status(),
        }

    def status(self, *, access: Access = OWNER) -> dict[str, Any]:
        """The KB's status plus the daemon's state and watched folders (as far as `access`
        may read them)."""
        status = self._kb().status(access=access) | {
            "daemon": self.daemon_status(access),
            "watch": [str(f) for f in self.folders if access.may_read(str(f))],
        }
        self._audited(access, "status")
        return status

    def query(self, text: str, mode: str | None = None, k: int | None = None,
              summarize: bool = False, within: Sequence[str] | None = None, *,
              access: Access = OWNER) -> dict[str, Any]:
        """Ranked results (only under the paths in `within`, when given), from what `access`
        may read."""
        extra = {"access": access} | ({} if within is None else {"within": within})
        result = self._kb().query(text, mode=mode, k=k, summarize=summarize, **extra)
        self._audited(access, "query", None if within is None else list(within),
                      len(result.get("results") or result.get("citations") or []), text)
        return result

    def chunk(self, chunk_id: int, neighbours: int = 0, *,
              access: Access = OWNER) -> dict[str, Any]:
        """One chunk's full text and location, with its neighbours in the file when asked."""
        found = self._kb().chunk(chunk_id, neighbours, access=access)
        self._audited(access, "fetch", chunk_id, 1 + len(found.get("before", []))
                      + len(found.get("after", [])))
        return found

    def original(self, chunk_id: int, *, access: Access = OWNER) -> dict[str, Any]:
        """The indexed file a chunk comes from, for a download when `access` may read it."""
        found = self._kb().original(chunk_id, access=access)
        real = Path(os.path.realpath(found["path"]))
        if inside(real, self.data_dir) or (real != Path(found["path"]) and not any(
                inside(real, Path(os.path.realpath(f))) for f in self.folders)):
            # a file replaced by a link to somewhere else since it was indexed
            raise AccessDenied(f"{found['path']} now leads outside the watched folders")
        self._audited(access, "download", chunk_id, 1)
        return found

    def answer(self, text: str, k: int | None = None,
               on_step: Callable[[dict[str, Any]], None] | None = None, *,
               access: Access = OWNER) -> dict[str, Any]:
        """Agent mode, each step passed to `on_step` as it completes."""
        result = self._kb().answer(text, k, on_step, access=access)
        self._audited(access, "answer", None, len(result.get("citations") or []), text)
        return result

    def node(self, node_id: int | None = None, *, access: Access = OWNER) -> dict[str, Any]:
        """One tree node (the root by default), as far as `access` may read it."""
        found = self._kb().node(node_id, access=access)
        self._audited(access, "browse", node_id, len(found.get("children", [])))
        return found

    def topic_map(self, node_id: int | None = None, *,
                  access: Access = OWNER) -> dict[str, Any]:
        """A tree node with two layers below it, sized and sampled for the map."""
        found = self._kb().topic_map(node_id, access=access)
        self._audited(access, "browse", node_id, len(found.get("children", [])))
        return found

    def path(self, chunk_id: int, *, access: Access = OWNER) -> dict[str, Any]:
        """The abstract nodes above a chunk, root first, as {"chunk_id", "path"}."""
        above = self._kb().path_of(chunk_id, access=access)
        self._audited(access, "path", chunk_id, len(above))
        return {"chunk_id": chunk_id, "path": above}

    def reindex(self, path: str, *, access: Access = OWNER) -> dict[str, Any]:
        """Bring a path inside a watched folder, or an indexed path, up to date now, with the
        offline abstracts of the tree nodes it changed; an editor only inside their grants."""
        raw = path
        try:
            may_write(access, raw)
            target = allowed_path(raw, self.data_dir, self.folders,
                                  lambda found: self._kb().is_indexed(found))
            may_write(access, str(target))
        except AccessDenied:
            if self.audit is not None:
                self.audit.record(access.name, "reindex", raw, status=403)
            raise
        self._audited(access, "reindex", str(target))
        kb = self._kb()
        if target.exists():
            try:
                report = kb.ingest([target], access=access).as_dict()
            except KBError:
                if target.exists():
                    raise  # otherwise it vanished meanwhile: bring that up to date instead
            else:
                return report | {"abstracts": kb.regenerate_abstracts(offline=True)}
        try:  # a deleted file is removed; a missing folder's files are kept as unavailable
            return kb.ingest([target], access=access).as_dict()
        except KBError:
            if target.exists():
                raise
            return {"removed": 0}  # it was never indexed, or was removed meanwhile

    def forget(self, path: str, *, access: Access = OWNER) -> dict[str, Any]:
        """Remove an indexed file or folder on purpose, unavailable files included (an editor
        only inside their grants)."""
        raw = path
        if not raw or "\x00" in raw or not os.path.isabs(raw) or ".." in Path(raw).parts:
            raise KBError(f"{raw!r} must be an absolute path without '..'")
        target = Path(os.path.abspath(raw))
        try:
            may_write(access, str(target))
        except AccessDenied:
            if self.audit is not None:
                self.audit.record(access.name, "forget", raw, status=403)
            raise
        self._audited(access, "forget", str(target))
        return {"removed": self._kb().forget([target], access=access)}

    def maintain(self, *, access: Access = OWNER) -> dict[str, Any]:
        """Start the maintain job now on the daemon's writer (an admin only); {"pid", "runs"}:
        the job's runs ended so far, so that the caller can follow the next one in `status`
        (when maintain is running already, that run is the one that ends next)."""
        if access.role != "admin":
            if self.audit is not None:
                self.audit.record(access.name, "maintain", None, status=403)
            raise AccessDenied(f"{access.name} ({access.role}) may not run maintain: an admin "
                               "only")
        if self.serve_only or self.jobs is None:
            raise KBError(f"psirag-kb {os.getpid()} is running maintain on {self.data_dir} "
                          "already; `status` shows its progress")
        self._kb()
        self._audited(access, "maintain")
        runs = self.jobs.runs("maintain")
        self.jobs.run_now("maintain")
        return {"pid": os.getpid(), "runs": runs}

    # -- conversations (each person's own: the KB checks the owner) ---------------------------

    def ask(self, question: str, *, conversation: str | None = None,
            history: Sequence[Any] | None = None, mode: str | None = None,
            k: int | None = None, within: Sequence[str] | None = None,
            on_step: Callable[[dict[str, Any]], None] | None = None,
            access: Access = OWNER) -> dict[str, Any]:
        """A follow-up resolved against a conversation or earlier turns (`KnowledgeBase.ask`)."""
        extra = {} if within is None else {"within": within}
        result = self._kb().ask(question, conversation=conversation, history=history,
                                mode=mode, k=k, on_step=on_step, access=access, **extra)
        self._audited(access, "ask", None if within is None else list(within),
                      len(result.get("results") or result.get("citations") or []),
                      result.get("searched"))
        return result

    def conversation(self, conversation: str, *, access: Access = OWNER) -> dict[str, Any]:
        """One of this person's conversations with its turns."""
        found = self._kb().conversation(conversation, access=access)
        self._audited(access, "conversation", conversation, len(found["turns"]))
        return found

    def person_removed(self, name: str) -> None:
        """A person was revoked: their conversations go with them."""
        self._kb().forget_person(name)

    def __getattr__(self, name: str) -> Any:
        """An operation the table marks forwarded: the knowledge base's method of that name,
        which checks the caller's `access` itself (a person's own conversations)."""
        if name not in FORWARDED:
            raise AttributeError(name)
        return getattr(self._kb(), name)

    def backup(self, name: str, *, access: Access = OWNER) -> dict[str, Any]:
        """Take the backup `name` into [backup] dir while serving (an admin only; over the API
        a backup is named, never placed); what was copied, the generation and the bytes."""
        if access.role != "admin":
            if self.audit is not None:
                self.audit.record(access.name, "backup", name, status=403)
            raise AccessDenied(f"{access.name} ({access.role}) may not take backups: an admin "
                               "only")
        with self.named_backups.hold():
            target = self.named_backups.target(name)
            self._audited(access, "backup", str(target))
            with self.activity.running("backup"):
                return summary(self._kb().backup(target))

    def ready(self) -> list[str]:
        """Why the daemon is not ready to answer as it should ([] when it is): stores not open,
        a derived index stale or being rebuilt."""
        kb = self.kb
        if kb is None or self._stopping.is_set():
            return ["the stores are not open (starting or stopping)"]
        return kb.unready_reasons()

    def metrics_state(self) -> dict[str, Any]:
        """What /metrics reads at each scrape: counts, queues, index states, last backup."""
        kb = self.kb
        if kb is None or self._stopping.is_set():
            return {"open": False}
        return {
            "open": True, **kb.metrics_snapshot(),
            "watcher_queue": self.watcher.queue_size if self.watcher is not None else 0,
            "llm": CALLS.snapshot(),
            "backup": last_backup(self.data_dir),
        }

    def _resume_reembed(self) -> None:
        """Go on with a reembed a stopped daemon left (its failure is logged, never fatal:
        the current model keeps serving)."""
        try:
            resumed = self.kb.resume_reembed()
        except Exception:  # noqa: BLE001 - the old model serves; `status` shows no reembed
            log.exception("could not resume the reembed; `psirag-kb reembed --cancel` drops it")
            return
        if resumed is not None:
            log.info("resuming the reembed to %s (%d of %d chunks done)", resumed["model"],
                     resumed["done"], resumed["total"])

    def reembed(self, model: str, cancel: bool = False, *,
                access: Access = OWNER) -> dict[str, Any]:
        """Start embedding everything again with `model` in the background, or cancel the
        running reembed (an admin only); the reembed's status. `model` is a model's name or
        a folder inside [embedding] models_dir (service/model_folders.py)."""
        if access.role != "admin":
            if self.audit is not None:
                self.audit.record(access.name, "reembed", None, status=403)
            raise AccessDenied(f"{access.name} ({access.role}) may not change the embedding "
                               "model: an admin only")
        kb = self._kb()
        if not cancel:  # a name, or a folder inside [embedding] models_dir
            model = api_model(model, self.config.embedding.models_dir)
        self._audited(access, "reembed", model or "cancel")
        if cancel:
            return kb.cancel_reembed()
        return kb.reembed(model)

    def _kb(self) -> Any:
        if self.kb is None or self._stopping.is_set():
            raise KBError("the daemon is shutting down")
        return self.kb

    def _audited(self, access: Access, action: str, scope: Any = None,
                 results: int | None = None, query: str | None = None) -> None:
        if self.audit is not None:
            self.audit.record(access.name, action, scope, results, query)


def _mcp_server(daemon: Daemon) -> Any:
    """The MCP server the daemon serves at /mcp, over the daemon itself."""
    from psirag_kb.service.mcp import build_server, http_access

    return build_server(daemon, http_access)


def run_daemon(config: Config, watch: Sequence[Path] = (), embedder: Any = None,
               verbose: bool = False) -> int:
    """Run in the foreground until SIGTERM or SIGINT; returns the exit status."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    daemon = Daemon(config, watch, embedder)
    configure_logging(config.data_dir, verbose)

    def on_signal(number: int, frame: Any) -> None:
        log.info("received %s", signal.Signals(number).name)
        daemon.request_stop()

    # before start: a SIGTERM while starting still ends in a clean stop (no stale daemon.json)
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        daemon.start()
    except BaseException:
        for number, handler in previous.items():
            signal.signal(number, handler)
        raise
    page = f"; the page at {daemon.web.url}" if daemon.web is not None else ""
    print(f"psirag-kb daemon {os.getpid()} serving {daemon.api.url if daemon.api else ''}"
          f"{page}; Ctrl-C stops it", flush=True)
    try:
        while not daemon.wait(1.0):
            pass
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        daemon.stop()
    return 0

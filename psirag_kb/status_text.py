"""A knowledge base's status as text: the rows the CLI and the TUI both show, and the CLI's
plain lines."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

OK, WARN, ERROR = "ok", "warn", "error"


class Row(NamedTuple):
    """One line of a status section: what it is about, what it says, why, and how bad it is."""

    label: str
    value: str
    detail: str = ""
    severity: str = OK


def local_time(stamp: float | None, seconds: bool = False) -> str:
    """A time as local date and time ('?' when unknown)."""
    if stamp is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M" + (":%S" if seconds else ""), time.localtime(stamp))


def human_bytes(n: int) -> str:
    """A size in B, KB, MB or GB."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return str(n)  # pragma: no cover


def clock(seconds: float) -> str:
    """Seconds as minutes and seconds, 'm:ss'."""
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def stale_indexes(status: dict[str, Any]) -> list[Row]:
    """The indexes queries leave out until they are rebuilt from the database."""
    return [Row(str(name), "stale", index.get("reason", ""), ERROR)
            for name, index in (status.get("indexes") or {}).items()
            if index.get("state") == "stale"]


def problems(status: dict[str, Any]) -> list[Row]:
    """Files that failed or were skipped: state, path, reason."""
    return [Row(str(p.get("state")), str(p.get("path")), p.get("reason", ""),
                ERROR if p.get("state") == "failed" else WARN)
            for p in status.get("problems", [])]


def unavailable(status: dict[str, Any]) -> list[Row]:
    """Vanished folders whose files are kept and searchable: since when, how many, why."""
    return [Row(local_time(gone.get("since")), f"{gone.get('files', 0)} file(s)",
                gone.get("reason", ""), WARN)
            for gone in status.get("unavailable", [])]


def tree_trouble(status: dict[str, Any]) -> Row | None:
    """The tree's state when it is not ok (the flat retrievers answer until it is rebuilt)."""
    tree = status.get("tree") or {}
    if tree.get("state", "ok") == "ok":
        return None
    return Row("tree", str(tree["state"]), tree.get("reason", ""), ERROR)


def llm_hosts(abstracts: dict[str, Any]) -> list[Row]:
    """One row per LLM host when there are several: its rate over the run and answers, a
    warning while it is backed off."""
    hosts = abstracts.get("hosts") or []
    return [Row(str(host.get("host")),
                f"{host.get('rate_per_s', 0):.2f} chats/s, {host.get('answered', 0)} answered",
                severity=WARN if host.get("backed_off_s") else OK)
            for host in hosts] if len(hosts) > 1 else []


def _backoffs(host: dict[str, Any]) -> str:
    """How often an LLM host was backed off, and when it is asked again."""
    text = f", backed off {host['backoffs']}x" if host["backoffs"] else ""
    if host["backed_off_s"]:
        text += f" (retry in {host['backed_off_s']:.0f} s: {host['last_error']})"
    return text


def abstracts_line(abstracts: dict[str, Any]) -> str:
    """Dirty abstracts, a run in progress (done of total, rate, time left) and the last run."""
    line = (f"abstracts: {abstracts.get('dirty', 0)} dirty ({abstracts.get('source', 'offline')} "
            f"{abstracts.get('kind', 'keyword')})")
    if abstracts.get("running"):
        eta = abstracts.get("eta_s")
        line += (f", writing {abstracts['done']} of {abstracts['total']} at "
                 f"{abstracts['rate_per_s']:.2f} nodes/s"
                 + ("" if eta is None else f", {clock(eta)} left"))
    last = abstracts.get("last_run")
    if last:
        result = abstracts.get("last_result", {})
        line += (f"; last run {local_time(last, seconds=True)}: "
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
    for row, host in zip(llm_hosts(abstracts), abstracts.get("hosts") or [], strict=False):
        line += f"\n  host {row.label}: {row.value}{_backoffs(host)}"
    return line


def _store_lines(status: dict[str, Any]) -> list[str]:
    """The data directory, files, chunks and model, Ray, and the tree."""
    files = status["files"]
    out = [f"data directory: {status['data_dir']}",
           f"files: {files['indexed']} indexed, {files.get('unavailable', 0)} unavailable, "
           f"{files['skipped']} skipped, {files['failed']} failed"]
    device = (f" on {status['device']} ({status['device_reason']})"
              if status.get("device") else "")
    out.append(f"chunks: {status['chunks']}   model: {status['model']} ({status['dim']}-d)"
               f"{device}")
    compute = status.get("compute") or {}
    if compute.get("ray_address"):
        workers = (f", {compute['workers']} worker(s) on {', '.join(compute['nodes'])}"
                   if compute.get("workers") else "")
        out.append(f"ingest on Ray at {compute['ray_address']}: {compute['state']}{workers}")
    tree = status["tree"]
    out.append(f"tree: depth {tree['depth']}, {tree['abstract_nodes']} abstract nodes, "
               f"nodes per layer {tree['nodes_per_layer']}")
    trouble = tree_trouble(status)
    if trouble is not None:
        out.append(f"tree: {trouble.value} ({trouble.detail}); queries use BM25 and the dense "
                   "index until it is rebuilt (by the daemon, `ingest` or `maintain`)")
    return out


def _daemon_lines(status: dict[str, Any]) -> list[str]:
    """The daemon serving the status: its address, queue, watched and polled folders."""
    daemon = status["daemon"]
    queued = f"{daemon['queue']} queued, " if "queue" in daemon else ""
    out = [f"daemon: pid {daemon['pid']} at {daemon['url']}, {queued}"
           f"watching {', '.join(status.get('watch', [])) or 'nothing'}"]
    for job in daemon.get("running", []):  # a scan, a set of files, a rescan: files done
        if job.get("total"):
            left = "" if job.get("eta_s") is None else f", {clock(job['eta_s'])} left"
            out.append(f"  {job['name']}: {job['done']:,} of {job['total']:,} files{left}")
        else:
            out.append(f"  {job['name']}: running")
    for root in daemon.get("watching", []):
        if root.get("polled"):
            out.append(f"  polled every {root['interval_s']:g} s: {root['folder']}: "
                       f"{root['reason']}")
    return out


def status_lines(status: dict[str, Any]) -> list[str]:
    """The whole status as the plain lines `psirag-kb status` prints."""
    out = _store_lines(status)
    out.append(abstracts_line(status.get("abstracts", {})))
    out.extend(f"index {row.label}: stale, being rebuilt from the database ({row.detail}); "
               "queries leave it out meanwhile" for row in stale_indexes(status))
    sizes = (f"{k.removesuffix('_bytes')} {human_bytes(v)}" for k, v in status["stores"].items())
    out.append("stores: " + ", ".join(sizes))
    if last := status.get("backup"):
        out.append(f"last backup: {local_time(last['taken'])}, generation "
                   f"{last['generation']}, {human_bytes(last['bytes'])}, {last['path']}")
    out.extend(f"  {row.label}: {row.value}: {row.detail}" for row in problems(status))
    out.extend(f"  unavailable since {row.label}: {row.value}: {row.detail} (still searchable; "
               "`psirag-kb forget PATH` removes them)" for row in unavailable(status))
    if "daemon" in status:
        out.extend(_daemon_lines(status))
    out.extend(f"  {count} file(s) decoded from {encoding}"
               for encoding, count in status.get("encodings", {}).items())
    return out

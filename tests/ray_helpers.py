"""A Ray cluster of its own on loopback for tests and benchmarks: its own temp dir and ports,
stopped by killing its own processes (`ray stop` would stop every cluster on the machine)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


def _free_ports(count: int, taken: Collection[int] = ()) -> list[int]:
    """`count` distinct TCP ports nobody listens on now, none of `taken`: each socket stays
    bound until all are chosen, so the system never hands out one port twice (two of Ray's
    components given one port refuse to start)."""
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket()
            sockets.append(sock)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in taken:
                ports.append(port)
    finally:
        for sock in sockets:
            sock.close()
    return ports


class LocalRay:
    """`ray start --head` on 127.0.0.1 with `cpus` CPUs, in a temp dir of its own."""

    def __init__(self, cpus: int = 2) -> None:
        self.cpus = cpus
        # short: Ray's Unix sockets live below it (a path has at most 107 bytes)
        self.temp = Path(tempfile.mkdtemp(prefix="psr-ray-", dir="/tmp"))
        self.port = _free_ports(1)[0]
        self.address = f"127.0.0.1:{self.port}"
        self.group = 0

    def start(self) -> LocalRay:
        """Start the head; returns when it accepts jobs."""
        base = random.randrange(20000, 32400, 200)  # below the ephemeral ports
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        node, objects, agent, agent_grpc, runtime_env, metrics = _free_ports(6, {self.port})
        process = subprocess.Popen(
            [RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={self.port}",
             f"--temp-dir={self.temp}", f"--num-cpus={self.cpus}", "--include-dashboard=false",
             "--disable-usage-stats", f"--node-manager-port={node}",
             f"--object-manager-port={objects}", f"--dashboard-agent-listen-port={agent}",
             f"--dashboard-agent-grpc-port={agent_grpc}",
             f"--runtime-env-agent-port={runtime_env}", f"--metrics-export-port={metrics}",
             f"--min-worker-port={base}", f"--max-worker-port={base + 199}"],
            env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.group = process.pid
        out, _ = process.communicate(timeout=300)
        if process.returncode != 0:
            self.stop()
            raise RuntimeError(f"ray start failed:\n{out.decode(errors='replace')[-2000:]}")
        return self

    def pids(self) -> list[int]:
        """This cluster's processes: its process group, any naming its temp dir, and their
        descendants (Ray's workers have a group of their own and rename themselves)."""
        own, parents = set(), {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            pid = int(entry.name)
            try:
                group = os.getpgid(pid)
                command = (entry / "cmdline").read_bytes()
                parents[pid] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ProcessLookupError, ValueError, IndexError):
                continue
            if group == self.group or str(self.temp).encode() in command:
                own.add(pid)
        grown = True
        while grown:
            children = {pid for pid, parent in parents.items() if parent in own} - own
            own |= children
            grown = bool(children)
        return sorted(own)

    def kill(self) -> None:
        """Kill every process of the cluster (SIGKILL: the cluster is gone at once), again
        until none is left (a dying raylet may still start a worker)."""
        for _ in range(60):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)

    def stop(self) -> None:
        """Kill the cluster and remove its temp dir."""
        self.kill()
        shutil.rmtree(self.temp, ignore_errors=True)

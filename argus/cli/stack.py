"""The Ray nodes of ``argus up``: a head and a worker watchdog, each a subprocess in its own
process group, restarted (with backoff) when one exits, and what their logs say about a
node that exited, on the console."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from argus.guardian import MARKER_ENV, kill_marked
from argus.procs import PortBook, reap_group, signal_group, spawn_group

__all__ = ["Stack"]

log = logging.getLogger("argus.up")


def _node_port_args(book: PortBook) -> str:
    """Every port one Ray node listens on, none given to the stack's other node."""
    p = book.ports(6)
    base = book.port_range(100)
    return (f"--node-manager-port={p[0]} --object-manager-port={p[1]} "
            f"--dashboard-agent-grpc-port={p[2]} --dashboard-agent-listen-port={p[3]} "
            f"--metrics-export-port={p[4]} --runtime-env-agent-port={p[5]} "
            f"--min-worker-port={base} --max-worker-port={base + 99}")


_LOG_CHUNK = 1 << 20  # the most of a node's log read per look (every 2 s)
# A watchdog that ran this long was healthy: its exit starts the backoff afresh.
_STABLE_S = 60.0
_BACKOFF_MAX_S = 60.0


def _decision(line: str) -> tuple[str, dict[str, str]]:
    """A watchdog's ``ts level event key=value …`` line as (event, fields); ("", {}) for
    any other line (Ray's own output is in the same log)."""
    try:
        fields = shlex.split(line)
    except ValueError:  # an unbalanced quote: Ray's output, not a decision line
        return "", {}
    if len(fields) < 3:
        return "", {}
    said = dict(kv.split("=", 1) for kv in fields[3:] if "=" in kv)
    return fields[2], {k: v.replace("\\n", " ") for k, v in said.items()}


class Stack:
    """The node-pool watchdog subprocesses of ``argus up``, each in its own process group."""

    def __init__(self, data_dir: Path, config: Any, gpus: int, cpus: int,
                 echo: Callable[[str], None] = log.warning, gpu_type: str = "") -> None:
        self.data_dir, self.config, self.gpus, self.cpus = data_dir, config, gpus, cpus
        self.gpu_type = gpu_type  # the worker's GPU model label ("": none)
        self.echo = echo  # the console
        self.procs: list[subprocess.Popen[bytes]] = []
        self._log_read: dict[str, int] = {}  # how far _report_node_exits has read each log
        # Unix socket paths are limited to ~107 bytes: keep Ray's temp dir short.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="argus-ray-", dir="/tmp"))
        # Every process of this stack carries it in its environment (see argus.guardian).
        self.marker = secrets.token_hex(8)
        self.guardian: subprocess.Popen[bytes] | None = None

    def _env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update({MARKER_ENV: self.marker})
        env.update(ARGUS_SHARED_ROOT=self.config.shared_root, ARGUS_CLUSTER_NAME=self.config.cluster_name,
                   ARGUS_NODE_IP="127.0.0.1", ARGUS_LOG_DIR=str(self.data_dir / "logs"),
                   ARGUS_CONFINE=self.config.v2.sandbox.mode,
                   RAY_USAGE_STATS_ENABLED="0", **extra)
        return env

    def _spawn(self, role: str, env: dict[str, str]) -> "subprocess.Popen[bytes]":
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # die_with_parent: a kill -9 of `argus up` must not leave its Ray nodes behind (the
        # watchdog's own Ray child dies with the watchdog the same way).
        proc = spawn_group([sys.executable, "-m", "argus", "node", role], logs / f"{role}.log",
                           env=env, die_with_parent=True)
        if len(self.procs) < 2:
            self.procs.append(proc)
        return proc

    def start(self) -> None:
        """Start both watchdogs and a supervisor thread that restarts one that exits (the
        watchdogs exit non-zero when their Ray node dies: supervisord's job in the image)."""
        book = PortBook()  # a watchdog restarted by _supervise gets new ports from it too
        ray_port, dash_port, client_port = book.ports(3)
        common = "--disable-usage-stats --object-store-memory=100000000"
        # Each node its own temp dir, as on separate hosts: a node's log monitor tails every
        # log under its temp dir, so two nodes sharing one forwarded each actor line twice.
        head_tmp, worker_tmp = self.temp_dir / "h", self.temp_dir / "w"
        self.roles = {
            "head": lambda: self._env(
                ARGUS_RAY_PORT=str(ray_port), ARGUS_DASHBOARD_PORT=str(dash_port),
                ARGUS_DASHBOARD_HOST="127.0.0.1",
                ARGUS_RAY_EXTRA_ARGS=f"{common} --temp-dir={head_tmp} --ray-client-server-port={client_port} "
                                     f"{_node_port_args(book)}"),
            "worker": lambda: self._env(
                ARGUS_NUM_GPUS=str(self.gpus), ARGUS_NUM_CPUS=str(self.cpus), ARGUS_POLL_S="1",
                ARGUS_GPU_TYPE=self.gpu_type,
                ARGUS_WORKER_RESOURCES_KV="worker_node=100",
                ARGUS_RAY_EXTRA_ARGS=f"{common} --temp-dir={worker_tmp} {_node_port_args(book)}"),
        }
        self.guardian = subprocess.Popen(
            [sys.executable, "-m", "argus.guardian", "--parent", str(os.getpid()), "--marker", self.marker,
             "--temp-dir", str(self.temp_dir)],
            start_new_session=True, stdin=subprocess.DEVNULL, env=self._env())
        for role, env in self.roles.items():
            with contextlib.suppress(OSError):  # appended to across runs: only this run's lines
                self._log_read[role] = (self.data_dir / "logs" / f"{role}.log").stat().st_size
            self._spawn(role, env())
        self.stopping = threading.Event()
        threading.Thread(target=self._supervise, name="argus-up-supervisor", daemon=True).start()

    def _supervise(self) -> None:
        # A watchdog that keeps dying soon after its start is started again after a growing
        # pause (as supervisord does in the image), not every 2 s against a busy host.
        started = [time.monotonic()] * len(self.procs)
        quick_exits = [0] * len(self.procs)
        not_before = [0.0] * len(self.procs)
        while not self.stopping.wait(2.0):
            self._report_node_exits()
            for i, (role, env) in enumerate(self.roles.items()):
                proc = self.procs[i]
                now = time.monotonic()
                if proc.poll() is None or self.stopping.is_set():
                    continue
                if not_before[i] == 0.0:
                    quick_exits[i] = quick_exits[i] + 1 if now - started[i] < _STABLE_S else 1
                    not_before[i] = now + min(_BACKOFF_MAX_S, 2.0 ** (quick_exits[i] - 1))
                    log.warning("%s watchdog exited (rc=%s); restarting it in %.0f s", role,
                                proc.returncode, not_before[i] - now)
                if now >= not_before[i]:
                    signal_group(proc, signal.SIGKILL)  # leftovers of its group
                    self.procs[i] = self._spawn(role, env())
                    started[i], not_before[i] = now, 0.0

    def _report_node_exits(self) -> None:
        """Say on the console when a Ray node exited. Each watchdog restarts its node by
        itself, so nothing else would: a worker once crashed in a loop (a port clash)
        behind a console that still said "cluster ready"."""
        for role in self.roles:
            path = self.data_dir / "logs" / f"{role}.log"
            try:
                with open(path, "rb") as f:
                    f.seek(self._log_read.get(role, 0))
                    chunk = f.read(_LOG_CHUNK)  # bounded: a Ray node can print a lot at once
            except OSError:
                continue
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
            self._log_read[role] = self._log_read.get(role, 0) + len(complete)
            for line in complete.decode(errors="replace").splitlines():
                event, said = _decision(line)
                if event == "ray_exited":
                    cause = f": {said['cause']}" if said.get("cause") else ""
                    self.echo(f"{role}: its Ray node exited (rc={said.get('rc', '?')} after "
                              f"{said.get('ran_s', '?')} s){cause}; it is being restarted. "
                              f"Details: {path}")
                elif event == "head_start_timeout":
                    self.echo(f"{role}: its Ray node did not come up in {said.get('waited_s', '?')} s"
                              f": {said.get('cause', '?')}; it is being restarted. Details: {path}")

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM each watchdog's group (they stop their Ray child), then SIGKILL."""
        self.stopping.set()
        # All are signalled first and share one deadline: they stop in parallel.
        for proc in reversed(self.procs):  # worker first, then head
            signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            reap_group(proc, max(0.1, deadline - time.monotonic()))
        kill_marked(self.marker, str(self.temp_dir))  # Ray's agents outlive their raylet
        if self.guardian is not None:
            self.guardian.terminate()
            self.guardian.wait(5)
        import shutil

        shutil.rmtree(self.temp_dir, ignore_errors=True)

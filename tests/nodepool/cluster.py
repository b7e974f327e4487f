"""Node pool test harness: free ports, ``argus node`` processes, the cluster's node list.

Used by the tests (through conftest fixtures) and by tests/bench/bench_nodepool.py.

Every process is started in its own session and stopped by process group; nothing here
runs ``ray stop`` or kills by name, because other Ray clusters may share this host.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from argus.procs import PortBook, free_ports, kill_group, spawn_group

__all__ = ["Cluster", "NodeProc", "cluster_factory", "descendants", "find_descendant",
           "free_ports", "kill_group", "wait_for"]

REPO = Path(__file__).resolve().parents[2]
RAY_BIN = str(Path(sys.executable).parent / "ray")
ARGUS_NODE = [sys.executable, "-m", "argus", "node"]

# Short settings so the tests finish quickly; the production defaults are 60/10/5.
FAST_ENV = {
    "ARGUS_TTL_S": "8",
    "ARGUS_REFRESH_S": "1",
    "ARGUS_POLL_S": "1",
    "ARGUS_BACKOFF_INITIAL_S": "0.5",
    "ARGUS_BACKOFF_MAX_S": "4",
    "ARGUS_STABLE_S": "10",
    "ARGUS_STOP_GRACE_S": "5",
}


# Checked on all interfaces (""): these nodes advertise the host's detected IP, not loopback.
# One book for every node of the test run: no two nodes (nor a head and its restart's
# GCS port, kept across restarts) are ever given the same port.
PORTS = PortBook(host="")


def node_port_args(head: bool) -> tuple[list[str], dict[str, int]]:
    """Distinct ports for every listener of one Ray node, as ``ray start`` arguments."""
    names = ["node-manager-port", "object-manager-port", "dashboard-agent-grpc-port",
             "dashboard-agent-listen-port", "metrics-export-port", "runtime-env-agent-port"]
    if head:
        names += ["port", "dashboard-port", "ray-client-server-port"]
    ports = dict(zip(names, PORTS.ports(len(names)), strict=True))
    base = PORTS.port_range(16)
    args = [f"--{name}={port}" for name, port in ports.items()
            if name not in ("port", "dashboard-port")]
    args += [f"--min-worker-port={base}", f"--max-worker-port={base + 15}",
             "--object-store-memory=80000000"]
    return args, ports


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (from /proc; no psutil in the test deps)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def find_descendant(pid: int, needle: str) -> int:
    for child in descendants(pid):
        if needle in cmdline(child):
            return child
    raise LookupError(f"no descendant of {pid} runs {needle!r}")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


class NodeProc:
    """One ``argus node head|worker`` process with its own log file."""

    def __init__(self, role: str, env: dict[str, str], log_path: Path) -> None:
        self.role, self.env, self.log_path = role, env, log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> "NodeProc":
        self.proc = spawn_group(ARGUS_NODE + [self.role], self.log_path, env=self.env, cwd=REPO,
                                stdin=subprocess.DEVNULL)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None:
            kill_group(self.proc)


class Cluster:
    """Environment builder and observer for one test cluster under a temp directory."""

    def __init__(self, root: Path, ray_tmp: Path, name: str) -> None:
        self.root, self.ray_tmp, self.name = root, ray_tmp, name
        self.shared = root / "shared"
        self.head_file = self.shared / "ray" / "discovery" / name / "head.json"
        self.nodes: list[NodeProc] = []
        _, self.head_ports = node_port_args(head=True)

    def env(self, node_name: str, extra_args: list[str], **overrides: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ARGUS_", "RAY_"))}
        env.update(FAST_ENV)
        env.update({
            "ARGUS_SHARED_ROOT": str(self.shared),
            "ARGUS_CLUSTER_NAME": self.name,
            "ARGUS_NODE_NAME": node_name,
            "ARGUS_RAY_BIN": RAY_BIN,
            "ARGUS_RAY_EXTRA_ARGS": " ".join(extra_args),
            "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONUNBUFFERED": "1",
        })
        env.update(overrides)
        return env

    def head_env(self, **overrides: str) -> dict[str, str]:
        args, _ = node_port_args(head=True)
        # The GCS and dashboard ports stay the same across head restarts, as in production.
        return self.env("head", [f"--temp-dir={self.ray_tmp}", *args],
                        ARGUS_RAY_PORT=str(self.head_ports["port"]),
                        ARGUS_DASHBOARD_PORT=str(self.head_ports["dashboard-port"]),
                        **overrides)

    def worker_env(self, node_name: str, **overrides: str) -> dict[str, str]:
        args, _ = node_port_args(head=False)
        # A worker defaults to the head's temp dir (Ray reads it from the GCS). Two workers
        # on one host starting at once then race for the same socket names (raylet.1,
        # plasma_store.1) and one raylet dies with "Address already in use". Containers
        # have their own /tmp; here every node gets its own short temp dir.
        temp = self.root / node_name
        return self.env(node_name, [f"--temp-dir={temp}", *args],
                        ARGUS_NUM_CPUS="1", ARGUS_NUM_GPUS="0", **overrides)

    def start(self, role: str, env: dict[str, str], label: str) -> NodeProc:
        node = NodeProc(role, env, self.root / f"{label}.log").start()
        self.nodes.append(node)
        return node

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.head_ports['dashboard-port']}"

    def alive_nodes(self) -> list[Any]:
        """ALIVE nodes as the head's state API reports them ([] while it is down)."""
        from ray.util.state import list_nodes

        try:
            return list_nodes(address=self.dashboard_url, filters=[("state", "=", "ALIVE")],
                              timeout=10, raise_on_missing_output=False)
        except Exception:  # noqa: BLE001 - head down or restarting: "no nodes" is the truth
            return []

    def worker_nodes(self) -> dict[str, Any]:
        """node_id → NodeState, for ALIVE nodes offering ``worker_node``."""
        return {n.node_id: n for n in self.alive_nodes()
                if "worker_node" in (n.resources_total or {})}

    def head_nodes(self) -> list[Any]:
        return [n for n in self.alive_nodes() if n.is_head_node]

    def stop_all(self) -> None:
        for node in reversed(self.nodes):
            node.stop()


@contextlib.contextmanager
def cluster_factory() -> Iterator[Callable[[str], Cluster]]:
    """Yields a factory of clusters with short temp paths (Unix socket paths are limited to
    ~107 bytes, and Ray nests several directories under --temp-dir); stops them all."""
    made: list[Cluster] = []

    def factory(name: str) -> Cluster:
        root = Path(tempfile.mkdtemp(prefix="anp-"))
        cluster = Cluster(root, root / "r", name)
        made.append(cluster)
        return cluster

    try:
        yield factory
    finally:
        for cluster in made:
            cluster.stop_all()
            # ARGUS_TEST_KEEP=1 keeps the logs and Ray session dirs for a post-mortem.
            if not os.environ.get("ARGUS_TEST_KEEP"):
                shutil.rmtree(cluster.root, ignore_errors=True)

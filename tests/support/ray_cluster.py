"""A real, private Ray cluster for the test session: one head (no CPUs, no GPUs) and two
worker nodes with logical GPUs, shaped like production (docs/design.md §8).

Other engineers run their own Ray clusters on the same machine at the same time, so:
every port is picked free at runtime, the temp dir is private (and short: unix socket paths
are limited to ~107 bytes), and teardown kills only the process groups this fixture started
(never ``ray stop``, never kill-by-name).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from argus.confine import abi_version
from argus.confine.claims import ClaimWatcher, claim_dashboard_job
from argus.confine.registry import registry_dir
from argus.nodepool.startup import HostLoad, ray_log_env, ray_startup_env
from argus.procs import (
    PortBook,
    free_ports,
    kill_group,
    signal_group,
    spawn_group,
)

__all__ = ["RayCluster", "WorkerNode", "free_ports", "ray_cluster"]

WORKER_GPUS = 4
WORKER_CPUS = 16
WORKER_NODE_RESOURCE = 100
# Each worker's GPUs labelled with a model, as Ray labels real ones (accelerator_type:<model>):
# a task that names no model runs on either, one that names a model only on its node.
WORKER_GPU_TYPES = ("A100", "H100")



def startup_timeout_s(base_s: float = 90.0) -> float:
    """How long a node may take to come up: ``base_s`` on a quiet host, longer on a loaded
    one (the same scale as the limits Ray itself is given, see argus.nodepool.startup)."""
    return base_s * HostLoad.read().scale() / 2


STARTUP_TIMEOUT_S = startup_timeout_s()


# Every port given to a node this process starts, so that no two nodes share one (nodes
# are started one at a time, and a port freed when asked is not bound until ``ray start``).
PORTS = PortBook()


def _agent_port(args: list[str]) -> int:
    """The dashboard agent's HTTP port a node's arguments give it."""
    flag = "--dashboard-agent-listen-port="
    return int(next(a for a in args if a.startswith(flag))[len(flag):])


def _node_ports() -> list[str]:
    """The per-node port flags (everything a raylet and its agents listen on)."""
    p = PORTS.ports(6)
    lo = PORTS.port_range(40)
    hi = lo + 39
    return [
        f"--node-manager-port={p[0]}",
        f"--object-manager-port={p[1]}",
        f"--dashboard-agent-grpc-port={p[2]}",
        f"--dashboard-agent-listen-port={p[3]}",
        f"--metrics-export-port={p[4]}",
        f"--runtime-env-agent-port={p[5]}",
        f"--min-worker-port={lo}",
        f"--max-worker-port={hi}",
    ]


class WorkerNode(msgspec.Struct, kw_only=True):
    """One ``ray start --block`` process we own (its process group holds raylet & co)."""

    name: str
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    # False once a test killed it on purpose: a node that died by itself (a start that
    # timed out on a busy host) is started again while waiting for it.
    wanted: bool = True
    revived: int = 0
    gpu_type: str = ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class RayCluster:
    """Handle on the running cluster: addresses, paths, and worker kill/restart helpers."""

    def __init__(self, temp_dir: Path, shared_root: Path) -> None:
        self.temp_dir = temp_dir
        self.shared_root = shared_root
        self.log_dir = temp_dir / "node-logs"
        self.log_dir.mkdir()
        gcs_port, dash_port, client_port = PORTS.ports(3)
        self.address = f"127.0.0.1:{gcs_port}"
        self.job_server_url = f"http://127.0.0.1:{dash_port}"
        self._client_port = client_port
        self.head = WorkerNode(name="head", args=[])
        self.workers: list[WorkerNode] = []
        self.claims: ClaimWatcher | None = None
        env = dict(os.environ)
        env.pop("RAY_ADDRESS", None)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env.update(ray_startup_env(HostLoad.read(), env))
        env.update(ray_log_env(env))  # as the node pool starts its nodes
        self.env = env

    # -- lifecycle ---------------------------------------------------------------------
    def _spawn(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        # Own process group: teardown signals exactly the processes this node started. And
        # it dies with pytest (PDEATHSIG; Ray's own children die with it): a pytest killed
        # by a timeout must not leave a cluster behind.
        return spawn_group(args, self.log_dir / f"{name}.log", env=self.env,
                           die_with_parent=True)

    def _ray(self, own_ports: list[str]) -> list[str]:
        # As the node pool runs Ray where the kernel has Landlock: every job's Ray workers
        # confined to its user's files (argus.confine), and unable to reach Ray's doors to
        # unconfined code (the dashboard, the head's agent and client server, this node's
        # agent: argus.confine.raystart), so every real-Ray test runs so.
        doors = {int(self.job_server_url.rsplit(":", 1)[1]), self._client_port,
                 _agent_port(self.head.args or own_ports), _agent_port(own_ports)}
        denied = [arg for port in sorted(doors) for arg in ("--deny-connect", str(port))]
        start = (["-m", "argus.confine.raystart", "--shared-root", str(self.shared_root), *denied, "--", "start"]
                 if abi_version() >= 1 else ["-m", "ray.scripts.scripts", "start"])
        return [sys.executable, *start, "--block",
                "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                f"--temp-dir={self.temp_dir}", "--object-store-memory=80000000"]

    def start(self) -> None:
        host, port = self.address.split(":")
        dash_port = self.job_server_url.rsplit(":", 1)[1]
        ports = _node_ports()
        self.head.args = self._ray(ports) + [
            "--head", "--num-gpus=0", "--num-cpus=0", f"--port={port}",
            "--include-dashboard=true", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dash_port}", f"--ray-client-server-port={self._client_port}",
            *ports,
        ]
        self.head.proc = self._spawn(self.head.args, "head")
        self._wait_http(f"{self.job_server_url}/api/version")
        if abi_version() >= 1:  # the dashboard's job supervisors stay unconfined, as the head's watchdog does it
            self.claims = claim_dashboard_job(registry_dir(str(self.shared_root)), self.address,
                                              ray_pid=self.head.proc.pid)
        # One at a time: two raylets registering at once on a 2-core machine can time out
        # against a busy GCS.
        for i in range(2):
            worker = WorkerNode(name=f"worker{i}", args=[], gpu_type=WORKER_GPU_TYPES[i])
            self.workers.append(worker)
            self.start_worker(worker)
            self.wait_workers_alive(i + 1)

    def start_worker(self, worker: WorkerNode) -> None:
        """(Re)start a worker with fresh ports (old ones may sit in TIME_WAIT)."""
        ports = _node_ports()
        worker.args = self._ray(ports) + [
            f"--address={self.address}", f"--num-gpus={WORKER_GPUS}",
            f"--num-cpus={WORKER_CPUS}",
            f"--resources={json.dumps({'worker_node': WORKER_NODE_RESOURCE, f'accelerator_type:{worker.gpu_type}': 1})}",
            # All nodes share one session log dir on this host; one log monitor (the
            # head's) is enough, more would repeat every worker line in job logs.
            "--include-log-monitor=false",
            *ports,
        ]
        worker.proc = self._spawn(worker.args, worker.name)
        worker.wanted = True

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker node's whole process group (a lost node)."""
        worker = self.workers[index]
        worker.wanted = False
        if worker.proc is not None:
            signal_group(worker.proc, signal.SIGKILL)
            worker.proc.wait(timeout=10)

    def restart_worker(self, index: int) -> None:
        self.kill_worker(index)
        self.start_worker(self.workers[index])

    def stop(self) -> None:
        if self.claims is not None:
            self.claims.stop()
        for node in [*self.workers, self.head]:
            if node.proc is not None:
                kill_group(node.proc, grace_s=5.0)

    # -- waiting -----------------------------------------------------------------------
    def _wait_http(self, url: str) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.head.proc is not None and self.head.proc.poll() is not None:
                # The log's end in the message: the temp dir is removed at teardown.
                try:
                    tail = (self.log_dir / "head.log").read_text(errors="replace").splitlines()[-25:]
                except OSError:
                    tail = []
                raise HeadExited("ray head exited; its log ends:\n" + "\n".join(tail))
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"{url} did not answer within {STARTUP_TIMEOUT_S}s")

    def alive_worker_node_ids(self) -> list[str]:
        """ALIVE nodes that carry the ``worker_node`` resource (dashboard state API)."""
        from ray.util.state import list_nodes

        nodes = list_nodes(address=self.job_server_url, detail=True, raise_on_missing_output=False)
        return [n.node_id for n in nodes
                if n.state == "ALIVE" and "worker_node" in (n.resources_total or {})]

    def wait_workers_alive(self, count: int, timeout_s: float = STARTUP_TIMEOUT_S) -> list[str]:
        """Wait for ``count`` alive worker nodes; a wanted worker whose ``ray start`` gave up
        (Ray's fixed 30 s registration limit, on a busy host) is started again, up to 3 times."""
        deadline = time.monotonic() + max(timeout_s, STARTUP_TIMEOUT_S)
        last: list[str] = []
        while time.monotonic() < deadline:
            for worker in self.workers:
                if worker.wanted and not worker.alive() and worker.revived < 3:
                    print(f"{worker.name} exited by itself; starting it again")
                    worker.revived += 1
                    self.start_worker(worker)
            try:
                last = self.alive_worker_node_ids()
            except Exception:  # the state API is not ready yet
                last = []
            if len(last) == count:
                return last
            time.sleep(0.5)
        raise TimeoutError(f"expected {count} alive worker nodes, saw {last}")


class HeadExited(RuntimeError):
    """The head process ended while starting (its log's end is the message)."""


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """Start the private cluster once per session; kill exactly what it started. A cluster
    that does not start (its head exited or never answered) is tried up to three times on
    fresh ports: the free ports were picked before Ray bound them, another process on a
    shared host may take one, and a busy host can miss Ray's fixed start-up limits."""
    for attempt in (1, 2, 3):
        temp_dir = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
        shared_root = Path(tempfile.mkdtemp(prefix="argus-shared-"))
        cluster = RayCluster(temp_dir, shared_root)
        try:
            cluster.start()
        except (HeadExited, TimeoutError) as exc:
            cluster.stop()
            shutil.rmtree(shared_root, ignore_errors=True)
            shutil.rmtree(temp_dir, ignore_errors=True)
            if attempt == 3:
                raise
            print(f"ray cluster did not start; trying again on fresh ports ({exc})")
            continue
        except BaseException:
            cluster.stop()
            shutil.rmtree(shared_root, ignore_errors=True)
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        try:
            yield cluster
        finally:
            cluster.stop()
            shutil.rmtree(shared_root, ignore_errors=True)
            shutil.rmtree(temp_dir, ignore_errors=True)
        return

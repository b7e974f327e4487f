"""Ray's head away for longer than its GCS client tolerates, then back as another cluster
at the same address, and a head that moves: the gateway reports Ray unavailable and
carries on, and this process (which reads capacity all along) is never taken down.

Before, the GCS client lived in this process: after 60 s without the GCS it aborted the
process ("Failed to connect to GCS within 60 seconds"), and a restarted head at the same
address aborted it too (``WrongClusterID``). A private head of our own, started and killed
by this test (the session's shared cluster is left alone).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from argus.nodepool.startup import HostLoad, ray_startup_env
from argus.procs import free_ports, spawn_group
from argus.rayjobs.gateway import RayGateway, RayUnavailable
from argus.rayjobs.probe import GcsProbe, ProbeFailed

pytestmark = [pytest.mark.ray, pytest.mark.slow]

# Ray's GCS client gives up after ``gcs_rpc_server_reconnect_timeout_s`` (60 s by default);
# the probe's child runs with it at 20 s (set below) and the head stays away past that:
# the same abort it used to cause, sooner.
RAY_RECONNECT_LIMIT_S = 20
AWAY_S = RAY_RECONNECT_LIMIT_S + 10.0


class Head:
    """``ray start --head --block`` on a fixed port, restartable (a new cluster id each time)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port, self.dash = free_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def gcs(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.proc is not None:  # what is left of an earlier start's group holds ports
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        temp = Path(tempfile.mkdtemp(prefix="rp", dir="/tmp"))  # short: socket path limits
        p = free_ports(6)
        self.proc = spawn_group(
            [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
             "--disable-usage-stats", "--node-ip-address=127.0.0.1", f"--port={self.port}",
             "--num-cpus=0", "--num-gpus=0", "--include-dashboard=false", f"--temp-dir={temp}",
             f"--node-manager-port={p[0]}", f"--object-manager-port={p[1]}",
             f"--dashboard-agent-grpc-port={p[2]}", f"--dashboard-agent-listen-port={p[3]}",
             f"--metrics-export-port={p[4]}", f"--runtime-env-agent-port={p[5]}",
             f"--ray-client-server-port={self.dash}", "--object-store-memory=80000000"],
            self.root / "head.log", env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
                                         **ray_startup_env(HostLoad.read())},
            die_with_parent=True)
        self.starts += 1

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    h = Head(tmp_path)
    try:
        yield h
    finally:
        h.kill()


def _until_answers(probe: GcsProbe, head: Head) -> list[dict[str, Any]]:
    """The nodes, once the GCS answers with the head's node registered. A head whose
    ``ray start`` gave up (Ray's fixed 30 s registration limit, missed on a busy host) is
    started again, as the head watchdog does: this test is about the probe, not Ray."""
    deadline = time.monotonic() + 60.0 * HostLoad.read().scale()
    while True:
        with contextlib.suppress(ProbeFailed):
            nodes = probe.nodes()
            if any(n["alive"] for n in nodes):
                return nodes
        if head.exited() and head.starts < 4:
            head.start()
        assert time.monotonic() < deadline, f"the head never answered ({head.starts} starts)"
        time.sleep(1.0)


def test_head_away_then_back_as_another_cluster(head: Head, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", str(RAY_RECONNECT_LIMIT_S))
    head.start()
    probe = GcsProbe(head.gcs, timeout_s=10.0)
    try:
        first = _until_answers(probe, head)
        head.kill()
        gone_at = time.monotonic()
        failures = 0
        while time.monotonic() - gone_at < AWAY_S:
            with pytest.raises(ProbeFailed):
                probe.nodes()
            failures += 1
            time.sleep(2.0)
        assert failures >= 3
        head.start()  # same address, new cluster id
        again = _until_answers(probe, head)
        assert {n["node_id"] for n in again if n["alive"]}.isdisjoint(
            {n["node_id"] for n in first}), "a new head: new node ids"
    finally:
        probe.close()


def test_gateway_follows_a_head_that_moves(ray_cluster: Any) -> None:
    """``locate`` is asked before every call: the discovery record pointing elsewhere
    moves the gateway there, and a dead address is only RayUnavailable."""
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    where = {"gcs": dead, "url": f"http://{dead}"}
    gateway = RayGateway.following(lambda: (where["url"], where["gcs"]))
    try:
        with pytest.raises(RayUnavailable):
            gateway.capacity()
        where.update(gcs=ray_cluster.address, url=ray_cluster.job_server_url)
        assert len(gateway.capacity()) == 2  # the session cluster's two workers
        assert gateway.status("no-such-job--a01") is None
        where.update(gcs=dead, url=f"http://{dead}")
        with pytest.raises(RayUnavailable):
            gateway.status("no-such-job--a01")
    finally:
        gateway.close()

"""The watchdogs' decisions with a stand-in for `ray` (real processes, no Ray): backoff,
head change, withdrawal, SIGTERM, and a Ray child that must not outlive its watchdog."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from argus.nodepool import make_head_record, read_head_record, write_head_record
from argus.procs import spawn_group
from tests.nodepool.cluster import ARGUS_NODE, REPO, free_ports, kill_group, wait_for

FAKE_RAY = textwrap.dedent('''\
    #!{python}
    """Stand-in for `ray start`: records its argv; `fail` mode exits 1 at once; a head
    listens on --port; then it says what `ray start --block` says and blocks."""
    import os, socket, sys, time
    with open(os.environ["FAKE_RAY_CALLS"], "a") as f:
        f.write(f"{{os.getpid()}} {{' '.join(sys.argv[1:])}}\\n")
    try:
        mode = open(os.environ["FAKE_RAY_MODE"]).read().strip()
    except OSError:
        mode = "run"
    with open(os.environ["FAKE_RAY_CALLS"] + ".env", "a") as f:
        f.write(os.environ.get("RAY_agent_register_timeout_ms", "-") + "\\n")
    if mode == "fail":
        sys.exit(1)
    if mode == "agent_timeout":  # what Ray's raylet says when its agent is late
        print("[raylet] Timed out waiting for file /tmp/ray/session_1/ports_by_node.json: "
              "dashboard_agent_listen_port", flush=True)
        sys.exit(1)
    sock = None
    for arg in sys.argv:
        if arg.startswith("--port="):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", int(arg.split("=")[1])))
            sock.listen()
    print("Ray runtime started.", flush=True)
    time.sleep(600)
''')


@pytest.fixture
def fake(tmp_path):
    ray = tmp_path / "ray"
    ray.write_text(FAKE_RAY.format(python=sys.executable))
    ray.chmod(0o755)
    calls, mode = tmp_path / "calls", tmp_path / "mode"
    calls.touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
    env.update({
        "ARGUS_SHARED_ROOT": str(tmp_path / "shared"), "ARGUS_CLUSTER_NAME": "fake",
        "ARGUS_RAY_BIN": str(ray), "ARGUS_NODE_IP": "127.0.0.1", "ARGUS_NODE_NAME": "n1",
        # The fake `ray` is a program; a confining node runs Ray's own `ray start` in-process.
        "ARGUS_CONFINE": "none",
        "ARGUS_POLL_S": "0.3", "ARGUS_BACKOFF_INITIAL_S": "0.2", "ARGUS_BACKOFF_MAX_S": "0.8",
        "ARGUS_STABLE_S": "30", "ARGUS_STOP_GRACE_S": "2", "ARGUS_TTL_S": "5",
        "ARGUS_REFRESH_S": "0.5", "ARGUS_RAY_EXTRA_ARGS": "--temp-dir=/x --num-cpus=3",
        "FAKE_RAY_CALLS": str(calls), "FAKE_RAY_MODE": str(mode), "PYTHONUNBUFFERED": "1",
    })
    head_file = tmp_path / "shared" / "ray" / "discovery" / "fake" / "head.json"
    procs: list[subprocess.Popen] = []

    def start(role: str, **extra: str) -> subprocess.Popen:
        proc = spawn_group(ARGUS_NODE + [role], tmp_path / f"{role}.log", env={**env, **extra}, cwd=REPO)
        procs.append(proc)
        return proc

    def log(role: str) -> str:
        return (tmp_path / f"{role}.log").read_text()

    def ray_pids() -> list[int]:
        return [int(line.split()[0]) for line in calls.read_text().splitlines()]

    yield SimpleNamespace(start=start, log=log, ray_pids=ray_pids, mode=mode, calls=calls,
                          head_file=head_file)
    for proc in procs:
        kill_group(proc, grace_s=5)
    for pid in ray_pids():
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _publish(path: Path, head_id: str, port: int = 6379, ttl: float = 300) -> None:
    write_head_record(path, make_head_record(cluster_name="fake", head_ip="127.0.0.1",
                                             gcs_port=port, dashboard_port=8265, ttl_s=ttl,
                                             head_id=head_id))


def test_worker_backoff_grows_and_is_capped(fake):
    fake.mode.write_text("fail")
    _publish(fake.head_file, "h1")
    proc = fake.start("worker")
    wait_for(lambda: fake.log("worker").count("restart_scheduled") >= 5, 30, "five failures")
    delays = [float(x) for x in re.findall(r"restart_scheduled .*?after_s=([\d.]+)",
                                           fake.log("worker"))]
    assert delays[:5] == [0.2, 0.4, 0.8, 0.8, 0.8]
    assert proc.poll() is None
    argv = fake.calls.read_text().splitlines()[0]
    assert "start --address=127.0.0.1:6379 --node-ip-address=127.0.0.1" in argv
    assert '--resources={"worker_node":100.0}' in argv
    # Operator's extra args come last, after --block, so they win over ours.
    assert argv.endswith("--block --temp-dir=/x --num-cpus=3")


def test_worker_follows_head_changes_withdrawal_and_sigterm(fake):
    fake.mode.write_text("run")
    fake.head_file.parent.mkdir(parents=True)
    fake.head_file.write_text("garbage")
    proc = fake.start("worker")
    wait_for(lambda: "wait_for_head" in fake.log("worker") and "reason=garbage"
             in fake.log("worker"), 20, "wait on garbage")

    _publish(fake.head_file, "h1")
    first = wait_for(lambda: fake.ray_pids() and fake.ray_pids()[0], 20, "first ray start")
    _publish(fake.head_file, "h1")  # a refresh of the same head: no restart
    _publish(fake.head_file, "h2")  # a new head start on the same address
    wait_for(lambda: len(fake.ray_pids()) == 2, 20, "restart for the new head")
    assert not _alive(first)
    log = fake.log("worker")
    assert "head_changed" in log and "old_head_id=h1" in log and "new_head_id=h2" in log

    # The head withdraws its record: Ray stops, the worker waits instead of restarting.
    second = fake.ray_pids()[1]
    write_head_record(fake.head_file, make_head_record(
        cluster_name="fake", head_ip="127.0.0.1", gcs_port=6379, dashboard_port=8265,
        ttl_s=0, head_id="h2"))
    wait_for(lambda: not _alive(second), 20, "ray to stop on withdrawal")
    wait_for(lambda: "reason=expired" in fake.log("worker"), 20, "wait on expired")
    assert len(fake.ray_pids()) == 2

    _publish(fake.head_file, "h3", port=7000)
    wait_for(lambda: len(fake.ray_pids()) == 3, 20, "join the moved head")
    third = fake.ray_pids()[2]
    assert "--address=127.0.0.1:7000" in fake.calls.read_text().splitlines()[2]

    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert not _alive(third)
    assert "stop_requested" in fake.log("worker")


def test_ray_child_dies_with_a_killed_watchdog(fake):
    fake.mode.write_text("run")
    _publish(fake.head_file, "h1")
    proc = fake.start("worker")
    child = wait_for(lambda: fake.ray_pids() and fake.ray_pids()[0], 20, "ray start")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    wait_for(lambda: not _alive(child), 10, "the orphaned ray to die")


def test_head_publishes_then_withdraws_and_exits_nonzero_when_ray_dies(fake):
    fake.mode.write_text("run")
    (port,) = free_ports(1)
    proc = fake.start("head", ARGUS_RAY_PORT=str(port))
    rec = wait_for(lambda: (r := read_head_record(fake.head_file)).usable and r.record, 20,
                   "head.json")
    assert (rec.head_ip, rec.gcs_port, rec.cluster_name) == ("127.0.0.1", port, "fake")
    assert rec.expires_at - rec.updated_at == timedelta(seconds=5)
    # Refreshed while alive.
    wait_for(lambda: read_head_record(fake.head_file).record.updated_at > rec.updated_at,
             10, "a refresh")
    argv = fake.calls.read_text().splitlines()[0]
    assert "--head" in argv and "--num-gpus=0 --num-cpus=0" in argv and f"--port={port}" in argv

    os.kill(fake.ray_pids()[0], signal.SIGKILL)
    assert proc.wait(timeout=20) != 0
    after = read_head_record(fake.head_file)
    assert after.reason == "expired" and after.record.withdrawn
    assert after.record.head_id == rec.head_id
    assert "ray_exited" in fake.log("head")
    assert datetime.now(timezone.utc) - after.record.updated_at < timedelta(seconds=30)



def test_a_head_that_fails_to_start_is_started_again_with_the_cause_and_scaled_limits(fake):
    """Before being published, a failed head start is retried by the watchdog itself, after
    a growing pause, with the cause in one line and Ray's start-up limits raised."""
    fake.mode.write_text("agent_timeout")
    (port,) = free_ports(1)
    proc = fake.start("head", ARGUS_RAY_PORT=str(port))
    wait_for(lambda: fake.log("head").count("restart_scheduled") >= 3, 30, "three failed starts")
    assert proc.poll() is None, "the watchdog keeps trying; nobody was told of this head"
    log = fake.log("head")
    delays = [float(x) for x in re.findall(r"restart_scheduled .*?after_s=([\d.]+)", log)]
    assert delays[:3] == [0.2, 0.4, 0.8]
    assert "cause=\"Ray's raylet timed out waiting for its dashboard agent" in log
    assert "action=start_again" in log
    # The limit reached Ray's environment, raised from Ray's 30 s default.
    limits = {int(v) for v in Path(str(fake.calls) + ".env").read_text().split()}
    assert min(limits) >= 60_000
    assert "limits=\"RAY_DASHBOARD_STARTUP_TIMEOUT_S=" in log
    fake.mode.write_text("run")
    wait_for(lambda: read_head_record(fake.head_file).usable, 20, "published once Ray starts")

"""The image's entrypoint and supervisord, for real (no Docker): the entrypoint renders the
config for each role and execs supervisord; supervisord runs the watchdogs with real Ray;
a killed watchdog is started again and its orphaned Ray does not survive it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from argus.nodepool import read_head_record
from tests.nodepool.cluster import REPO, descendants, kill_group, wait_for

ENTRYPOINT = REPO / "images" / "argus-ray-node" / "entrypoint.sh"
NODE_COMMAND = f"{sys.executable} -m argus node"

needs_supervisord = pytest.mark.skipif(shutil.which("supervisord") is None,
                                       reason="supervisord not installed (pip install supervisor)")


def _supervisor(env: dict[str, str], run_dir: Path, log: Path, role: str) -> SimpleNamespace:
    env = {**env, "ARGUS_ROLE": role, "ARGUS_SUPERVISOR_DIR": str(run_dir),
           "ARGUS_NODE_COMMAND": NODE_COMMAND}
    with open(log, "ab") as out:
        proc = subprocess.Popen(["bash", str(ENTRYPOINT)], env=env, cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    program = f"argus_{role}_watchdog"
    return SimpleNamespace(proc=proc, env=env, conf=run_dir / "supervisord.conf",
                           program=program, log=log)


def _program_pid(sup: SimpleNamespace) -> int:
    """The watchdog's pid as supervisord reports it (0 while it is not running)."""
    res = subprocess.run(["supervisorctl", "-c", str(sup.conf), "pid", sup.program],
                         capture_output=True, text=True, timeout=30)
    text = res.stdout.strip()
    return int(text) if text.isdigit() else 0


def _ray_start_pid(watchdog_pid: int) -> int:
    for pid in descendants(watchdog_pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # `ray` is a Python script: argv is [python, …/ray, start, …]; on a node that confines
        # jobs, [python, -m, argus.confine.raystart, …, --, start, …].
        if b"start" in argv[1:3] and any(a.endswith(b"/ray") for a in argv[:2]):
            return pid
        if b"argus.confine.raystart" in argv[1:3] and b"start" in argv:
            return pid
    return 0


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_entrypoint_rejects_a_missing_role(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ARGUS_ROLE"}
    env["ARGUS_SUPERVISOR_DIR"] = str(tmp_path)
    res = subprocess.run(["bash", str(ENTRYPOINT), "--render-only"], env=env,
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert "ARGUS_ROLE" in res.stderr


@pytest.mark.parametrize("role", ["head", "worker"])
def test_entrypoint_renders_seed_defaults(tmp_path, role):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
    env.update(ARGUS_ROLE=role, ARGUS_SUPERVISOR_DIR=str(tmp_path / "run"),
               ARGUS_SHARED_ROOT=str(tmp_path / "shared"), ARGUS_NODE_NAME="n1")
    res = subprocess.run(["bash", str(ENTRYPOINT), "--render-only"], env=env,
                         capture_output=True, text=True, check=True)
    conf = Path(res.stdout.strip()).read_text()
    assert f"[program:argus_{role}_watchdog]" in conf
    assert f"command=argus node {role}" in conf
    assert "autorestart=true" in conf
    assert f"logfile={tmp_path}/shared/common/logs/nodes/argus-ray/n1/supervisord.log" in conf
    assert "stdout_logfile=/dev/stdout" in conf


@pytest.mark.ray
@pytest.mark.slow
@needs_supervisord
def test_supervisord_restarts_killed_watchdogs(make_cluster):
    c = make_cluster("np-sup")
    head = _supervisor(c.head_env(), c.root / "sh", c.root / "sup-head.log", "head")
    try:
        # Head role: supervisord runs the head watchdog, which publishes head.json.
        first = wait_for(lambda: (r := read_head_record(c.head_file)).usable and r.record,
                         120, "head.json from the supervised head")
        pid1 = wait_for(lambda: _program_pid(head), 30, "the head watchdog pid")
        ray1 = wait_for(lambda: _ray_start_pid(pid1), 30, "the head's ray start")

        os.kill(pid1, signal.SIGKILL)
        pid2 = wait_for(lambda: (p := _program_pid(head)) not in (0, pid1) and p, 60,
                        "supervisord to restart the head watchdog")
        # The orphaned Ray died with its watchdog (PDEATHSIG), freeing the ports for the
        # new one, which publishes a new head_id.
        wait_for(lambda: _gone(ray1), 30, "the old head Ray to die")
        second = wait_for(lambda: (r := read_head_record(c.head_file)).usable
                          and r.record.head_id != first.head_id and r.record, 120,
                          "head.json from the restarted head")
        assert (second.head_ip, second.gcs_port) == (first.head_ip, first.gcs_port)
        assert pid2 != pid1

        # Worker role: joins the supervised head; a killed watchdog is restarted and the
        # node comes back as a new Ray node.
        worker = _supervisor(c.worker_env("sw1"), c.root / "sw", c.root / "sup-w.log", "worker")
        try:
            nodes = wait_for(lambda: len(c.worker_nodes()) == 1 and c.worker_nodes(), 150,
                             "the supervised worker to join")
            wpid1 = _program_pid(worker)
            wray1 = wait_for(lambda: _ray_start_pid(wpid1), 30, "the worker's ray start")
            os.kill(wpid1, signal.SIGKILL)
            wait_for(lambda: (p := _program_pid(worker)) not in (0, wpid1) and p, 60,
                     "supervisord to restart the worker watchdog")
            wait_for(lambda: _gone(wray1), 30, "the orphaned worker Ray to die")
            wait_for(lambda: len(c.worker_nodes()) == 1 and set(c.worker_nodes()) != set(nodes),
                     150, "the worker to rejoin as a new node")

            # supervisorctl stop: the watchdog takes its Ray process group down with it.
            wpid2 = _program_pid(worker)
            wray2 = wait_for(lambda: _ray_start_pid(wpid2), 30, "the new worker's ray start")
            subprocess.run(["supervisorctl", "-c", str(worker.conf), "stop", worker.program],
                           check=True, capture_output=True, timeout=60)
            wait_for(lambda: _gone(wray2), 30, "the worker Ray to stop")
            wait_for(lambda: not c.worker_nodes(), 60, "the worker node to leave")
        finally:
            kill_group(worker.proc, grace_s=30)
        assert "[program:argus_worker_watchdog]" in worker.conf.read_text()
    finally:
        kill_group(head.proc, grace_s=30)
    # Decision lines also reach the shared log directory.
    shared_log = c.shared / "common" / "logs" / "nodes" / "np-sup" / "sw1" / "watchdog.log"
    assert "ray_start" in shared_log.read_text()

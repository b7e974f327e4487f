"""Every process of a job confined to its user's files, on a cluster as ``argus up`` runs it
(the node pool's head and worker watchdogs, ``argus.cli.stack.Stack``): the job's command,
a Ray task, a Ray actor, and actors started with their own ``runtime_env`` (environment
variables set or emptied, another ``py_executable``) each try to read and to write another
user's home, and each is refused; each writes its own home and reads the shared datasets.

The user comes from the claim the job's driver wrote for the Ray job its command started
(argus.confine.registry), read by the launcher the raylet starts every worker with: not
from anything the job sets.

Nor can any of them reach Ray's doors to code outside a job's confinement (Landlock TCP
rules on the raylet, argus.confine.raystart): the dashboard's job API, the head's dashboard
agent and the Ray client server refuse the connection; so a job cannot submit a job of its
own whose entrypoint would run as Ray's dashboard job."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from argus.cli.stack import Stack
from argus.config import ArgusConfig
from argus.confine import abi_version
from argus.confine.registry import SYSTEM, Claim, registry_dir
from argus.rayjobs.submission import build_submission
from tests.support.ray_cluster import startup_timeout_s

pytestmark = pytest.mark.skipif(abi_version() < 1, reason="this kernel has no Landlock")

JOB = '''
import os, socket, sys, ray
HOME = os.environ["ARGUS_HOME_UNDER_TEST"]
DOORS = [d.rsplit(":", 1) for d in os.environ["ARGUS_DOORS_UNDER_TEST"].split(",")]
BOB = os.path.join(os.path.dirname(HOME), "bob")
DATASET = os.path.join(os.path.dirname(os.path.dirname(HOME)), "datasets", "public.txt")

def attempt(tag):
    said = []
    for what, act in [("read-other", lambda: open(os.path.join(BOB, "secret.txt")).read()),
                      ("write-other", lambda: open(os.path.join(BOB, tag + ".planted"), "w").write("x")),
                      ("write-own", lambda: open(os.path.join(HOME, tag + ".mine"), "w").write("x")),
                      ("read-dataset", lambda: open(DATASET).read())]:
        try:
            act()
            said.append(f"{tag} {what} OK")
        except OSError as exc:
            said.append(f"{tag} {what} DENIED errno={exc.errno}")
    for host, port in DOORS:
        try:
            socket.create_connection((host, int(port)), timeout=10).close()
            said.append(f"{tag} door {port} OK")
        except OSError as exc:
            said.append(f"{tag} door {port} DENIED errno={exc.errno}")
    return said

ray.init()

@ray.remote
def task():
    return attempt("task")

@ray.remote
class Probe:
    def go(self, tag):
        return attempt(tag)

lines = attempt("command") + ray.get(task.remote()) + ray.get(Probe.remote().go.remote("actor"))
for tag, env in [("actor-env", {"env_vars": {"HOME": "/", "TMPDIR": "/tmp", "ARGUS_USER": "bob",
                                             "LD_PRELOAD": ""}}),
                 ("actor-empty-env", {"env_vars": {}}),
                 ("actor-py-executable", {"py_executable": sys.executable})]:
    lines += ray.get(Probe.options(runtime_env=env).remote().go.remote(tag))
print("\\n".join("RESULT " + line for line in lines), flush=True)
'''
WHO = ("command", "task", "actor", "actor-env", "actor-empty-env", "actor-py-executable")


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ArgusConfig, dict[str, Any]]]:
    data = tmp_path_factory.mktemp("up")
    config = ArgusConfig(shared_root=str(data / "shared"))
    config.v2.sqlite.db_path = str(data / "argus.sqlite3")
    stack = Stack(data, config, gpus=1, cpus=6, echo=print)
    stack.start()
    try:
        head = data / "shared" / "ray" / "discovery" / config.cluster_name / "head.json"
        deadline = time.monotonic() + startup_timeout_s(120)
        while not head.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        record = json.loads(head.read_text())
        yield config, record
    finally:
        stack.stop()


def _doors(record: dict[str, Any]) -> list[tuple[str, int]]:
    """The head's doors to unconfined code, as its discovery record names them."""
    return [(record["head_ip"], port) for port in (record["dashboard_port"], record["agent_listen_port"],
                                                   record["client_port"])]


def _run(config: ArgusConfig, record: dict[str, Any], user: str, code: str) -> tuple[str, str]:
    from ray.job_submission import JobSubmissionClient

    shared = Path(config.shared_root)
    home = shared / "users" / user
    (home / "code").mkdir(parents=True, exist_ok=True)
    (home / "code" / "probe.py").write_text(code)
    payload = build_submission(task_id=f"{user}-t1", attempt_no=1, user=user, config=config,
                               python=sys.executable, env_vars={
                                   "ARGUS_HOME_UNDER_TEST": str(home),
                                   "ARGUS_DOORS_UNDER_TEST": ",".join(f"{h}:{p}" for h, p in _doors(record))},
                               command=f"{sys.executable} {home}/code/probe.py")
    client = JobSubmissionClient(record["job_server_url"])
    deadline = time.monotonic() + startup_timeout_s(240)
    # Accepted even before the worker has joined: the job waits for a worker_node.
    sid = client.submit_job(entrypoint=payload.entrypoint, submission_id=payload.submission_id,
                            runtime_env=payload.runtime_env,
                            entrypoint_resources=payload.entrypoint_resources,
                            entrypoint_num_cpus=payload.entrypoint_num_cpus)
    while not client.get_job_status(sid).is_terminal():
        assert time.monotonic() < deadline, client.get_job_logs(sid)[-4000:]
        time.sleep(1)
    log = (home / "jobs" / sid / "driver.log").read_text()
    return str(client.get_job_status(sid)), log


def test_every_process_of_a_job_reaches_only_its_users_files(up: tuple[ArgusConfig, dict[str, Any]]) -> None:
    config, record = up
    shared = Path(config.shared_root)
    (shared / "users" / "bob").mkdir(parents=True, exist_ok=True)
    (shared / "users" / "bob" / "secret.txt").write_text("bob's\n")
    (shared / "datasets").mkdir(parents=True, exist_ok=True)
    (shared / "datasets" / "public.txt").write_text("everyone's\n")
    status, log = _run(config, record, "alice", JOB)
    results = {line.split(" ", 1)[1] for line in log.splitlines() if line.startswith("RESULT ")}
    assert status == "SUCCEEDED", log[-4000:]
    for who in WHO:
        assert f"{who} read-other DENIED errno=13" in results, log[-4000:]
        assert f"{who} write-other DENIED errno=13" in results, log[-4000:]
        assert f"{who} write-own OK" in results and f"{who} read-dataset OK" in results, log[-4000:]
        for _, port in _doors(record):
            assert f"{who} door {port} DENIED errno=13" in results, log[-4000:]
    assert sorted(p.name for p in (shared / "users" / "bob").iterdir()) == ["secret.txt"]
    # Who was whose: the dashboard's own job (unconfined: it runs every entrypoint), and
    # the job the command started, claimed for alice.
    claims = [Claim.from_json(p.read_bytes())
              for p in Path(registry_dir(config.shared_root)).glob("*/*.json")]
    assert sorted(c.user for c in claims) == sorted([SYSTEM, "alice"]), claims
    # alice's was claimed by the node's claim desk (argus.confine.desk), not by a watcher of
    # her driver's own, which would have imported Ray beside her command.
    node_log = (Path(config.v2.sqlite.db_path).parent / "logs" / "worker.log").read_text()
    assert "claimed Ray job" in node_log and "for alice (alice-t1--a01)" in node_log, node_log[-3000:]

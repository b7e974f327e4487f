"""A submission storm through real processes, with kill -9 of the API midway and of the
reactor twice: every acknowledged task is in the log once, Ray holds exactly one job per
recorded attempt, and the database is intact.

Four users submit 50 tasks each over HTTP to ``argus serve``; ``argus reactor`` admits
them to the session's Ray cluster (two at a time, so that kills land while submissions
and Ray calls are in flight, and the test does not wait for 200 jobs to run).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from argus.procs import free_ports, kill_group
from tests.reactor.harness import write_config_file

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ADMIN = "admin-token-for-the-storm-0123456789abcdef"
USERS = ("ann", "ben", "cat", "dan")
PER_USER = 50
SPEC = """\
kind: advanced
workload: ppo
nnodes: 1
n_gpus_per_node: 1
command: python3 -m argus.examples.reward_example trainer.nnodes=1 trainer.n_gpus_per_node=1
"""


class Proc:
    """``python -m argus <args>`` in its own process group, restartable after a kill -9."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.args, self.log, self.env = args, log, env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "argus", *self.args], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def kill9(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-2000:]
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            kill_group(self.proc, grace_s=20)


def _wait_http(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        assert time.monotonic() < deadline, "the API did not come up"
        time.sleep(0.2)


def _until_submitted(path: Path, timeout_s: float) -> None:
    """Until the log holds an attempt handed to Ray and every intent recorded so far is
    settled (submitted or ended), then a moment for a submission in flight."""
    deadline = time.monotonic() + timeout_s
    while True:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            count = dict(db.execute("SELECT type, count(*) FROM events WHERE type IN "
                                    "('AttemptStarting', 'AttemptSubmitted', 'AttemptEnded') GROUP BY type"))
        except sqlite3.OperationalError:
            count = {}
        finally:
            db.close()
        starting = count.get("AttemptStarting", 0)
        settled = count.get("AttemptSubmitted", 0) + count.get("AttemptEnded", 0)
        if count.get("AttemptSubmitted", 0) and settled >= starting:
            time.sleep(1.0)
            return
        assert time.monotonic() < deadline, f"nothing was handed to Ray in {timeout_s:.0f} s: {count}"
        time.sleep(0.5)


def test_storm_with_kill_9_of_the_api_and_the_reactor(ray_cluster: Any, tmp_path: Path) -> None:
    port = free_ports(1)[0]
    url = f"http://127.0.0.1:{port}"
    config = Path(write_config_file(ray_cluster, max_running_tasks=2))
    doc = yaml.safe_load(config.read_text())
    doc["v2"].update(sqlite={"db_path": str(tmp_path / "argus.sqlite3")}, api={"port": port})
    config.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "ARGUS_ADMIN_TOKEN": ADMIN, "PYTHONUNBUFFERED": "1"}
    api = Proc(["serve", "--config", str(config)], tmp_path / "api.log", env)
    reactor = Proc(["reactor", "--config", str(config)], tmp_path / "reactor.log", env)
    acknowledged: dict[str, str] = {}  # task id -> user
    lock = threading.Lock()
    try:
        api.start()
        _wait_http(url)
        tokens = {}
        with httpx.Client(base_url=f"{url}/api/v2", headers={"Authorization": f"Bearer {ADMIN}"}) as c:
            for user in USERS:
                assert c.post("/users", json={"user_id": user}).status_code == 201
                tokens[user] = c.post(f"/users/{user}/tokens", json={"label": "storm"}).json()["token"]
        reactor.start()

        def storm(user: str) -> None:
            """Submit until PER_USER are acknowledged; an unanswered request is sent again
            (as a new submission: only 201 answers count as acknowledged)."""
            done = 0
            with httpx.Client(base_url=f"{url}/api/v2", timeout=10,
                              headers={"Authorization": f"Bearer {tokens[user]}"}) as c:
                while done < PER_USER:
                    try:
                        r = c.post("/tasks", content=SPEC)
                    except httpx.HTTPError:
                        time.sleep(0.2)  # the API is down: a user retries
                        continue
                    assert r.status_code == 201, r.text
                    with lock:
                        acknowledged[r.json()["task_id"]] = user
                    done += 1

        threads = [threading.Thread(target=storm, args=(u,), daemon=True) for u in USERS]
        for t in threads:
            t.start()
        kills = [(40, reactor), (100, api), (160, reactor)]  # after this many acknowledgements
        for after, proc in kills:
            while len(acknowledged) < after and any(t.is_alive() for t in threads):
                time.sleep(0.05)
            proc.kill9()
            time.sleep(0.5)
            proc.start()
            if proc is api:
                _wait_http(url)
        for t in threads:
            t.join(120)
        assert len(acknowledged) == len(USERS) * PER_USER
        # The restarted reactor settles what it found in flight and admits: it waits first
        # for its nodes to have been observed for node_settle_s, so on a busy host the storm
        # can be over before it admits anything. Waited for, not slept on.
        _until_submitted(tmp_path / "argus.sqlite3", timeout_s=120.0)
        reactor.stop()
        api.stop()

        db = sqlite3.connect(tmp_path / "argus.sqlite3")
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        submitted = db.execute("SELECT json_extract(data, '$.task_id'), count(*) FROM events "
                               "WHERE type = 'TaskSubmitted' GROUP BY 1").fetchall()
        counts = dict(submitted)
        assert all(counts.get(t) == 1 for t in acknowledged), "an acknowledged task is missing or twice"
        intents = [r[0] for r in db.execute(
            "SELECT json_extract(data, '$.submission_id') FROM events WHERE type = 'AttemptStarting'")]
        assert len(intents) == len(set(intents)) and intents, "an attempt was started twice"
        ours = {sid for sid in _ray_submission_ids(ray_cluster) if sid.split("--a")[0] in counts}
        assert ours, "the reactor ran some of them on Ray"
        assert ours <= set(intents), f"Ray has jobs no attempt recorded: {sorted(ours - set(intents))[:5]}"
        owners = dict(db.execute("SELECT task_id, user FROM tasks").fetchall())
        assert all(owners[t] == u for t, u in acknowledged.items())
        db.close()
        verify = subprocess.run([sys.executable, "-m", "argus", "replay", "--db", str(tmp_path / "argus.sqlite3"),
                                 "verify"], capture_output=True, text=True, timeout=120)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    finally:
        reactor.stop()
        api.stop()
        _stop_our_jobs(ray_cluster, set(acknowledged))


def _ray_submission_ids(ray_cluster: Any) -> list[str]:
    from ray.job_submission import JobSubmissionClient

    return [j.submission_id for j in JobSubmissionClient(ray_cluster.job_server_url).list_jobs()
            if j.submission_id]


def _stop_our_jobs(ray_cluster: Any, tasks: set[str]) -> None:
    """Leave the shared cluster free for the next test."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_cluster.job_server_url)
    for job in client.list_jobs():
        if job.submission_id and job.submission_id.split("--a")[0] in tasks and not job.status.is_terminal():
            with contextlib.suppress(Exception):
                client.stop_job(job.submission_id)

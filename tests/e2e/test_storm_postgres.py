"""Beyond one host: two API processes and two reactors share one log on PostgreSQL, each
process with its own local copy (``argus.store.mirror``). During a submission storm the
leading reactor's process is killed with SIGKILL, then one API's: the standby reactor
takes the lease on the database's clock and leads, users go on through the other API,
every acknowledged task is in the log once, and Ray holds exactly one job per recorded
attempt. Each survivor's copy is clean under ``argus replay verify``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import subprocess
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import yaml

from argus.procs import free_ports
from tests.e2e.test_submission_storm import SPEC, Proc, _ray_submission_ids, _stop_our_jobs, _wait_http
from tests.reactor.harness import write_config_file
from tests.support.postgres import PostgresServer

pytestmark = [pytest.mark.ray, pytest.mark.slow]
asyncpg = pytest.importorskip("asyncpg", reason="asyncpg is not installed: pip install -e '.[test]'")

ADMIN = "admin-token-for-the-pg-storm-0123456789abcdef"
USERS = ("ann", "ben", "cat", "dan")
PER_USER = 40


def _config(cluster: Any, tmp: Path, name: str, shared_url: str, port: int) -> Path:
    path = Path(write_config_file(cluster, max_running_tasks=2))
    doc = yaml.safe_load(path.read_text())
    doc["v2"].update(sqlite={"db_path": str(tmp / f"{name}.sqlite3")}, api={"port": port},
                     postgres={"url": shared_url})
    path.write_text(yaml.safe_dump(doc))
    return path


def _events(shared_url: str, kind: str) -> list[dict[str, Any]]:
    """Every event of type ``kind`` in the shared log, decoded, in order."""
    async def fetch() -> list[dict[str, Any]]:
        conn = await asyncpg.connect(shared_url)
        try:
            rows = await conn.fetch("SELECT data FROM events WHERE type = $1 ORDER BY position", kind)
        finally:
            await conn.close()
        return [msgspec.json.decode(r["data"]) for r in rows]

    return asyncio.run(fetch())


def _leader_pid(shared_url: str, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while not (elected := _events(shared_url, "ReactorLeaderElected")):
        assert time.monotonic() < deadline, "no reactor took the lease"
        time.sleep(0.2)
    return int(elected[-1]["pid"])


def test_two_apis_and_two_reactors_on_postgres_survive_kill_9_of_the_leaders(
        ray_cluster: Any, postgres_server: PostgresServer, tmp_path: Path) -> None:
    shared_url = asyncio.run(postgres_server.new_database())
    ports = free_ports(2)
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    env = {**os.environ, "ARGUS_ADMIN_TOKEN": ADMIN, "PYTHONUNBUFFERED": "1"}
    apis = [Proc(["serve", "--config", str(_config(ray_cluster, tmp_path, f"api{k}", shared_url, ports[k]))],
                 tmp_path / f"api{k}.log", env) for k in range(2)]
    reactors = [Proc(["reactor", "--config", str(_config(ray_cluster, tmp_path, f"reactor{k}", shared_url, 0))],
                     tmp_path / f"reactor{k}.log", env) for k in range(2)]
    acknowledged: dict[str, str] = {}  # task id -> user
    lock = threading.Lock()
    try:
        for api, url in zip(apis, urls):  # one after the other: the first creates the admin
            api.start()
            _wait_http(url, timeout_s=60)
        tokens = {}
        with httpx.Client(base_url=f"{urls[0]}/api/v2", headers={"Authorization": f"Bearer {ADMIN}"}) as c:
            for user in USERS:
                assert c.post("/users", json={"user_id": user}).status_code == 201
                tokens[user] = c.post(f"/users/{user}/tokens", json={"label": "storm"}).json()["token"]
        reactors[0].start()
        first_leader = _leader_pid(shared_url)
        reactors[1].start()  # the standby

        def storm(k: int, user: str) -> None:
            """Submit until PER_USER are acknowledged, through one API and, when it does
            not answer, the other (an unanswered request is sent again: only 201 counts)."""
            done, which = 0, k % 2
            while done < PER_USER:
                try:
                    # Tokens are checked on each API's own copy; one that has not copied a
                    # user created a moment ago asks the shared log: no 401.
                    r = httpx.post(f"{urls[which]}/api/v2/tasks", content=SPEC, timeout=10,
                                   headers={"Authorization": f"Bearer {tokens[user]}"})
                except httpx.HTTPError:
                    which = 1 - which
                    time.sleep(0.2)
                    continue
                assert r.status_code == 201, r.text
                with lock:
                    acknowledged[r.json()["task_id"]] = user
                done += 1

        threads = [threading.Thread(target=storm, args=(k, u), daemon=True) for k, u in enumerate(USERS)]
        for t in threads:
            t.start()
        leading = next(r for r in reactors if r.proc is not None and r.proc.pid == first_leader)
        for after, proc in [(40, leading), (100, apis[0])]:
            while len(acknowledged) < after and any(t.is_alive() for t in threads):
                time.sleep(0.05)
            proc.kill9()
        for t in threads:
            t.join(180)
        assert len(acknowledged) == len(USERS) * PER_USER
        second_leader = _leader_pid(shared_url)
        deadline = time.monotonic() + 60
        while second_leader == first_leader and time.monotonic() < deadline:
            time.sleep(0.5)
            second_leader = _leader_pid(shared_url)
        assert second_leader != first_leader, "the standby never took the lease"
        time.sleep(5.0)  # the new leader settles what it found in flight
        for proc in (*reactors, *apis):
            proc.stop()

        counts: dict[str, int] = {}
        for e in _events(shared_url, "TaskSubmitted"):
            counts[e["task_id"]] = counts.get(e["task_id"], 0) + 1
        assert all(counts.get(t) == 1 for t in acknowledged), "an acknowledged task is missing or twice"
        intents = [e["submission_id"] for e in _events(shared_url, "AttemptStarting")]
        assert intents and len(intents) == len(set(intents)), "an attempt was started twice"
        ours = {sid for sid in _ray_submission_ids(ray_cluster) if sid.split("--a")[0] in counts}
        assert ours and ours <= set(intents), f"Ray has jobs no attempt recorded: {sorted(ours - set(intents))[:5]}"
        for copy in ("api1", "reactor1"):  # the survivors' copies
            verify = subprocess.run([sys.executable, "-m", "argus", "replay", "--db", str(tmp_path / f"{copy}.sqlite3"),
                                     "verify"], capture_output=True, text=True, timeout=120)
            assert verify.returncode == 0, verify.stdout + verify.stderr
    finally:
        for proc in (*reactors, *apis):
            proc.stop()
        _stop_our_jobs(ray_cluster, set(acknowledged))

"""kill -9 of the reactor process at each step of a submission, over a batch of tasks:
after a restart every task ends exactly once and Ray holds exactly one job per attempt. On
a SQLite log, and on a log shared through PostgreSQL (the reactor and the test each with
a copy of their own, as on two hosts)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from argus.lifecycle import TaskState
from argus.reactor import CRASH_POINTS
from projections import open_store
from tests.reactor.harness import event_types, submit_task, task_view, toy_command, unique_id, write_config_file

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _start_reactor(config: str, db: Path, log: Path, crash_at: str = "") -> subprocess.Popen:  # type: ignore[type-arg]
    env = dict(os.environ, ARGUS_REACTOR_CRASH_AT=crash_at, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "argus", "reactor", "--config", config, "--db", str(db)],
        env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )


def _stop(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("crash_at", CRASH_POINTS)
async def test_kill_9_at_each_submission_step(ray_cluster: Any, tmp_path: Path, crash_at: str, backend: str,
                                              request: pytest.FixtureRequest) -> None:
    shared = Path(ray_cluster.shared_root)
    url = await request.getfixturevalue("postgres_server").new_database() if backend == "postgres" else ""
    config = write_config_file(ray_cluster, postgres_url=url)
    db = tmp_path / "argus.db"  # the reactor's log, or its copy of the shared one
    log = tmp_path / "reactor.log"
    store = await open_store(tmp_path / "test-copy.db" if url else db, synchronous="NORMAL", shared_url=url)
    try:
        tasks = [
            await submit_task(store, unique_id(f"crash{i}"), command=toy_command(shared, "alice", nnodes=1, gpus=1, steps=2))
            for i in range(3)
        ]
        first = _start_reactor(config, db, log, crash_at)
        try:
            assert await asyncio.to_thread(first.wait, 90) == -signal.SIGKILL, log.read_text()[-3000:]
        finally:
            _stop(first)
        second = _start_reactor(config, db, log)
        try:
            deadline = time.monotonic() + 150
            views = []
            while time.monotonic() < deadline:
                views = [await task_view(store, t) for t in tasks]
                if all(v is not None and v.state.is_terminal() for v in views):
                    break
                await asyncio.sleep(0.3)
        finally:
            _stop(second)
        assert all(v is not None and v.state is TaskState.SUCCEEDED for v in views), (
            [(v.task_id, v.state, v.error_summary) for v in views if v], log.read_text()[-3000:])
        from ray.job_submission import JobSubmissionClient

        jobs = JobSubmissionClient(ray_cluster.job_server_url).list_jobs()
        for task_id in tasks:
            view = await task_view(store, task_id)
            assert view is not None and len(view.attempts) == 1
            submissions = [j.submission_id for j in jobs if (j.submission_id or "").startswith(task_id + "--")]
            assert submissions == [f"{task_id}--a01"], submissions
            types = await event_types(store, task_id)
            assert types.count("AttemptStarting") == 1 and types.count("AttemptSubmitted") == 1
            assert types.count("TaskSucceeded") == 1
        # The first reactor did die where it was told to.
        assert f"fault injection: SIGKILL at {crash_at}" in log.read_text()
    finally:
        await store.close()
    from argus.replay import verify

    report = verify(db)
    assert report.ok, report

"""What a researcher looks for at a glance: task rows with GPUs, age, step and why; the
queue with reasons; the cluster; one readable line per event. Against a real server."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from argus.events import (
    AttemptProgressed,
    AttemptRunning,
    AttemptStarting,
    CapacityObserved,
    Demand,
    NodeCapacity,
    SubmissionPayload,
    TaskDeferred,
    cluster_stream,
    task_stream,
)
from argus.store import AppendBatch
from projections import open_store
from tests.api.conftest import ADVANCED, put_dataset
from tests.cli.test_cli import Server, run


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("glance")) as s:
        yield s


def _append(server: Server, batches: list[AppendBatch]) -> None:
    """Append as the reactor would: another writer on the same database."""
    async def go() -> None:
        store = await open_store(server.config.v2.sqlite.db_path, synchronous="NORMAL")
        try:
            await store.append_batches(batches)
        finally:
            await store.close()

    asyncio.run(go())


def _submit(server: Server, spec: str) -> str:
    r = run(server, "submit", "-", input=spec)
    assert r.exit_code == 0, r.output
    return r.output.strip().splitlines()[0]


def test_tasks_queue_cluster_watch(server: Server) -> None:
    shared = Path(server.config.shared_root)
    put_dataset(shared, "admin")
    named = "name: tiny toy run\n" + ADVANCED.replace("total_training_steps=3", "total_training_steps=7")
    running = _submit(server, named)
    waiting = _submit(server, ADVANCED)
    sid = f"{running}--a01"
    payload = SubmissionPayload(submission_id=sid, entrypoint="x", entrypoint_num_cpus=1,
                                entrypoint_resources={}, runtime_env={}, metadata={})
    now = time.time()
    _append(server, [
        AppendBatch(stream=task_stream(running), expected_version=1, owner="admin", events=[
            AttemptStarting(task_id=running, attempt_no=1, submission_id=sid, payload=payload, decided_at=now),
            AttemptRunning(task_id=running, attempt_no=1, submission_id=sid, started_at=now - 125),
            # its driver reported step 3 (argus.rayjobs.reports): what the list shows; 4 steps
            # of the spec's 7 left at 5 min a step: it ends in 20 min
            AttemptProgressed(task_id=running, attempt_no=1, submission_id=sid, step=3, step_at=now,
                              step_time_s=300.0, observed_at=now)]),
        AppendBatch(stream=task_stream(waiting), expected_version=1, owner="admin", events=[
            TaskDeferred(task_id=waiting, reason="no_capacity_per_node",
                         message="needs 1 node with 1 GPU free; free GPUs per node: [0]",
                         needed=Demand(nnodes=1, n_gpus_per_node=1, cpus_per_node=4),
                         free_gpus_per_node=[0.0], decided_at=now)]),
        AppendBatch(stream=cluster_stream, expected_version=None, events=[CapacityObserved(
            nodes=[NodeCapacity(node_id="abcdef0123456789", ip="10.1.2.3", total_gpus=4, free_gpus=0,
                                total_cpus=16, free_cpus=12)], observed_at=now)]),
    ])
    log = shared / "users/admin/jobs" / sid / "driver.log"
    log.parent.mkdir(parents=True)
    log.write_text("starting\nstep:1 - loss:1.0\nstep:2 - loss:0.5\n(TaskRunner) step:3 - loss:0.2\n")

    out = run(server, "tasks").output
    row = next(line for line in out.splitlines() if line.startswith(running))
    assert "tiny toy run" in row and "RUNNING" in row and "3/7" in row and " 2m" in row, out
    row = next(line for line in out.splitlines() if line.startswith(waiting))
    assert "no_capacity_per_node: needs 1 node" in row and "~in 19m" in row, out

    out = run(server, "queue").output
    assert waiting in out and "1x1 GPU" in out and "no_capacity_per_node" in out, out
    row = next(line for line in out.splitlines() if waiting in line)
    assert "~in 19m" in row, out  # a fresh stack: no interval learned yet, the expected start

    # The list, the queue and the task page give the waiting task the same expected start:
    # when the running task's steps are done (a fresh stack has no history: not an hour).
    shown = [run(server, "show", waiting, "--json").output]
    shown += [next(t for t in json.loads(run(server, cmd, "--json").output)["items"] if t["task_id"] == waiting)
              for cmd in ("tasks", "queue")]
    starts = [json.loads(shown[0])["expected_start"], shown[1]["expected_start"], shown[2]["expected_start"]]
    assert starts[0] == pytest.approx(now + 1200, abs=1) and starts.count(starts[0]) == 3, starts

    out = run(server, "cluster").output
    assert "reachable" in out and "0/4" in out and "12/16" in out and "10.1.2.3" in out, out

    out = run(server, "show", running).output
    assert '"tiny toy run"' in out, out

    out = run(server, "shares").output  # admin: one GPU running, one task waiting
    row = next(line for line in out.splitlines() if line.startswith("admin"))
    assert "4 GPUs" in out and row.split()[1:8] == ["1", "-", "4.0", "1", "1", "1", "0.0"], out


def test_watch_prints_one_readable_line_per_event(server: Server) -> None:
    from argus.cli.tasks_cmd import event_line

    line = event_line({"position": 12, "stream": "task-alice-ppo-1", "type": "AttemptEnded",
                       "recorded_at": time.time(),
                       "data": {"type": "AttemptEnded", "task_id": "alice-ppo-1", "attempt_no": 1,
                                "submission_id": "alice-ppo-1--a01", "ray_status": "FAILED",
                                "exit_code": 1, "failure_kind": "USER_ERROR",
                                "evidence": "ModuleNotFoundError: No module named 'numpy'",
                                "ended_at": time.time()}})
    assert "\n" not in line
    assert "alice-ppo-1  attempt 1 ended FAILED, USER_ERROR, exit code 1" in line
    assert "No module named 'numpy'" in line


def test_a_row_says_why_a_task_waits_before_why_its_last_attempt_failed() -> None:
    from argus.cli.tasks_cmd import _why

    retrying = {"state": "PENDING_RESOURCES", "failure_kind": "CLUSTER_LOST", "error_summary": "node died",
                "wait_reason": "retry_backoff", "wait_message": "attempt 1 failed (CLUSTER_LOST); retry in 30s"}
    assert _why(retrying).startswith("retry_backoff: attempt 1 failed")
    failed = {**retrying, "state": "FAILED"}
    assert _why(failed) == "CLUSTER_LOST: node died"

"""The seed platform's names for a task's facts, served beside Argus's own in
``GET /tasks/{id}``: ``ray_submission_id``, ``start_time``/``end_time``, ``message`` on
each attempt, ``latest_attempt`` and ``jobspec`` on the task (docs/api.md)."""

from __future__ import annotations

import time

from argus.events import (
    AttemptEnded, AttemptRunning, AttemptStarting, AttemptSubmitted, SubmissionPayload, TaskFailed, task_stream,
)
from argus.store import AppendBatch
from tests.api.conftest import ADVANCED, Env, put_dataset


async def test_seed_names_mean_what_argus_names_mean(env: Env) -> None:
    put_dataset(env.shared, "alice")
    r = await env.client.post("/api/v2/tasks", content=ADVANCED, headers=env.h("alice"))
    assert r.status_code == 201, r.text
    task_id = r.json()["task_id"]
    fresh = (await env.client.get(f"/api/v2/tasks/{task_id}", headers=env.h("alice"))).json()
    assert fresh["attempts"] == [] and fresh["latest_attempt"] is None
    assert fresh["jobspec"] == ADVANCED  # the spec as it was sent, byte for byte
    sid, now = f"{task_id}--a01", time.time()
    payload = SubmissionPayload(submission_id=sid, entrypoint="x", entrypoint_num_cpus=1,
                                entrypoint_resources={}, runtime_env={}, metadata={})
    await env.store.append_batches([AppendBatch(stream=task_stream(task_id), expected_version=1, owner="alice", events=[
        AttemptStarting(task_id=task_id, attempt_no=1, submission_id=sid, payload=payload, decided_at=now),
        AttemptSubmitted(task_id=task_id, attempt_no=1, submission_id=sid, submitted_at=now + 1),
        AttemptRunning(task_id=task_id, attempt_no=1, submission_id=sid, started_at=now + 2),
        AttemptEnded(task_id=task_id, attempt_no=1, submission_id=sid, ray_status="FAILED", exit_code=1,
                     evidence="ZeroDivisionError: division by zero", ended_at=now + 3),
        TaskFailed(task_id=task_id, attempt_no=1, failure_kind="RUNTIME_ERROR", error_summary="boom",
                   finished_at=now + 3)])])
    for who in ("alice", "admin"):  # the owner's view goes through the redactor, the admin's not
        body = (await env.client.get(f"/api/v2/tasks/{task_id}", headers=env.h(who))).json()
        (attempt,) = body["attempts"]
        assert attempt["ray_submission_id"] == attempt["submission_id"] == sid
        assert attempt["start_time"] == attempt["started_at"] == now + 2
        assert attempt["end_time"] == attempt["ended_at"] == now + 3
        assert attempt["message"] == attempt["evidence"] == "ZeroDivisionError: division by zero"
        assert body["latest_attempt"] == attempt
        assert body["error_summary"] == "boom" and body["jobspec"] == ADVANCED
        # The task page counts the driver's CPUs with the demand, as wait reasons do.
        assert body["driver_cpus"] == env.config.entrypoint_num_cpus == 1

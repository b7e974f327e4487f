"""Owners delete their finished tasks' folders under ``jobs/`` (``DELETE /files/jobs/...``,
``argus files rm -r``): never a task that is not finished, never another user's, never
through a link a job planted; each deletion an ``AttemptOutputsRemoved`` event. Admins
write ``common/datasets`` and ``common/hf``; users do not."""

from __future__ import annotations

import os
import time
from pathlib import Path

from argus.events import AttemptEnded, AttemptStarting, SubmissionPayload, TaskFailed, task_stream
from argus.store import AppendBatch, read_stream
from tests.api.conftest import ADVANCED, Env, put_dataset
from tests.api.test_jobs_area import make_job, snapshot


async def _task(env: Env, user: str = "alice", finished: bool = True) -> tuple[str, str]:
    """A task of ``user`` with one attempt (ended and the task FAILED when ``finished``,
    else still starting): its id and the attempt's submission id."""
    put_dataset(env.shared, user)
    r = await env.client.post("/api/v2/tasks", content=ADVANCED, headers=env.h(user))
    assert r.status_code == 201, r.text
    task_id = r.json()["task_id"]
    sid = f"{task_id}--a01"
    payload = SubmissionPayload(submission_id=sid, entrypoint="x", entrypoint_num_cpus=1,
                                entrypoint_resources={}, runtime_env={}, metadata={})
    now = time.time()
    events: list = [AttemptStarting(task_id=task_id, attempt_no=1, submission_id=sid, payload=payload,
                                    decided_at=now)]
    if finished:
        events += [AttemptEnded(task_id=task_id, attempt_no=1, submission_id=sid, ray_status="FAILED",
                                exit_code=1, ended_at=now),
                   TaskFailed(task_id=task_id, attempt_no=1, failure_kind="RUNTIME_ERROR",
                              error_summary="boom", finished_at=now)]
    await env.store.append_batches([AppendBatch(stream=task_stream(task_id), expected_version=1,
                                                owner=user, events=events)])
    return task_id, sid


async def _removed_events(env: Env, task_id: str) -> list:
    recs = await env.store.read_snapshot(lambda db: read_stream(db, task_stream(task_id)))
    return [r.event for r in recs if r.type == "AttemptOutputsRemoved"]


async def test_owner_deletes_a_finished_attempt_and_it_is_recorded(env: Env) -> None:
    task_id, sid = await _task(env)
    job = make_job(env.shared, "alice", sid)
    size = sum(p.stat().st_size for p in job.rglob("*") if p.is_file())
    r = await env.client.delete(f"/api/v2/files/jobs/{sid}", headers=env.h("alice"))
    assert r.status_code == 400 and "recursive" in r.json()["detail"]  # a folder needs -r
    assert job.is_dir()
    r = await env.client.delete(f"/api/v2/files/jobs/{sid}", params={"recursive": "true"},
                                headers=env.h("alice"))
    assert r.status_code == 200, r.text
    assert r.json()["is_dir"] is True and r.json()["size"] == size
    assert not job.exists()
    [event] = await _removed_events(env, task_id)
    assert (event.attempt_no, event.paths, event.bytes, event.rule, event.by, event.complete) == (
        1, [sid], size, "owner", "alice", True)
    assert event.entries == 7  # 4 files, checkpoints/, global_step_1/, model.pt ... and the folder
    r = await env.client.get(f"/api/v2/tasks/{task_id}", headers=env.h("alice"))
    attempt = r.json()["attempts"][0]
    assert attempt["outputs_gone"] is True and attempt["outputs_removed_bytes"] == size


async def test_owner_deletes_one_checkpoint(env: Env) -> None:
    task_id, sid = await _task(env)
    job = make_job(env.shared, "alice", sid)
    r = await env.client.delete(f"/api/v2/files/jobs/{sid}/checkpoints/global_step_1",
                                params={"recursive": "true"}, headers=env.h("alice"))
    assert r.status_code == 200, r.text
    assert not (job / "checkpoints/global_step_1").exists() and (job / "driver.log").is_file()
    [event] = await _removed_events(env, task_id)
    assert event.paths == [f"{sid}/checkpoints/global_step_1"] and event.bytes == 1000


async def test_an_unfinished_task_is_never_touched(env: Env) -> None:
    task_id, sid = await _task(env, finished=False)
    job = make_job(env.shared, "alice", sid)
    before = snapshot(job)
    for path in (sid, f"{sid}/driver.log", task_id):
        r = await env.client.delete(f"/api/v2/files/jobs/{path}", params={"recursive": "true"},
                                    headers=env.h("alice"))
        assert r.status_code == 409, r.text
        assert "STARTING" in r.json()["detail"] or "SUBMITTING" in r.json()["detail"]
    assert snapshot(job) == before
    assert await _removed_events(env, task_id) == []


async def test_not_a_task_of_yours_nor_through_a_link(env: Env) -> None:
    _, bob_sid = await _task(env, "bob")
    bob_job = make_job(env.shared, "bob", bob_sid)
    bob_before = snapshot(bob_job)
    task_id, sid = await _task(env)
    job = make_job(env.shared, "alice", sid)
    # alice names bob's attempt: it is not in her jobs/, and not her task
    r = await env.client.delete(f"/api/v2/files/jobs/{bob_sid}", params={"recursive": "true"},
                                headers=env.h("alice"))
    assert r.status_code == 409, r.text
    # a job planted links: to bob's folder, inside her attempt and as a folder of jobs/
    os.symlink(bob_job, job / "bob")
    os.symlink(bob_job / "driver.log", job / "checkpoints" / "log")
    r = await env.client.delete(f"/api/v2/files/jobs/{sid}/bob/driver.log", headers=env.h("alice"))
    assert r.status_code == 400 and "symbolic link" in r.json()["detail"]
    r = await env.client.delete(f"/api/v2/files/jobs/{sid}", params={"recursive": "true"},
                                headers=env.h("alice"))
    assert r.status_code == 200, r.text
    assert not job.exists()
    assert snapshot(bob_job) == bob_before  # the links went, never what they pointed at
    # bob's job folder swapped in for a link named like one of alice's finished attempts
    task2, sid2 = await _task(env)
    os.symlink(bob_job, env.shared / "users/alice/jobs" / sid2)
    r = await env.client.delete(f"/api/v2/files/jobs/{sid2}", params={"recursive": "true"},
                                headers=env.h("alice"))
    assert r.status_code == 400 and "symbolic link" in r.json()["detail"]
    assert snapshot(bob_job) == bob_before
    # a folder no task made
    (env.shared / "users/alice/jobs/junk").mkdir()
    r = await env.client.delete("/api/v2/files/jobs/junk", params={"recursive": "true"},
                                headers=env.h("alice"))
    assert r.status_code == 409 and "not the folder of a task" in r.json()["detail"]


async def test_admins_write_common_users_do_not(env: Env) -> None:
    for area in ("common/hf", "common/datasets"):
        r = await env.client.put(f"/api/v2/files/{area}/x/readme.txt", content=b"hi",
                                 headers=env.h("alice"))
        assert r.status_code == 403, r.text
        r = await env.client.put(f"/api/v2/files/{area}/x/readme.txt", content=b"hi",
                                 headers=env.h("admin"))
        assert r.status_code == 201, r.text
        folder = "hf" if area.endswith("hf") else "datasets"
        assert (env.shared / folder / "x/readme.txt").read_bytes() == b"hi"
        r = await env.client.get(f"/api/v2/files/{area}/x/readme.txt", headers=env.h("bob"))
        assert r.status_code == 200 and r.content == b"hi"
        r = await env.client.delete(f"/api/v2/files/{area}/x", params={"recursive": "true"},
                                    headers=env.h("bob"))
        assert r.status_code == 403
        r = await env.client.delete(f"/api/v2/files/{area}/x", params={"recursive": "true"},
                                    headers=env.h("admin"))
        assert r.status_code == 200, r.text
        assert not (env.shared / folder / "x").exists()

"""The retention policy (v2.retention) on a synthetic tree of real files: the reactor's
pass deletes what the policy says of finished tasks (attempt folders past
``max_age_days``, all but the last ``keep_checkpoints`` checkpoints), never touches a task
that is not finished, never follows a link a job planted, and records each deletion as an
``AttemptOutputsRemoved`` event."""

from __future__ import annotations

import os
import time
from pathlib import Path

from argus.config import ArgusConfig, RetentionConfig, SchedulerConfig, ServiceConfig
from argus.events import (
    AttemptEnded, AttemptStarting, EventBase, FailureKind, RetryScheduled, SubmissionPayload, TaskFailed, task_stream,
)
from argus.rayjobs import submission_id_for
from argus.rayjobs.fake import FakeRay, worker_nodes
from argus.reactor import Reactor
from argus.service.auth import AuthCache, Principal
from argus.service.commands import Commands
from argus.store import AppendBatch, read_stream
from projections import load_task, open_store

DAY = 86_400.0
SPEC = ("kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: 1\n"
        "command: python3 -m argus.examples.toy_trainer\n")


def _fill(job: Path, steps: list[int], size: int = 100) -> None:
    """An attempt folder as a verl run leaves it: a log, and a checkpoint folder per step."""
    for step in steps:
        ckpt = job / "checkpoints" / f"global_step_{step}" / "actor"
        ckpt.mkdir(parents=True)
        (ckpt / "model.safetensors").write_bytes(b"\1" * size)
    job.mkdir(parents=True, exist_ok=True)
    (job / "driver.log").write_text("step:1 - loss:1.0\n")


def _tree(root: Path) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            out.add(str((Path(dirpath) / name).relative_to(root)))
    return out


def _payload(sid: str) -> SubmissionPayload:
    return SubmissionPayload(submission_id=sid, entrypoint="x", entrypoint_num_cpus=1,
                             entrypoint_resources={}, runtime_env={}, metadata={})


async def _append(store, task_id: str, user: str, events: list[EventBase]) -> None:  # noqa: ANN001
    await store.append_batches([AppendBatch(stream=task_stream(task_id), expected_version=None,
                                            owner=user, events=events)])


async def test_a_retention_pass_keeps_what_the_policy_says(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "users").mkdir(parents=True)
    policy = RetentionConfig(max_age_days=30, keep_checkpoints=2, interval_s=3600)
    config = ArgusConfig(shared_root=str(shared), v2=ServiceConfig(
        scheduler=SchedulerConfig(poll_interval_s=30.0, lease_ttl_s=300.0), retention=policy))
    store = await open_store(tmp_path / "argus.db", synchronous="OFF")
    commands = Commands(store, config, AuthCache(store), group_commit=False)
    now = time.time()
    try:
        users = {u: Principal(user_id=u, is_admin=False, disabled=False, max_priority=1000, may_pin=True)
                 for u in ("alice", "bob")}
        done = (await commands.submit(users["alice"], SPEC)).task_id
        running = (await commands.submit(users["alice"], SPEC)).task_id
        bobs = (await commands.submit(users["bob"], SPEC)).task_id
        d1, d2, r1, b1 = (submission_id_for(done, 1), submission_id_for(done, 2),
                          submission_id_for(running, 1), submission_id_for(bobs, 1))
        # done: attempt 1 ended 40 days ago, attempt 2 two days ago, then FAILED.
        await _append(store, done, "alice", [
            AttemptStarting(task_id=done, attempt_no=1, submission_id=d1, payload=_payload(d1), decided_at=now - 41 * DAY),
            AttemptEnded(task_id=done, attempt_no=1, submission_id=d1, ray_status="FAILED", ended_at=now - 40 * DAY),
            RetryScheduled(task_id=done, failed_attempt_no=1, failure_kind=FailureKind.INSUFFICIENT_RESOURCES,
                           next_run_at=now - 3 * DAY, delay_s=1.0),
            AttemptStarting(task_id=done, attempt_no=2, submission_id=d2, payload=_payload(d2), decided_at=now - 3 * DAY),
            AttemptEnded(task_id=done, attempt_no=2, submission_id=d2, ray_status="FAILED", ended_at=now - 2 * DAY),
            TaskFailed(task_id=done, attempt_no=2, failure_kind=FailureKind.RUNTIME_ERROR, error_summary="boom",
                       finished_at=now - 2 * DAY)])
        # running: its attempt started 40 days ago and has not ended; never touched.
        await _append(store, running, "alice", [
            AttemptStarting(task_id=running, attempt_no=1, submission_id=r1, payload=_payload(r1),
                            decided_at=now - 40 * DAY)])
        # bob's task finished long ago too: his own folder goes, by the same rule.
        await _append(store, bobs, "bob", [
            AttemptStarting(task_id=bobs, attempt_no=1, submission_id=b1, payload=_payload(b1), decided_at=now - 50 * DAY),
            AttemptEnded(task_id=bobs, attempt_no=1, submission_id=b1, ray_status="FAILED", ended_at=now - 50 * DAY),
            TaskFailed(task_id=bobs, attempt_no=1, failure_kind=FailureKind.RUNTIME_ERROR, error_summary="x",
                       finished_at=now - 50 * DAY)])
        alice_jobs, bob_jobs = shared / "users/alice/jobs", shared / "users/bob/jobs"
        _fill(alice_jobs / d1, [1, 2])
        _fill(alice_jobs / d2, [3, 4, 5])
        _fill(alice_jobs / r1, [1, 2, 3, 4, 5])
        _fill(bob_jobs / b1, [7])
        precious = shared / "users/bob/models/m"  # what a planted link points at
        precious.mkdir(parents=True)
        (precious / "weights").write_bytes(b"w" * 10)
        # links a job planted: a "checkpoint" that is a link, and one inside a checkpoint
        os.symlink(precious, alice_jobs / d2 / "checkpoints" / "global_step_9")
        os.symlink(precious, alice_jobs / d2 / "checkpoints" / "global_step_3" / "escape")
        (alice_jobs / "junk--a01").mkdir()  # no task of hers: left alone
        running_before = _tree(alice_jobs / r1)

        reactor = Reactor(store, FakeRay(worker_nodes(1, gpus=8, cpus=64)), config, reactor_id="retain")
        assert reactor.retention.due(now)
        await reactor._retain(now)

        assert not (alice_jobs / d1).exists()  # 40 days: gone
        assert {p for p in _tree(alice_jobs / d2) if p.count("/") == 1 and "global_step" in p} == {
            "checkpoints/global_step_4", "checkpoints/global_step_5", "checkpoints/global_step_9"}
        assert (alice_jobs / d2 / "driver.log").is_file()
        assert _tree(alice_jobs / r1) == running_before  # not finished: untouched
        assert not (bob_jobs / b1).exists()
        assert (precious / "weights").read_bytes() == b"w" * 10  # never followed
        assert (alice_jobs / "junk--a01").is_dir()

        events = {}
        for task_id in (done, running, bobs):
            recs = await store.read_snapshot(lambda db, t=task_id: read_stream(db, task_stream(t)))
            events[task_id] = [r.event for r in recs if r.type == "AttemptOutputsRemoved"]
        assert events[running] == []
        age, prune = events[done]
        assert (age.attempt_no, age.paths, age.rule, age.by, age.complete) == (1, [d1], "max_age_days", "retention", True)
        assert age.bytes == 2 * 100 + len("step:1 - loss:1.0\n") and "40.0 days" in age.reason
        assert (prune.attempt_no, prune.paths, prune.rule) == (2, [f"{d2}/checkpoints/global_step_3"], "keep_checkpoints")
        assert prune.bytes == 100 and prune.entries == 4  # actor/, model.safetensors, escape (a link), the folder
        assert "steps 5, 4" in prune.reason
        [bob_event] = events[bobs]
        assert bob_event.paths == [b1] and bob_event.rule == "max_age_days"
        view = await store.read_snapshot(lambda db: load_task(db, done))
        assert view.attempts[0].outputs_gone and view.attempts[1].outputs_removed_bytes == 100
        assert not view.attempts[1].outputs_gone

        # Not due again before the interval; when due, nothing more to delete.
        assert not reactor.retention.due(now + 10)
        await reactor._retain(now + 3600)
        recs = await store.read_snapshot(lambda db: read_stream(db, task_stream(done)))
        assert [r.type for r in recs].count("AttemptOutputsRemoved") == 2
    finally:
        await commands.close()
        await store.close()

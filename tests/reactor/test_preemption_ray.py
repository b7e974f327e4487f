"""Preemption on the real Ray cluster (head without work resources, two workers with 4
logical GPUs each): a preemptible task holding both workers is stopped for a
higher-priority gang, goes back to the queue, and its second attempt resumes from the
first attempt's checkpoint (the toy trainer says which step it resumed from). The reactor
saw that checkpoint before the stop (CheckpointObserved: what orders the victims)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from argus.events import AttemptPreempted, CheckpointObserved, FailureKind
from argus.lifecycle import TaskState
from argus.rayjobs import job_dir, submission_id_for
from argus.events import task_stream
from tests.reactor.harness import submit_task, task_view, toy_command, unique_id, wait_state
from tests.reactor.test_reactor_ray import reactor_on

pytestmark = [pytest.mark.ray, pytest.mark.slow]


async def test_a_preempted_task_requeues_and_resumes_from_its_checkpoint(ray_cluster: Any, tmp_path: Path) -> None:
    async with reactor_on(ray_cluster, tmp_path, policy="priority", preempt_grace_s=3.0, preempt_min_run_s=15.0,
                         checkpoint_check_s=0.5) as r:
        store, shared = r.store, r.shared
        # Long enough to still run when it becomes preemptible: a running task is a candidate
        # only once it has settled into Ray's counts, SETTLE_S (15 s) after it was seen running.
        low = await submit_task(store, unique_id("low"), nnodes=2, gpus=4, preemptible=True, command=toy_command(
            shared, "alice", nnodes=2, gpus=4, steps=60, sleep_s=0.5, extra="trainer.save_freq=2"))
        first_ckpt = Path(job_dir(str(shared), "alice", submission_id_for(low, 1))) / "checkpoints"
        deadline = time.monotonic() + 120
        while not (first_ckpt / "global_step_2").is_dir():  # it ran, and saved a checkpoint
            assert time.monotonic() < deadline, "the preemptible task saved no checkpoint in 120 s"
            await asyncio.sleep(0.2)
        high = await submit_task(store, unique_id("high"), user="bob", nnodes=2, gpus=4, priority=10,
                                 command=toy_command(shared, "bob", nnodes=2, gpus=4, steps=2))
        done = await wait_state(store, high, {TaskState.SUCCEEDED, TaskState.FAILED}, timeout_s=120)
        assert done.state is TaskState.SUCCEEDED, done

        view = await task_view(store, low)
        assert view is not None
        first = view.attempts[0]
        assert first.failure_kind is FailureKind.PREEMPTED and first.preempted_by == high, first
        events = [r.event for r in await store.read_stream(task_stream(low))]
        preempted = [e for e in events if isinstance(e, AttemptPreempted)]
        assert len(preempted) == 1 and preempted[0].by_task_id == high and preempted[0].reason == "priority"
        # Seen while it ran, before it was stopped: the step it saved, in its own job dir.
        seen = [e for e in events[:events.index(preempted[0])] if isinstance(e, CheckpointObserved)]
        assert seen and seen[-1].attempt_no == 1 and seen[-1].step >= 2 and seen[-1].folder == "checkpoints", events
        assert first.checkpoint_step is not None and first.checkpoint_step >= seen[-1].step

        view = await wait_state(store, low, {TaskState.SUCCEEDED, TaskState.FAILED}, timeout_s=180)
        assert view.state is TaskState.SUCCEEDED, view
        assert len(view.attempts) == 2
        second_dir = Path(job_dir(str(shared), "alice", submission_id_for(low, 2)))
        log = (second_dir / "driver.log").read_text(errors="replace")
        resumed = [line for line in log.splitlines() if "resumed from checkpoint global_step_" in line]
        assert resumed, log[-3000:]
        step = int(resumed[0].rsplit("global_step_", 1)[1].split()[0])
        assert step >= 2
        assert (second_dir / "checkpoints" / "global_step_60").is_dir()  # the task's checkpoints, moved on
        assert not first_ckpt.exists()
        assert "moved to" in (first_ckpt.parent / "checkpoints.moved").read_text()

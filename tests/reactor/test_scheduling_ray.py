"""Scheduling on the real Ray cluster (head without work resources, two workers with 4
logical GPUs each): a task over its time limit is stopped and ends TIME_LIMIT; a node
leaving makes a queued gang never_fits without holding back a small task, and the gang
starts when the node returns."""

from __future__ import annotations

from typing import Any

import pytest

from argus.events import AttemptTimeLimitReached, task_stream
from argus.lifecycle import TaskState
from tests.reactor.harness import submit_task, toy_command, unique_id, wait_reason, wait_state
from tests.reactor.test_reactor_ray import DONE, reactor_on

pytestmark = [pytest.mark.ray, pytest.mark.slow]


async def test_a_task_over_its_time_limit_is_stopped_and_fails_time_limit(ray_cluster: Any, tmp_path: Any) -> None:
    async with reactor_on(ray_cluster, tmp_path) as r:
        task_id = await submit_task(r.store, unique_id("limit"), nnodes=1, gpus=1, time_limit_s=6.0, command=toy_command(
            r.shared, "alice", nnodes=1, gpus=1, steps=200, sleep_s=0.5))
        view = await wait_state(r.store, task_id, {TaskState.FAILED, TaskState.SUCCEEDED}, timeout_s=120)
        assert view.state is TaskState.FAILED and view.failure_kind is not None, view
        assert view.failure_kind.value == "TIME_LIMIT" and len(view.attempts) == 1, view
        assert "time limit of 6 s" in view.error_summary, view.error_summary
        reached = [rec.event for rec in await r.store.read_stream(task_stream(task_id))
                   if isinstance(rec.event, AttemptTimeLimitReached)]
        assert len(reached) == 1 and reached[0].ran_s >= 6.0
        assert view.attempts[0].ended_at is not None and view.attempts[0].started_at is not None
        assert view.attempts[0].ended_at - view.attempts[0].started_at < 60  # stopped, not run to its end


async def test_a_node_leaving_sets_a_gang_aside_as_never_fits_and_it_starts_when_the_node_returns(
        ray_cluster: Any, tmp_path: Any) -> None:
    async with reactor_on(ray_cluster, tmp_path) as r:
        ray_cluster.kill_worker(1)
        try:
            ray_cluster.wait_workers_alive(1, timeout_s=90)
            gang = await submit_task(r.store, unique_id("gang"), nnodes=2, gpus=4, command=toy_command(
                r.shared, "alice", nnodes=2, gpus=4, steps=2))
            view = await wait_reason(r.store, gang, "never_fits", timeout_s=60)
            assert "could not hold it even if idle" in view.wait_message
            small = await submit_task(r.store, unique_id("small"), nnodes=1, gpus=1, command=toy_command(
                r.shared, "alice", nnodes=1, gpus=1, steps=2))  # not held back by the gang
            assert (await wait_state(r.store, small, DONE, timeout_s=120)).state is TaskState.SUCCEEDED
        finally:
            ray_cluster.start_worker(ray_cluster.workers[1])
            ray_cluster.wait_workers_alive(2, timeout_s=120)
        view = await wait_state(r.store, gang, DONE, timeout_s=180)
        assert view.state is TaskState.SUCCEEDED, view  # the node came back: the gang ran

"""GPU models on real Ray (issue 36): the shared cluster's two workers label their logical
GPUs two ways (A100, H100: ``accelerator_type:<model>``, as Ray labels real GPUs). A task
that asks for H100 runs only on the H100 node, its driver and its learners too, and while
that node is busy the next H100 task waits, although the A100 node has every GPU free."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from argus.lifecycle import TaskState
from tests.reactor.harness import event_types, submit_task, task_view, toy_command, unique_id, wait_state
from tests.reactor.test_reactor_ray import DONE, reactor_on

pytestmark = [pytest.mark.ray, pytest.mark.slow]


MARK = "toy_trainer done: "


def _learner_nodes(job_dir: Path) -> list[str]:
    """The nodes the toy trainer's learners ran on (its last line says)."""
    # Found wherever it is in the log, not only at a line's start: Ray's forwarding of the
    # workers' output writes to the same stdout, and a forwarded line's newline may come
    # after the trainer's own text.
    text = (job_dir / "driver.log").read_text()
    at = text.rfind(MARK)
    assert at >= 0, text[-2000:]
    summary, _ = json.JSONDecoder().raw_decode(text, at + len(MARK))
    return list(summary["nodes"])


async def test_a_task_that_names_a_model_runs_only_on_nodes_of_that_model(ray_cluster: Any, tmp_path: Path) -> None:
    async with reactor_on(ray_cluster, tmp_path) as r:
        models = {n.node_id: n.gpu_type for n in await r.reactor.gateway.capacity()}
        assert sorted(models.values()) == ["A100", "H100"], models  # the gateway reads the labels
        h100 = next(nid for nid, m in models.items() if m == "H100")

        async def submit(name: str, steps: int, sleep_s: float) -> str:
            return await submit_task(r.store, unique_id(name), nnodes=1, gpus=4, gpu_types=("H100",),
                                     command=toy_command(r.shared, "alice", nnodes=1, gpus=4, steps=steps,
                                                         sleep_s=sleep_s))

        first = await submit("h100-a", 8, 1.0)
        await wait_state(r.store, first, {TaskState.RUNNING}, timeout_s=120)
        second = await submit("h100-b", 1, 0.0)
        # The A100 node is idle, the H100 node busy: the second waits, and says for what.
        waited = None
        for _ in range(100):
            view = await task_view(r.store, second)
            if view is not None and view.wait_reason:
                waited = view
                break
            await asyncio.sleep(0.1)
        assert waited is not None and waited.state is TaskState.PENDING_RESOURCES, waited
        assert "4 H100 GPUs" in waited.wait_message and "node(s) with H100" in waited.wait_message, waited.wait_message
        running = await task_view(r.store, first)
        assert running is not None and running.state is TaskState.RUNNING
        assert "AttemptStarting" not in await event_types(r.store, second)

        for task_id in (first, second):
            view = await wait_state(r.store, task_id, DONE, timeout_s=180)
            assert view.state is TaskState.SUCCEEDED, (view.error_summary, view.attempts)
            attempt = view.attempts[-1]
            assert attempt.node_ids == (h100,), attempt  # where the ledger admitted it
            assert attempt.driver_node_id == h100, attempt  # the driver, pinned by its model
            job_dir = r.shared / "users" / "alice" / "jobs" / attempt.submission_id
            assert _learner_nodes(job_dir) == [h100]  # the gang, by its placement groups' model
        second_view = await task_view(r.store, second)
        first_view = await task_view(r.store, first)
        assert second_view is not None and first_view is not None
        first_ended = first_view.attempts[-1].ended_at
        second_started = second_view.attempts[-1].submitted_at
        assert first_ended is not None and second_started is not None and second_started >= first_ended - 1.0

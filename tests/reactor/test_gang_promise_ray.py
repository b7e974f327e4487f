"""Issue 34's repro on real Ray, on a cluster like ``argus up --gpus 4`` (one worker with 4
logical GPUs): a 3-GPU task whose trainer takes 20 s before it reserves its gang (as verl
loads its tokenizer, data and model first, while Ray shows every GPU free), then a 4-GPU
task and a 1-GPU task, 5 s apart.

Before the ledger, the 4-GPU task was admitted beside the 3-GPU one (8 GPUs promised on 4)
and failed with verl's ``Total available GPUs 1.0 is less than total desired GPUs 4``.
Sampled every second: the GPUs of the tasks Argus holds (SUBMITTING, SUBMITTED, RUNNING)
never exceed 4, and no attempt ends INSUFFICIENT_RESOURCES.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from argus.lifecycle import TaskState
from tests.reactor.harness import submit_task, task_view, toy_command, unique_id
from tests.reactor.test_reactor_ray import DONE, reactor_on

pytestmark = [pytest.mark.ray, pytest.mark.slow]

HOLDING = {TaskState.SUBMITTING, TaskState.SUBMITTED, TaskState.RUNNING}


async def test_a_gang_whose_placement_lags_is_never_promised_twice(ray_cluster: Any, tmp_path: Any) -> None:
    ray_cluster.kill_worker(1)  # one worker, 4 GPUs: argus up --gpus 4
    try:
        ray_cluster.wait_workers_alive(1, timeout_s=90)
        async with reactor_on(ray_cluster, tmp_path) as r:
            async def submit(name: str, gpus: int, steps: int, sleep_s: float, extra: str = "") -> str:
                return await submit_task(r.store, unique_id(name), nnodes=1, gpus=gpus, command=toy_command(
                    r.shared, "alice", nnodes=1, gpus=gpus, steps=steps, sleep_s=sleep_s, extra=extra))

            tasks = [await submit("three", 3, 5, 1.0, "+trainer.init_sleep_s=20")]
            samples: list[tuple[float, int, list[str]]] = []
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if len(tasks) < 3 and len(samples) in (5, 10):
                    tasks.append(await submit("four" if len(tasks) == 1 else "one", 4 if len(tasks) == 1 else 1, 2, 0.0))
                views = [await task_view(r.store, t) for t in tasks]
                held = [v for v in views if v is not None and v.state in HOLDING]
                samples.append((time.monotonic(), sum(v.demand.total_gpus for v in held),
                                [f"{v.task_id}:{v.state.value}" for v in held]))
                if len(tasks) == 3 and all(v is not None and v.state in DONE for v in views):
                    break
                await asyncio.sleep(1.0)
            worst = max(samples, key=lambda s: s[1])
            assert worst[1] <= 4, f"{worst[1]} GPUs held on a 4-GPU cluster: {worst[2]}"
            views = [await task_view(r.store, t) for t in tasks]
            for v in views:
                assert v is not None and v.state is TaskState.SUCCEEDED, (v.task_id, v.state, v.error_summary)
                kinds = [a.failure_kind for a in v.attempts if a.failure_kind is not None]
                assert not kinds, (v.task_id, kinds)  # no INSUFFICIENT_RESOURCES, nor any other
                assert v.attempts[-1].node_ids, v.attempts  # the ledger's node, recorded
    finally:
        ray_cluster.start_worker(ray_cluster.workers[1])
        ray_cluster.wait_workers_alive(2, timeout_s=120)

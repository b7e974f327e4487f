"""Transient faults, from the words of the code that reports them, through the real
``Reactor`` (its SQLite log, the fake Ray): an NCCL watchdog timeout, a CUDA out-of-memory
and Ray's host out-of-memory kill are each resumed once; the same kind at the same step
again ends the task FAILED with both attempts' evidence; at another step it is resumed
again, up to ``v2.scheduler.transient_retries``.

The texts are the ones PyTorch and Ray print (their sources are cited beside the patterns
in ``argus.reactor.classify``), in the shape a verl run's log has them: verl's
``step:N - ...`` lines, then the traceback Ray wraps around the failing actor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from argus.events import AttemptEnded, FailureKind, RetryScheduled, TaskFailed
from argus.lifecycle import TaskState
from argus.reactor.classify import classify_failure, last_step
from tests.reactor.test_turn_on_fake import World, make_world

K = FailureKind


def _steps(first: int, last: int) -> str:
    return "".join(f"step:{n} - actor/pg_loss:0.0{n} - critic/score/mean:0.{n}\n" for n in range(first, last + 1))


_RAY_ACTOR = ("ray.exceptions.RayTaskError(DistBackendError): ray::WorkerDict.actor_rollout_update_actor() "
              "(pid=81234, ip=10.0.0.1, actor_id=6a2f, repr=<verl.single_controller.ray.base.WorkerDict>)\n")
NCCL = (_RAY_ACTOR + "torch.distributed.DistBackendError: [PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=5521, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600021 milliseconds before timing out.\n"
        "The actor died unexpectedly before finishing this task.\n")
CUDA_OOM = ("ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_compute_log_prob()\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.63 GiB. GPU 0 has a total capacity "
            "of 79.19 GiB of which 3.12 GiB is free. Including non-PyTorch memory, this process has 76.06 GiB "
            "memory in use.\n")
HOST_OOM = ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
            "Memory on the node (IP: 10.0.0.1, ID: 9c1f) where the task (actor ID: 6a2f, name=WorkerDict.__init__, "
            "pid=81234, memory used=61.2GB) was running was 118.45GB / 124.00GB (0.955), which exceeds the memory "
            "usage threshold of 0.95.\n")


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = await make_world(tmp_path, transient_retries=3)
    yield w
    await w.commands.close()
    await w.store.close()


async def _fail(w: World, task_id: str, attempt_no: int, log: str) -> list[object]:
    """Run attempt ``attempt_no`` and fail it with ``log``; the events it ended with."""
    if attempt_no > 1:
        w.clock.advance(10)  # the retry's back-off
    sid = await w.running(task_id, attempt_no)
    w.ray.fail(sid, exit_code=1, logs=log)
    await w.turn()
    return [e for e in await w.events(task_id) if isinstance(e, (AttemptEnded, RetryScheduled, TaskFailed))][-2:]


@pytest.mark.parametrize("kind, text", [(K.NCCL_TIMEOUT, NCCL), (K.CUDA_OOM, CUDA_OOM), (K.HOST_OOM, HOST_OOM)])
async def test_resumed_once_then_failed_when_it_strikes_again_at_the_same_step(world: World, kind: FailureKind,
                                                                               text: str) -> None:
    task_id = await world.submit(gpus=8)
    ended, then = await _fail(world, task_id, 1, _steps(1, 5) + text)
    assert isinstance(ended, AttemptEnded) and ended.failure_kind is kind and ended.step == 5
    assert isinstance(then, RetryScheduled) and then.failure_kind is kind
    # The resume starts again from its checkpoint at step 3, and fails at step 5 again.
    ended, then = await _fail(world, task_id, 2, _steps(4, 5) + text)
    assert isinstance(ended, AttemptEnded) and ended.failure_kind is kind and ended.step == 5
    assert isinstance(then, TaskFailed) and then.failure_kind is kind
    assert f"{kind.value} twice at step 5 (attempts 1 and 2)" in then.error_summary
    assert then.error_summary.count("Attempt 1: ") == 1 and "| attempt 2: " in then.error_summary
    assert (await world.view(task_id)).state is TaskState.FAILED


async def test_at_another_step_it_is_resumed_again_up_to_the_cap(world: World) -> None:
    task_id = await world.submit(gpus=8)
    for attempt_no, last in enumerate((5, 9, 14), start=1):
        _, then = await _fail(world, task_id, attempt_no, _steps(1, last) + NCCL)
        assert isinstance(then, RetryScheduled), attempt_no
    _, then = await _fail(world, task_id, 4, _steps(1, 20) + NCCL)
    assert isinstance(then, TaskFailed)
    assert "retried 3 time(s) already (v2.scheduler.transient_retries)" in then.error_summary


def test_the_texts_are_classified_by_their_root_cause() -> None:
    # A rank out of memory makes the others time out: the OOM is the cause.
    assert classify_failure("FAILED", "", CUDA_OOM + NCCL, 1)[0] is K.CUDA_OOM
    # The actor "died unexpectedly" after the watchdog fired: not a lost cluster.
    kind, evidence = classify_failure("FAILED", "", NCCL, 1)
    assert kind is K.NCCL_TIMEOUT and evidence.startswith("torch.distributed.DistBackendError")
    assert classify_failure("FAILED", HOST_OOM, "", None)[0] is K.HOST_OOM
    assert classify_failure("FAILED", "", "2 worker(s) were killed due to the node running low on memory.", 1)[0] \
        is K.HOST_OOM
    # Without such words, an actor that died is still the cluster's.
    assert classify_failure("FAILED", "", _RAY_ACTOR + "The actor died unexpectedly before finishing this task.",
                            1)[0] is K.CLUSTER_LOST


def test_the_last_step_is_read_from_verls_lines() -> None:
    assert last_step(_steps(1, 12) + NCCL) == 12
    assert last_step("(TaskRunner pid=1) step:7 - a:1\n") == 7
    assert last_step("no steps here; timestep:4 is not one\n") is None

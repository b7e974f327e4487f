"""Preemption through the reactor, on the fake Ray (the real-cluster proof, with the toy
trainer resuming from its checkpoint, is in test_reactor_ray.py).

A preemptible task is stopped for a task that outranks it, the stop is recorded as
``AttemptPreempted`` naming who and why, its attempt ends PREEMPTED and is not counted,
it goes back to its place in line at once, and starts again (a second attempt) when
there is room.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import AsyncIterator

from argus.events import AttemptPreempted, FailureKind, RetryScheduled
from argus.lifecycle import TaskState
from argus.rayjobs import submission_id_for
from argus.service.auth import Principal
from tests.reactor.test_turn_on_fake import ALICE, World, make_world

# An admin let them ask for priority and non-preemptible tasks (argus users set).
BOB = Principal(user_id="bob", is_admin=False, disabled=False, max_priority=1000, may_pin=True)


async def submit(w: World, who: Principal, gpus: int, *, priority: int = 0, preemptible: bool = False) -> str:
    spec = (f"kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: {gpus}\npriority: {priority}\n"
            f"preemptible: {'true' if preemptible else 'false'}\n"
            f"command: python3 -m argus.examples.toy_trainer trainer.nnodes=1 trainer.n_gpus_per_node={gpus}\n")
    return (await w.commands.submit(who, spec)).task_id


@contextlib.asynccontextmanager
async def world(tmp_path: Path, nodes: int, policy: str, min_run_s: float = 15.0) -> AsyncIterator[World]:
    """A reactor on the fake Ray with ``nodes`` nodes of 4 GPUs, under ``policy``; a running
    task may be stopped once it ran ``min_run_s`` (here its trainer's start, unless said)."""
    w = await make_world(tmp_path, nodes=nodes, gpus=4, policy=policy,  # type: ignore[arg-type]
                         preempt_min_run_s=min_run_s)
    try:
        yield w
    finally:
        await w.commands.close()
        await w.store.close()


async def settle(w: World, seconds: float = 20.0) -> None:
    """Past the in-flight window: Ray's counts now include the running jobs."""
    w.clock.advance(seconds)
    await w.turn()


async def test_a_higher_priority_task_preempts_a_preemptible_one_which_requeues_uncounted(tmp_path: Path) -> None:
    async with world(tmp_path, 1, "priority") as w:
        low = await submit(w, ALICE, 4, preemptible=True)
        low_sid = await w.running(low)
        await settle(w)
        high = await submit(w, BOB, 4, priority=10)
        await w.turn()  # decides: stop `low` for `high`
        preempted = [e for e in await w.events(low) if isinstance(e, AttemptPreempted)]
        assert len(preempted) == 1
        p = preempted[0]
        assert (p.by_task_id, p.by_user, p.reason) == (high, "bob", "priority")
        assert high in p.message and "priority 10" in p.message
        assert (await w.view(high)).wait_reason == "preempting"
        await w.turn(2)  # the stop goes out once; Ray reports the job STOPPED
        assert w.ray.calls.count(("stop", low_sid)) == 1
        view = await w.view(low)
        assert view.attempts[0].failure_kind is FailureKind.PREEMPTED
        retry = [e for e in await w.events(low) if isinstance(e, RetryScheduled)]
        assert retry and retry[-1].delay_s == 0  # back in line at once
        assert view.seq < (await w.view(high)).seq  # its place in line is its own
        await w.turn()
        high_sid = submission_id_for(high, 1)
        assert (await w.view(high)).state is TaskState.SUBMITTED  # `high` got the GPUs
        assert (await w.view(low)).state is TaskState.PENDING_RESOURCES
        w.ray.start(high_sid)
        await w.turn()
        w.ray.succeed(high_sid)
        await w.turn(2)
        assert (await w.view(low)).state is TaskState.SUBMITTED  # second attempt, when there is room
        assert len((await w.view(low)).attempts) == 2


async def test_nothing_is_preempted_that_is_not_preemptible_or_not_outranked(tmp_path: Path) -> None:
    async with world(tmp_path, 1, "priority") as w:
        firm = await submit(w, ALICE, 4, priority=0, preemptible=False)
        await w.running(firm)
        await settle(w)
        same = await submit(w, BOB, 4, priority=0)
        high = await submit(w, BOB, 4, priority=10)
        await w.turn(3)
        assert not [e for e in await w.events(firm) if isinstance(e, AttemptPreempted)]
        assert (await w.view(firm)).state is TaskState.RUNNING
        assert (await w.view(high)).wait_reason != "preempting"
        assert (await w.view(same)).state is TaskState.PENDING_RESOURCES


async def test_fairshare_preempts_a_user_beyond_its_share_for_one_within_its_own(tmp_path: Path) -> None:
    async with world(tmp_path, 2, "fairshare") as w:
        mine = [await submit(w, ALICE, 4, preemptible=True) for _ in range(2)]
        await w.turn()  # both admitted: the cluster is idle, alice may borrow it all
        for t in mine:
            w.ray.start(submission_id_for(t, 1))
        await w.turn()
        assert [(await w.view(t)).state for t in mine] == [TaskState.RUNNING] * 2
        await settle(w)
        bob = await submit(w, BOB, 4)
        await w.turn()
        preempted = [e for t in mine for e in await w.events(t) if isinstance(e, AttemptPreempted)]
        assert len(preempted) == 1 and preempted[0].reason == "fair_share" and preempted[0].by_task_id == bob
        await w.turn(3)
        assert (await w.view(bob)).state in (TaskState.SUBMITTED, TaskState.RUNNING)
        await w.turn(2)
        # alice now holds her fair share (4 of 8): nothing more is stopped for anyone
        assert len([e for t in mine for e in await w.events(t) if isinstance(e, AttemptPreempted)]) == 1


async def test_a_task_is_stopped_only_once_it_ran_the_minimum(tmp_path: Path) -> None:
    """``preempt_min_run_s`` (the cost model): a task that started a minute ago is not
    stopped for a higher priority; once it ran the minimum, it is."""
    async with world(tmp_path, 1, "priority", min_run_s=300.0) as w:
        low = await submit(w, ALICE, 4, preemptible=True)
        await w.running(low)
        await settle(w, 60.0)
        await submit(w, BOB, 4, priority=10)
        await w.turn()
        assert not [e for e in await w.events(low) if isinstance(e, AttemptPreempted)]
        await settle(w, 250.0)  # 310 s since it was seen running
        await w.turn()
        assert len([e for e in await w.events(low) if isinstance(e, AttemptPreempted)]) == 1

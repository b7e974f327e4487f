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


async def test_a_task_that_fits_elsewhere_moves_off_the_only_node_of_the_model_another_needs(tmp_path: Path) -> None:
    """Moving to make room (v2.scheduler.move_after_s): ``anywhere`` (any GPU model) holds
    the one H100 node while the A100 node is idle; ``h100`` needs an H100 and would wait
    hours. The reactor stops ``anywhere`` (reason ``moves``, whatever the priorities), starts
    ``h100`` on the H100 node and ``anywhere`` again on the A100 one."""
    from argus.config import ArgusConfig, SchedulerConfig, ServiceConfig
    from argus.rayjobs.fake import FakeRay, worker_nodes
    from argus.reactor import Reactor
    from argus.service.auth import AuthCache
    from argus.service.commands import Commands
    from argus.events import AttemptStarting
    from projections import open_store
    from tests.reactor.test_turn_on_fake import Clock, World

    clock = Clock()
    (tmp_path / "shared").mkdir()
    sched = SchedulerConfig(policy="priority", preemption=True, move_after_s=600.0, default_runtime_s=36_000.0)
    config = ArgusConfig(shared_root=str(tmp_path / "shared"), entrypoint_num_cpus=1.0,
                         v2=ServiceConfig(scheduler=sched))
    store = await open_store(tmp_path / "argus.db", synchronous="OFF")
    commands = Commands(store, config, AuthCache(store), group_commit=False)
    ray = FakeRay([*worker_nodes(1, gpus=4, cpus=64, prefix="a", gpu_type="A100"),
                   *worker_nodes(1, gpus=4, cpus=64, prefix="h", gpu_type="H100")], clock=clock)
    w = World(store, commands, ray, Reactor(store, ray, config, reactor_id="fake", clock=clock), clock, config)
    try:
        await w.turn()
        clock.advance(sched.node_settle_s)
        # bob's: a run of alice's would be the estimate of ``anywhere`` (a short one)
        first = await submit(w, BOB, 4)  # takes the A100 node (its id sorts first)
        first_sid = await w.running(first)
        anywhere = await submit(w, ALICE, 4, preemptible=True)  # then the H100 one
        await w.running(anywhere)
        await settle(w)
        ray.succeed(first_sid)
        await w.turn(2)  # the A100 node is free again
        spec = ("kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: 4\ngpu_type: H100\n"
                "command: python3 -m argus.examples.toy_trainer trainer.nnodes=1 trainer.n_gpus_per_node=4\n")
        h100 = (await commands.submit(BOB, spec)).task_id
        await w.turn()
        preempted = [e for e in await w.events(anywhere) if isinstance(e, AttemptPreempted)]
        assert [(p.by_task_id, p.reason) for p in preempted] == [(h100, "moves")]
        assert "fits on other nodes now" in preempted[0].message
        await w.turn(3)  # the stop goes out, Ray reports it STOPPED, both are admitted
        starts = {tid: [e for e in await w.events(tid) if isinstance(e, AttemptStarting)] for tid in (h100, anywhere)}
        assert starts[h100][-1].node_ids == ["h-01"]
        assert len(starts[anywhere]) == 2 and starts[anywhere][-1].node_ids == ["a-01"]
    finally:
        await commands.close()
        await store.close()

"""The reactor's turn against ``FakeRay``: admission, outcomes, retries, cancel and the
exactly-once resolution of dangling intents, in milliseconds (no Ray, no sleeping).

Real pieces everywhere else: a SQLite EventStore in tmp_path with every projection, the
``Commands`` service to submit and cancel, the real ``Reactor`` driven one ``turn()`` at a
time on an injected clock. The integration tests against real Ray (test_reactor_ray.py,
test_crash_recovery.py) cover the same paths slowly and stay as they are.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import AsyncIterator

import pytest

from argus.config import ArgusConfig, SchedulerConfig, ServiceConfig
from argus.events import (
    AttemptEnded,
    AttemptStarting,
    AttemptSubmitted,
    ClusterUnreachable,
    EventBase,
    EventMeta,
    FailureKind,
    RetryScheduled,
    TaskCanceled,
    TaskDeferred,
    TaskFailed,
    TaskSubmitted,
    TaskSucceeded,
    cluster_stream,
    task_stream,
)
from argus.lifecycle import AttemptStatus, TaskState
from argus.rayjobs import RayPort, build_submission, submission_id_for
from argus.rayjobs.fake import FakeRay, worker_nodes
from argus.reactor import Reactor
from argus.service.auth import AuthCache, Principal
from argus.service.commands import Commands
from argus.store import EventStore
from projections import TaskView, load_task, open_store

# An admin let her ask for priority and non-preemptible tasks (argus users set).
ALICE = Principal(user_id="alice", is_admin=False, disabled=False, max_priority=1000, may_pin=True)
K = FailureKind


class Clock:
    """The reactor's and the fake Ray's one clock, moved by hand."""

    def __init__(self) -> None:
        # Near the wall clock: a task's created_at is the API's time.time(), and the
        # give-up rule (max_pending_s) measures from it.
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class World:
    def __init__(self, store: EventStore, commands: Commands, ray: FakeRay, reactor: Reactor,
                 clock: Clock, config: ArgusConfig) -> None:
        self.store, self.commands, self.ray, self.reactor = store, commands, ray, reactor
        self.clock, self.config = clock, config

    async def submit(self, *, nnodes: int = 1, gpus: int = 2) -> str:
        spec = (f"kind: advanced\nworkload: ppo\nnnodes: {nnodes}\nn_gpus_per_node: {gpus}\n"
                f"command: python3 -m argus.examples.toy_trainer trainer.nnodes={nnodes} "
                f"trainer.n_gpus_per_node={gpus}\n")
        return (await self.commands.submit(ALICE, spec)).task_id

    async def turn(self, times: int = 1) -> None:
        for _ in range(times):
            await self.reactor.turn()

    async def view(self, task_id: str) -> TaskView:
        view = await self.store.read_snapshot(lambda db: load_task(db, task_id))
        assert view is not None
        return view

    async def events(self, task_id: str) -> list[EventBase]:
        return [r.event for r in await self.store.read_stream(task_stream(task_id))]

    async def running(self, task_id: str, attempt_no: int = 1) -> str:
        """Take the task through admission to RUNNING; returns its submission id."""
        sid = submission_id_for(task_id, attempt_no)
        await self.turn()
        self.ray.start(sid)
        await self.turn()
        assert (await self.view(task_id)).state is TaskState.RUNNING
        return sid


async def make_world(tmp_path: Path, nodes: int = 1, gpus: float = 8.0, **scheduler: float) -> World:
    clock = Clock()
    (tmp_path / "shared").mkdir()
    sched = SchedulerConfig(**{"retry_interval_s": 10.0, "retry_backoff": 2.0,  # type: ignore[arg-type]
                               "retry_max_interval_s": 600.0, **scheduler})
    config = ArgusConfig(shared_root=str(tmp_path / "shared"), entrypoint_num_cpus=1.0,
                         v2=ServiceConfig(scheduler=sched))
    store = await open_store(tmp_path / "argus.db", synchronous="OFF")
    commands = Commands(store, config, AuthCache(store), group_commit=False)
    ray = FakeRay(worker_nodes(nodes, gpus=gpus, cpus=64), clock=clock)
    reactor = Reactor(store, ray, config, reactor_id="fake", clock=clock)
    # The nodes have been seen, and have settled (node_settle_s), before the test begins.
    await reactor.turn()
    clock.advance(sched.node_settle_s)
    return World(store, commands, ray, reactor, clock, config)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = await make_world(tmp_path)
    yield w
    await w.commands.close()
    await w.store.close()


@pytest.fixture
async def two_nodes(tmp_path: Path) -> AsyncIterator[World]:
    w = await make_world(tmp_path, nodes=2, gpus=4)
    yield w
    await w.commands.close()
    await w.store.close()


def test_the_fake_and_the_real_gateway_are_ray_ports() -> None:
    """(Names only at run time; mypy checks the signatures: argus/rayjobs/port.py, fake.py.)"""
    from argus.rayjobs import AsyncRayGateway, RayGateway

    assert isinstance(FakeRay(), RayPort)
    real = AsyncRayGateway(RayGateway("http://127.0.0.1:1"))  # connects to nothing until called
    try:
        assert isinstance(real, RayPort)
    finally:
        real.close()


# ---------------------------------------------------------------------------------------- admission
async def test_a_gang_that_fits_is_submitted_one_that_does_not_waits_with_its_reason(world: World) -> None:
    a = await world.submit(gpus=6)
    b = await world.submit(gpus=4)
    await world.turn()

    assert [type(e) for e in await world.events(a)] == [TaskSubmitted, AttemptStarting, AttemptSubmitted]
    assert world.ray.job(submission_id_for(a, 1)).status is AttemptStatus.PENDING
    deferred = (await world.events(b))[-1]
    assert isinstance(deferred, TaskDeferred) and deferred.reason == "insufficient_gpus"
    assert "only 2 GPUs free" in deferred.message
    # Too few GPUs in total: how they lie per node explains nothing, and is not recorded.
    assert deferred.free_gpus_per_node == []
    assert (await world.view(b)).state is TaskState.PENDING_RESOURCES
    assert world.ray.submit_count(submission_id_for(b, 1)) == 0

    await world.turn(3)  # the same reason is recorded once, not once per turn
    assert sum(isinstance(e, TaskDeferred) for e in await world.events(b)) == 1

    world.ray.start(submission_id_for(a, 1))
    world.ray.succeed(submission_id_for(a, 1))
    await world.turn()  # a ends; the ledger holds its GPUs until Ray is observed after that
    assert (await world.view(a)).state is TaskState.SUCCEEDED
    assert (await world.view(b)).state is TaskState.PENDING_RESOURCES
    await world.turn()  # observed since: b goes
    assert (await world.view(b)).state is TaskState.SUBMITTED


async def test_a_gang_that_fits_in_total_but_not_per_node_waits(two_nodes: World) -> None:
    w = two_nodes
    a = await w.submit(gpus=2)
    await w.running(a)
    # a holds node-01 in the ledger (and, once placed, in Ray's count)
    w.clock.advance(16)
    b = await w.submit(nnodes=2, gpus=3)
    await w.turn()
    assert [n.free_gpus for n in await w.ray.capacity()] == [2.0, 4.0]  # a holds node-01
    deferred = (await w.events(b))[-1]
    assert isinstance(deferred, TaskDeferred) and deferred.reason == "no_capacity_per_node"
    assert deferred.free_gpus_per_node == [2.0, 4.0]


async def test_nothing_is_admitted_while_ray_is_unreachable(world: World) -> None:
    world.ray.make_unavailable("connection refused")
    t = await world.submit()
    await world.turn()
    deferred = (await world.events(t))[-1]
    assert isinstance(deferred, TaskDeferred) and deferred.reason == "capacity_unknown"
    cluster = [r.event for r in await world.store.read_stream(cluster_stream)]
    assert isinstance(cluster[-1], ClusterUnreachable) and "connection refused" in cluster[-1].error
    world.ray.make_available()
    await world.turn()  # seen again, but not yet settled since the outage
    assert (await world.view(t)).state is TaskState.PENDING_RESOURCES
    world.clock.advance(world.config.v2.scheduler.node_settle_s)
    await world.turn()
    assert (await world.view(t)).state is TaskState.SUBMITTED


# ---------------------------------------------------------------------------------------- outcomes
async def test_running_then_succeeded(world: World) -> None:
    t = await world.submit()
    sid = await world.running(t)
    view = await world.view(t)
    assert view.attempts[0].ray_status == AttemptStatus.RUNNING
    assert view.attempts[0].started_at == world.ray.job(sid).submitted_at  # Ray's start_time
    world.clock.advance(30)
    world.ray.succeed(sid)
    await world.turn()
    events = await world.events(t)
    assert isinstance(events[-1], TaskSucceeded)
    ended = events[-2]
    assert isinstance(ended, AttemptEnded) and ended.ray_status == "SUCCEEDED" and ended.failure_kind is None
    assert ended.ended_at == world.clock.now


@pytest.mark.parametrize("how,kind,retried,evidence", [
    ({"exit_code": 1, "logs": "Traceback:\nModuleNotFoundError: No module named 'my_reward'\n"},
     K.USER_ERROR, False, "No module named 'my_reward'"),
    ({"exit_code": 137}, K.RUNTIME_ERROR, False, "exit code 137"),
    ({"message": "runtime_env setup failed: pip install bogus-pkg", "error_type": "RUNTIME_ENV_SETUP_FAILURE"},
     K.USER_ERROR, False, "RUNTIME_ENV_SETUP_FAILURE"),
    # error_type decides before the text: the message alone would not say "resources".
    ({"message": "Job supervisor actor could not start.", "error_type": "JOB_SUPERVISOR_ACTOR_START_TIMEOUT"},
     K.INSUFFICIENT_RESOURCES, True, "JOB_SUPERVISOR_ACTOR_START_TIMEOUT"),
    ({"message": "Job supervisor actor died: node gone", "error_type": "JOB_SUPERVISOR_ACTOR_DIED"},
     K.CLUSTER_LOST, True, "Job supervisor actor died"),
])
async def test_failures_are_classified(world: World, how: dict[str, object], kind: FailureKind,
                                       retried: bool, evidence: str) -> None:
    t = await world.submit()
    sid = await world.running(t)
    world.ray.fail(sid, **how)  # type: ignore[arg-type]
    await world.turn()
    events = await world.events(t)
    ended = next(e for e in events if isinstance(e, AttemptEnded))
    assert ended.ray_status == "FAILED" and ended.failure_kind is kind, ended
    assert evidence in ended.evidence
    assert ended.exit_code == how.get("exit_code")
    final = events[-1]
    if retried:
        assert isinstance(final, RetryScheduled) and final.failure_kind is kind
        assert (await world.view(t)).state is TaskState.PENDING_RESOURCES
    else:
        assert isinstance(final, TaskFailed) and final.failure_kind is kind
        assert (await world.view(t)).state is TaskState.FAILED


async def test_a_job_ray_forgot_is_lost_and_retried(world: World) -> None:
    t = await world.submit()
    sid = await world.running(t)
    world.ray.forget(sid)
    await world.turn()
    ended, retry = (await world.events(t))[-2:]
    assert isinstance(ended, AttemptEnded) and ended.ray_status == "LOST"
    assert ended.failure_kind is K.CLUSTER_LOST
    assert isinstance(retry, RetryScheduled) and retry.delay_s == 10.0


# ---------------------------------------------------------------------------------------- retries
async def test_resource_failures_back_off_exponentially(world: World) -> None:
    t = await world.submit(gpus=4)
    delays = []
    for attempt_no in (1, 2, 3):
        sid = await world.running(t, attempt_no)
        world.ray.fail_for_resources(sid)
        await world.turn()
        retry = (await world.events(t))[-1]
        assert isinstance(retry, RetryScheduled) and retry.failure_kind is K.INSUFFICIENT_RESOURCES
        assert retry.next_run_at == world.clock.now + retry.delay_s
        delays.append(retry.delay_s)
        world.clock.advance(retry.delay_s - 1)
        await world.turn()  # not yet: the retry waits without a new TaskDeferred
        assert (await world.view(t)).state is TaskState.PENDING_RESOURCES
        assert isinstance((await world.events(t))[-1], RetryScheduled)
        world.clock.advance(1)
    assert delays == [10.0, 20.0, 40.0]
    await world.turn()
    assert (await world.view(t)).attempts[-1].submission_id == submission_id_for(t, 4)


async def test_cluster_loss_retries_without_backoff_and_user_errors_not_at_all(world: World) -> None:
    lost = await world.submit()
    for attempt_no in (1, 2):
        world.ray.forget(await world.running(lost, attempt_no))
        await world.turn()
        retry = (await world.events(lost))[-1]
        assert isinstance(retry, RetryScheduled) and retry.delay_s == 10.0  # no growth
        world.clock.advance(10)
    user = await world.submit()
    sid = await world.running(user)
    world.ray.fail(sid, exit_code=2, logs="usage: train.py [-h]\n")
    await world.turn(3)
    assert (await world.view(user)).state is TaskState.FAILED
    assert world.ray.submit_count(submission_id_for(user, 2)) == 0


# ---------------------------------------------------------------------------------------- cancel
async def test_cancel_of_a_running_task_stops_its_job_once(world: World) -> None:
    t = await world.submit()
    sid = await world.running(t)
    assert await world.commands.cancel(ALICE, t) == "CANCELING"
    await world.turn()  # sees RUNNING, sends the stop
    assert world.ray.job(sid).status is AttemptStatus.STOPPED
    await world.turn(2)  # sees STOPPED: the attempt and the task end
    assert world.ray.calls.count(("stop", sid)) == 1
    events = await world.events(t)
    ended, canceled = events[-2:]
    assert isinstance(ended, AttemptEnded) and ended.ray_status == "STOPPED"
    assert ended.failure_kind is K.CANCELED
    assert isinstance(canceled, TaskCanceled) and canceled.by == "alice" and canceled.ray_status == "STOPPED"
    assert (await world.view(t)).state is TaskState.CANCELED
    assert (await world.ray.capacity())[0].free_gpus == 8.0  # the job's GPUs are free again


# ---------------------------------------------------------------------------------------- dangling intents
async def _leave_an_intent(w: World, task_id: str) -> AttemptStarting:
    """Append AttemptStarting exactly as the reactor does, then 'crash' before Ray is
    called: a dangling intent in the log, built from the task's own TaskSubmitted."""
    records = await w.store.read_stream(task_stream(task_id))
    submitted = records[0].event
    assert isinstance(submitted, TaskSubmitted)
    payload = build_submission(
        task_id=task_id, attempt_no=1, user=submitted.user, command=submitted.command,
        config=w.config, spec_raw=submitted.spec_raw, spec=submitted.spec,
        command_raw=submitted.command_raw, python=w.config.v2.taskspec.python,
    )
    intent = AttemptStarting(task_id=task_id, attempt_no=1, submission_id=payload.submission_id,
                             payload=payload, decided_at=w.clock.now)
    await w.store.append(task_stream(task_id), records[-1].version, [intent], owner=submitted.user,
                         meta=EventMeta(actor="reactor:crashed"))
    return intent


async def _restart(w: World) -> None:
    """A new reactor over the same log and the same Ray (the crashed one is gone)."""
    w.reactor = Reactor(w.store, w.ray, w.config, reactor_id="after-crash", clock=w.clock)


async def test_an_intent_ray_knows_is_recorded_as_submitted(world: World) -> None:
    t = await world.submit()
    intent = await _leave_an_intent(world, t)
    await world.ray.submit(intent.payload)  # the crashed reactor's call went through
    await _restart(world)
    await world.turn(3)
    submitted = [e for e in await world.events(t) if isinstance(e, AttemptSubmitted)]
    assert len(submitted) == 1 and submitted[0].recovered
    assert world.ray.submit_count(intent.submission_id) == 1  # not again
    assert (await world.view(t)).state is TaskState.SUBMITTED


async def test_an_intent_ray_does_not_know_is_submitted_once_with_its_payload(world: World) -> None:
    t = await world.submit()
    intent = await _leave_an_intent(world, t)
    await _restart(world)
    await world.turn(3)
    assert world.ray.submit_count(intent.submission_id) == 1
    assert world.ray.job(intent.submission_id).payload == intent.payload  # byte for byte
    submitted = [e for e in await world.events(t) if isinstance(e, AttemptSubmitted)]
    assert len(submitted) == 1 and not submitted[0].recovered
    await _restart(world)  # and once more: the intent is settled, nothing is resubmitted
    await world.turn(2)
    assert world.ray.submit_count(intent.submission_id) == 1
    assert sum(isinstance(e, AttemptStarting) for e in await world.events(t)) == 1


async def test_a_lost_submit_reply_is_settled_by_asking_ray(world: World) -> None:
    t = await world.submit()
    world.ray.lose_next_submit_reply()
    await world.turn()  # Ray took it; the reactor heard nothing: the intent stays open
    sid = submission_id_for(t, 1)
    assert (await world.view(t)).attempts[0].ray_status == AttemptStatus.STARTING
    await world.turn()  # Ray answers again: ask about the id, do not submit it again
    assert world.ray.submit_count(sid) == 1
    submitted = [e for e in await world.events(t) if isinstance(e, AttemptSubmitted)]
    assert len(submitted) == 1 and submitted[0].recovered


async def test_a_refused_submission_fails_the_task_without_retry(world: World) -> None:
    t = await world.submit()
    world.ray.refuse_next_submit("invalid runtime_env: bad pip spec")
    await world.turn()
    ended, failed = (await world.events(t))[-2:]
    assert isinstance(ended, AttemptEnded) and ended.ray_status == "NOT_SUBMITTED"
    assert ended.failure_kind is K.RUNTIME_ERROR and "bad pip spec" in ended.evidence
    assert isinstance(failed, TaskFailed)


async def test_a_turn_records_at_most_deferrals_per_turn_reasons_front_of_the_queue_first(tmp_path: Path) -> None:
    w = await make_world(tmp_path, deferrals_per_turn=3)
    try:
        first = await w.submit(gpus=8)  # fills the node
        behind = [await w.submit(gpus=8) for _ in range(7)]
        recorded: list[list[str]] = []
        for _ in range(4):
            await w.turn()
            recorded.append([t for t in behind if (await w.view(t)).wait_reason is not None])
        assert (await w.view(first)).attempts  # admitted in the first turn
        assert recorded == [behind[:3], behind[:6], behind, behind]
        for t in behind:
            deferrals = [e for e in await w.events(t) if isinstance(e, TaskDeferred)]
            assert len(deferrals) == 1  # recorded once, not again while the reason holds
    finally:
        await w.commands.close()
        await w.store.close()


async def test_a_turn_with_nothing_new_does_not_plan_again(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    import argus.reactor.turn as reactor_module

    plans: list[float] = []
    real = reactor_module.plan_turn

    def counting(*args: object, **kwargs: object) -> object:
        plans.append(world.clock.now)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reactor_module, "plan_turn", counting)
    running = await world.submit(gpus=8)
    waiting = await world.submit(gpus=8)
    await world.running(running)
    world.clock.advance(16)
    await world.turn(2)
    before = len(plans)
    for _ in range(5):
        world.clock.advance(1)
        await world.turn()
    assert len(plans) == before  # same log, same capacity, no instant passed: same plan
    world.ray.succeed(submission_id_for(running, 1))
    world.clock.advance(1)
    await world.turn(2)
    assert len(plans) > before
    assert (await world.view(waiting)).attempts  # planned again, and admitted


async def test_a_gang_that_stops_fitting_when_nodes_leave_waits_aside_until_they_return(two_nodes: World) -> None:
    w = two_nodes  # two nodes x 4 GPUs
    gang = await w.submit(nnodes=2, gpus=4)  # accepted: the cluster can hold it
    w.ray.set_nodes(worker_nodes(1, gpus=4, cpus=64))  # a node leaves before it starts
    small = await w.submit(gpus=2)
    await w.turn()
    view = await w.view(gang)
    assert view.state is TaskState.PENDING_RESOURCES and view.wait_reason == "never_fits"
    assert "could not hold it even if idle" in view.wait_message
    assert (await w.view(small)).attempts  # behind it in line, and admitted: nothing blocked it
    w.ray.set_nodes(worker_nodes(2, gpus=4, cpus=64))  # the node returns
    w.ray.start(submission_id_for(small, 1))
    w.ray.succeed(submission_id_for(small, 1))
    await w.turn(2)
    assert not (await w.view(gang)).attempts  # the node is back, but has not settled yet
    w.clock.advance(w.config.v2.scheduler.node_settle_s)
    await w.turn()
    assert (await w.view(gang)).attempts  # considered again, and admitted


async def test_an_attempt_past_its_time_limit_is_stopped_and_fails_with_time_limit(world: World) -> None:
    spec = ("kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: 2\ntime_limit: '1:30'\n"
            "command: python3 -m argus.examples.toy_trainer trainer.nnodes=1 trainer.n_gpus_per_node=2\n")
    t = (await world.commands.submit(ALICE, spec)).task_id
    assert (await world.view(t)).time_limit_s == 90
    sid = await world.running(t)
    world.clock.advance(89)
    await world.turn()
    assert world.ray.calls.count(("stop", sid)) == 0  # not yet
    world.clock.advance(1)
    await world.turn()  # at the limit: recorded, and the job stopped
    reached = [e for e in await world.events(t) if type(e).__name__ == "AttemptTimeLimitReached"]
    assert len(reached) == 1 and reached[0].time_limit_s == 90  # type: ignore[attr-defined]
    assert (await world.view(t)).state is TaskState.RUNNING  # until Ray says the job ended
    await world.turn(2)
    assert world.ray.calls.count(("stop", sid)) == 1  # once
    view = await world.view(t)
    assert view.state is TaskState.FAILED and view.failure_kind is K.TIME_LIMIT
    assert "time limit of 90 s" in view.error_summary
    assert len(view.attempts) == 1  # not retried: it would run as long again


async def test_a_bad_time_limit_is_refused_with_what_to_write(world: World) -> None:
    from argus.service.commands import CommandError

    head = await world.store.head_position()
    for bad in ("90", "5s", "soon", "1:75:00"):
        spec = (f"kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: 2\ntime_limit: '{bad}'\n"
                "command: python3 -m argus.examples.toy_trainer trainer.nnodes=1 trainer.n_gpus_per_node=2\n")
        with pytest.raises(CommandError) as refused:
            await world.commands.submit(ALICE, spec)
        assert "time_limit" in str(refused.value) and ("90m" in str(refused.value) or "59" in str(refused.value))
    assert await world.store.head_position() == head  # nothing written


async def test_reserve_backfill_reserves_for_the_head_and_backfills_only_what_cannot_delay_it(tmp_path: Path) -> None:
    w = await make_world(tmp_path, nodes=3, gpus=8, policy="reserve-backfill")  # type: ignore[arg-type]
    try:
        async def submit(nnodes: int, gpus: int, limit: str) -> str:
            spec = (f"kind: advanced\nworkload: ppo\nnnodes: {nnodes}\nn_gpus_per_node: {gpus}\ntime_limit: {limit}\n"
                    f"command: python3 -m argus.examples.toy_trainer trainer.nnodes={nnodes} "
                    f"trainer.n_gpus_per_node={gpus}\n")
            return (await w.commands.submit(ALICE, spec)).task_id

        a = await submit(1, 8, "10m")
        b = await submit(1, 8, "1h")
        await w.turn()
        for t in (a, b):
            w.ray.start(submission_id_for(t, 1))
        started = w.clock.now
        await w.turn()  # seen running
        w.clock.advance(16)  # and settled: Ray's counts have them
        await w.turn()
        head = await submit(2, 8, "1h")  # one node free: reserved with a's node from when a ends
        short = await submit(1, 4, "5m")  # fits now, and ends before that: backfilled
        long = await submit(1, 4, "2h")  # fits now too, but would still run on a reserved node
        await w.turn()
        view = await w.view(head)
        assert view.state is TaskState.PENDING_RESOURCES
        assert view.expected_start == pytest.approx(started + 600)  # a's start + its time limit
        assert "reserved nodes" in view.wait_message
        starting = [e for e in await w.events(short) if isinstance(e, AttemptStarting)]
        assert starting and "backfilled: its time limit ends it by" in starting[0].note
        assert (await w.view(long)).wait_reason == "behind_reservation"
        from argus.replay.explain import explain

        said = "\n".join(explain(tmp_path / "argus.db", short).lines)
        assert f"started ahead of its place in line: backfilled: its time limit ends it by" in said and head in said
        said = "\n".join(explain(tmp_path / "argus.db", head).lines)
        assert "reserved nodes" in said
    finally:
        await w.commands.close()
        await w.store.close()


async def test_a_job_whose_placement_groups_stay_pending_is_stopped_and_retried(tmp_path: Path) -> None:
    w = await make_world(tmp_path, placement_timeout_s=60.0, placement_check_s=5.0)
    try:
        t = await w.submit(gpus=4)
        sid = await w.running(t)
        w.ray.hang_on_placement(sid, ["global_pool:0"])  # like verl >= 0.6: waits for ever
        for _ in range(11):
            w.clock.advance(5)
            await w.turn()
        assert w.ray.calls.count(("stop", sid)) == 0  # pending 50 s: not yet
        w.clock.advance(15)
        await w.turn()  # pending 65 s: recorded and stopped
        assert w.ray.calls.count(("stop", sid)) == 1
        await w.turn()
        view = await w.view(t)
        ended = view.attempts[0]
        assert ended.failure_kind is K.INSUFFICIENT_RESOURCES
        assert "global_pool:0 stayed PENDING" in ended.evidence and "placement_timeout_s=60" in ended.evidence
        assert view.state is TaskState.PENDING_RESOURCES and view.next_run_at is not None  # retried
    finally:
        await w.commands.close()
        await w.store.close()

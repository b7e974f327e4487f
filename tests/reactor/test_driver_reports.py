"""The driver reports, the reactor decides (``argus.rayjobs.reports``, ``argus.reactor.reports``).

The driver's side: its tracker reads verl's lines out of the command's output as it comes
(lines split across chunks included) and writes its reports where a confined job cannot.
The reactor's side, through the real ``Reactor`` on its SQLite log and the fake Ray: the
exit report ends an attempt while Ray still says RUNNING; an attempt being stopped ends
by Ray's word only; progress becomes ``AttemptProgressed`` events, at most one per
``progress_record_s``; reports that are not a report of that attempt are not read.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from argus.events import (
    AttemptEnded, AttemptProgressed, CheckpointObserved, FailureKind, TaskCanceled, TaskFailed, TaskIncomplete,
    TaskSucceeded, task_stream,
)
from argus.lifecycle import TaskState
from argus.rayjobs.reports import (
    ExitReport, ProgressTracker, attempts_dir, exits_dir, read_exit, read_progress, write_exit,
)
from argus.service.auth import Principal
from tests.reactor.test_turn_on_fake import World, make_world

ALICE = Principal(user_id="alice", is_admin=False, disabled=False, max_priority=1000, may_pin=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_tracker_reads_verls_lines_as_they_come(tmp_path: Path) -> None:
    clock = Clock()
    tracker = ProgressTracker(str(tmp_path), "t--a01", clock)
    tracker.feed(b"(TaskRunner pid=7) Total training steps: 40\nstep:1 - actor/pg_loss:0.5\nst")
    clock.now += 3
    tracker.feed(b"ep:2 - actor/pg_loss:0.4 - timing_s/step:3.0\n")  # a line split across chunks
    clock.now += 5
    tracker.feed(b"step:3 - x:1\nnot a step: timestep:9\n")
    tracker.tick()
    report = read_progress(str(tmp_path), "t--a01")
    assert report is not None
    assert (report.step, report.first_step, report.total_steps, report.step_at) == (3, 1, 40, 1008.0)
    assert report.step_time_s == 4.0  # the median of 3 s and 5 s
    tracker.exited(1)
    assert read_exit(str(tmp_path), "t--a01") == ExitReport(submission_id="t--a01", exit_code=1, exited_at=1008.0,
                                                             step=3, first_step=1, total_steps=40)


def test_a_report_is_read_only_as_the_attempts_own_and_never_through_a_link(tmp_path: Path) -> None:
    write_exit(str(tmp_path), ExitReport(submission_id="other--a01", exit_code=0, exited_at=1.0))
    os.replace(exits_dir(str(tmp_path)) / "other--a01.json", exits_dir(str(tmp_path)) / "t--a01.json")
    assert read_exit(str(tmp_path), "t--a01") is None  # renamed: not that attempt's report
    secret = tmp_path / "elsewhere.json"
    secret.write_text('{"submission_id": "t--a02", "exit_code": 0, "exited_at": 1.0}')
    (exits_dir(str(tmp_path)) / "t--a02.json").symlink_to(secret)
    assert read_exit(str(tmp_path), "t--a02") is None
    (attempts_dir(str(tmp_path)) / "progress").mkdir(parents=True)
    (attempts_dir(str(tmp_path)) / "progress" / "t--a03.json").write_bytes(b"{" + b" " * 10_000 + b"}")
    assert read_progress(str(tmp_path), "t--a03") is None  # over the bound


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = await make_world(tmp_path, progress_check_s=1.0, progress_record_s=10.0)
    yield w
    await w.commands.close()
    await w.store.close()


def _exit(w: World, sid: str, code: int) -> None:
    write_exit(w.config.shared_root, ExitReport(submission_id=sid, exit_code=code, exited_at=w.clock.now))


async def test_the_exit_report_ends_the_attempt_while_ray_still_says_running(world: World) -> None:
    task_id = await world.submit(gpus=8)
    sid = await world.running(task_id)
    _exit(world, sid, 0)
    await world.turn()
    ended = [e for e in await world.events(task_id) if isinstance(e, AttemptEnded)]
    assert ended[-1].reported_by == "driver" and ended[-1].ray_status == "SUCCEEDED" and ended[-1].exit_code == 0
    assert isinstance((await world.events(task_id))[-1], TaskSucceeded)
    assert world.ray.jobs[sid].status.value == "RUNNING"  # Ray has not said so yet
    await world.turn()
    assert not (exits_dir(world.config.shared_root) / f"{sid}.json").exists()  # read, then removed


async def test_a_failed_exit_is_classified_from_the_log(world: World) -> None:
    task_id = await world.submit(gpus=8)
    sid = await world.running(task_id)
    world.ray.jobs[sid].logs = "step:4 - a:1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
    _exit(world, sid, 1)
    await world.turn()
    ended = next(e for e in await world.events(task_id) if isinstance(e, AttemptEnded))
    assert (ended.failure_kind, ended.step, ended.reported_by) == (FailureKind.CUDA_OOM, 4, "driver")


async def test_an_attempt_being_stopped_ends_by_rays_word(world: World) -> None:
    task_id = await world.submit(gpus=8)
    sid = await world.running(task_id)
    world.ray.stop_grace_s = 30.0  # Ray's SIGTERM, then its kill 30 s later
    await world.commands.cancel(ALICE, task_id)
    await world.turn()  # the stop goes out
    _exit(world, sid, 143)  # the command's exit is the stop's doing
    await world.turn()
    assert (await world.view(task_id)).state is TaskState.CANCELING
    world.clock.advance(60)  # the stop's grace
    await world.turn(2)
    events = await world.events(task_id)
    assert isinstance(events[-1], TaskCanceled)
    assert next(e for e in events if isinstance(e, AttemptEnded)).reported_by == ""


async def test_progress_becomes_events_at_most_one_per_bound(world: World) -> None:
    task_id = await world.submit(gpus=8)
    sid = await world.running(task_id)
    clock = Clock()
    clock.now = world.clock.now
    tracker = ProgressTracker(world.config.shared_root, sid, clock)
    tracker.feed(b"Total training steps: 100\n")
    for step in range(1, 31):  # a step a second, reported at once each time
        clock.now = world.clock.now = world.clock.now + 1
        tracker.feed(f"step:{step} - loss:0.1\n".encode())
        tracker.tick()
        await world.turn()
    progressed = [e for e in await world.events(task_id) if isinstance(e, AttemptProgressed)]
    assert [e.step for e in progressed] == [1, 11, 21]  # 30 s of steps: 3 events
    assert progressed[-1].total_steps == 100 and progressed[-1].step_time_s == 1.0
    view = await world.view(task_id)
    assert (view.attempts[-1].step, view.attempts[-1].total_steps) == (21, 100)
    assert not [e for e in await world.events(task_id) if isinstance(e, (TaskFailed, AttemptEnded))]


# ---------------------------------------------------------------------------------------
# Success that means it: INCOMPLETE


async def _ends_with(w: World, task_id: str, sid: str, report: ExitReport) -> object:
    """The task's last event once its driver reported ``report``; then Ray says the job
    ended too (its GPUs come back for the next task)."""
    write_exit(w.config.shared_root, report)
    await w.turn()
    last = (await w.events(task_id))[-1]
    w.ray.succeed(sid)
    await w.turn()
    return last


async def test_exit_0_before_the_last_step_is_incomplete(world: World) -> None:
    task_id = await world.submit(gpus=8)
    sid = await world.running(task_id)
    last = await _ends_with(world, task_id, sid, ExitReport(submission_id=sid, exit_code=0, exited_at=world.clock.now,
                                                             step=3, first_step=1, total_steps=5))
    assert isinstance(last, TaskIncomplete) and (last.step, last.total_steps) == (3, 5)
    assert "exited 0 at step 3 of 5" in last.reason
    view = await world.view(task_id)
    assert view.state is TaskState.INCOMPLETE and "step 3 of 5" in view.error_summary


async def test_exit_0_at_the_last_step_succeeds_and_without_a_report_too(world: World) -> None:
    task_id = await world.submit(gpus=8)
    sid = await world.running(task_id)
    last = await _ends_with(world, task_id, sid, ExitReport(submission_id=sid, exit_code=0, exited_at=world.clock.now,
                                                             step=5, first_step=1, total_steps=5))
    assert isinstance(last, TaskSucceeded)
    other = await world.submit(gpus=8)  # no report at all (an older driver): Ray's word, today's rule
    sid = await world.running(other)
    world.ray.succeed(sid)
    await world.turn()
    assert isinstance((await world.events(other))[-1], TaskSucceeded)


async def test_a_resume_that_trains_no_step_is_incomplete_unless_it_was_done(world: World) -> None:
    for saved, total, expected in ((3, None, TaskIncomplete), (5, 5, TaskSucceeded)):
        task_id = await world.submit(gpus=8)
        sid = await world.running(task_id)
        await world.store.append(task_stream(task_id), None, [CheckpointObserved(
            task_id=task_id, attempt_no=1, submission_id=sid, step=saved, folder="checkpoints",
            saved_at=world.clock.now, observed_at=world.clock.now)], owner="alice")
        world.ray.fail(sid, exit_code=1, logs=f"step:{saved} - a:1\nCUDA out of memory. Tried to allocate 1 GiB\n")
        await world.turn()
        world.clock.advance(10)
        sid = await world.running(task_id, 2)
        last = await _ends_with(world, task_id, sid, ExitReport(
            submission_id=sid, exit_code=0, exited_at=world.clock.now, total_steps=total))  # printed no step
        assert isinstance(last, expected), (saved, total, last)
        if isinstance(last, TaskIncomplete):
            assert "resumed attempt exited 0 without training a step" in last.reason and last.step == saved


async def test_where_ray_has_no_such_job_rays_word_decides(world: World) -> None:
    """A head that came back as another cluster: the command died with the cluster (its
    driver reported exit 1), and the attempt is CLUSTER_LOST, retried, as before."""
    task_id = await world.submit(gpus=8)
    sid = await world.running(task_id)
    _exit(world, sid, 1)
    world.ray.forget(sid)
    await world.turn()
    ended = next(e for e in await world.events(task_id) if isinstance(e, AttemptEnded))
    assert ended.failure_kind is FailureKind.CLUSTER_LOST and ended.reported_by == ""


async def test_the_kernel_wakes_the_reactor_on_an_exit_report(tmp_path: Path) -> None:
    """With a poll of 30 s, a running reactor still ends the attempt within seconds of its
    driver's exit report: inotify on the exits folder wakes it (argus.reactor.reports)."""
    import asyncio
    import time

    from argus.config import ArgusConfig, SchedulerConfig, ServiceConfig
    from argus.rayjobs import submission_id_for
    from argus.rayjobs.fake import FakeRay, worker_nodes
    from argus.reactor import Reactor
    from argus.service.auth import AuthCache
    from argus.service.commands import Commands
    from projections import load_task, open_store

    (tmp_path / "shared").mkdir()
    sched = SchedulerConfig(poll_interval_s=30.0, node_settle_s=0.0, lease_ttl_s=300.0)
    config = ArgusConfig(shared_root=str(tmp_path / "shared"), entrypoint_num_cpus=1.0,
                         v2=ServiceConfig(scheduler=sched))
    store = await open_store(tmp_path / "argus.db", synchronous="OFF")
    commands = Commands(store, config, AuthCache(store), group_commit=False)
    ray = FakeRay(worker_nodes(1, gpus=8, cpus=64))
    reactor = Reactor(store, ray, config, reactor_id="woken")
    runner = asyncio.create_task(reactor.run())

    async def state_of(task_id: str) -> TaskState | None:
        view = await store.read_snapshot(lambda db: load_task(db, task_id))
        return view.state if view is not None else None

    async def until(task_id: str, state: TaskState, within_s: float) -> float:
        began = time.monotonic()
        while await state_of(task_id) is not state:
            assert time.monotonic() - began < within_s, (task_id, await state_of(task_id))
            await asyncio.sleep(0.05)
        return time.monotonic() - began

    try:
        task_id = (await commands.submit(ALICE, "kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: 8\n"
                                                "command: python3 -m argus.examples.toy_trainer\n")).task_id
        sid = submission_id_for(task_id, 1)
        await until(task_id, TaskState.SUBMITTED, 60.0)  # the submit's append woke it
        ray.start(sid)  # Ray says RUNNING; the reactor would look again in 30 s
        write_exit(config.shared_root, ExitReport(submission_id=sid, exit_code=0, exited_at=time.time()))
        await until(task_id, TaskState.SUCCEEDED, 20.0)  # not 30 s: woken by the report
    finally:
        await reactor.stop()
        await asyncio.wait_for(runner, 60)
        await commands.close()
        await store.close()

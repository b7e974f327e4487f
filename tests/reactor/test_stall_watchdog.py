"""The stall watchdog (``argus.reactor.stall``), through the real ``Reactor`` on its SQLite
log and the fake Ray, with the progress its driver reports: a run that hangs after step 3
is found stalled once its bound passed, its stacks are dumped, it is stopped and resumed
(STALLED is transient); the
bound comes from the spec, or from the run's own step times with a floor; a command that
never prints a step is never judged."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest

from argus.config import StallConfig
from argus.events import AttemptEnded, AttemptStacksCaptured, AttemptStalled, RetryScheduled
from argus.lifecycle import TaskState
from argus.rayjobs.reports import ProgressTracker
from argus.nodepool.keeper import NodeKeeper
from argus.nodepool.stacks import answer_for_node, capture_stacks, merge_summaries, read_stacks, read_summary, stacks_requested
from argus.reactor.stall import stall_bound
from argus.service.auth import Principal
from tests.reactor.test_turn_on_fake import World, make_world

ALICE = Principal(user_id="alice", is_admin=False, disabled=False, max_priority=1000, may_pin=True)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = await make_world(tmp_path, progress_check_s=1.0, progress_record_s=10.0, preempt_grace_s=30.0)
    w.ray.stop_grace_s = 30.0
    yield w
    await w.commands.close()
    await w.store.close()


async def _submit(w: World, extra: str = "") -> str:
    spec = ("kind: advanced\nworkload: ppo\nnnodes: 1\nn_gpus_per_node: 8\n" + extra +
            "command: python3 -m argus.examples.toy_trainer trainer.nnodes=1 trainer.n_gpus_per_node=8\n")
    return (await w.commands.submit(ALICE, spec)).task_id


async def _steps(w: World, sid: str, steps: range, every_s: float, total: int = 10) -> None:
    """The driver sees ``steps`` printed ``every_s`` apart, and reports them; a turn each."""
    tracker = ProgressTracker(w.config.shared_root, sid, w.clock)
    tracker.feed(f"Total training steps: {total}\n".encode())
    for step in steps:
        w.clock.advance(every_s)
        tracker.feed(f"step:{step} - actor/pg_loss:0.1\n".encode())
        tracker.tick()
        await w.turn()


async def test_a_run_that_hangs_after_step_3_is_stopped_and_resumed(world: World) -> None:
    task_id = await _submit(world)
    sid = await world.running(task_id)
    await _steps(world, sid, range(1, 4), every_s=60.0)
    for _ in range(14):  # it hangs: 14 minutes without a step is within the 15-minute floor
        world.clock.advance(60)
        await world.turn()
    assert not [e for e in await world.events(task_id) if isinstance(e, AttemptStalled)]
    world.clock.advance(61)
    await world.turn()
    stall = next(e for e in await world.events(task_id) if isinstance(e, AttemptStalled))
    assert (stall.step, stall.bound_s) == (3, 900.0) and "floor_s" in stall.why
    # Not stopped yet: its driver is asked for its stacks first, and answers (here a real
    # process of the attempt, hung in a known function, dumped by py-spy).
    assert stacks_requested(world.config.shared_root, sid) and sid not in world.ray._stopping
    await world.turn()
    assert sid not in world.ray._stopping
    with _hung_process(sid):
        summary = capture_stacks(world.config.shared_root, sid)
    assert [p.top_frame.split(" ")[0] for p in summary.processes] == ["hang_in_here"], summary
    await world.turn()
    taken = next(e for e in await world.events(task_id) if isinstance(e, AttemptStacksCaptured))
    assert taken.processes[0].top_frame.startswith("hang_in_here") and taken.dump_bytes > 0
    assert "hang_in_here" in (read_stacks(world.config.shared_root, sid) or "")
    assert world.ray.jobs[sid].status.value == "RUNNING" and sid in world.ray._stopping  # stopped, with Ray's grace
    world.clock.advance(31)
    await world.turn(2)
    ended = next(e for e in await world.events(task_id) if isinstance(e, AttemptEnded))
    assert ended.failure_kind is not None and ended.failure_kind.value == "STALLED" and ended.step == 3
    assert isinstance((await world.events(task_id))[-1], RetryScheduled)
    world.clock.advance(10)
    second = await world.running(task_id, 2)
    assert second != sid and (await world.view(task_id)).state is TaskState.RUNNING


@contextlib.contextmanager
def _hung_process(sid: str) -> Iterator[None]:
    """A Python process of attempt ``sid`` (its environment says so), asleep in hang_in_here."""
    code = "import time\ndef hang_in_here():\n    print('up', flush=True)\n    time.sleep(600)\nhang_in_here()\n"
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "ARGUS_SUBMISSION_ID": sid},
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        yield
    finally:
        proc.kill()
        proc.wait()


async def test_a_stall_without_stacks_is_stopped_after_the_wait(world: World) -> None:
    task_id = await _submit(world, "stall_timeout: 5m\n")
    sid = await world.running(task_id)
    await _steps(world, sid, range(1, 3), every_s=60.0)
    world.clock.advance(301)
    await world.turn()
    assert any(isinstance(e, AttemptStalled) for e in await world.events(task_id))
    world.clock.advance(29)
    await world.turn()
    assert sid not in world.ray._stopping  # its driver may still answer
    world.clock.advance(2)
    await world.turn()
    taken = next(e for e in await world.events(task_id) if isinstance(e, AttemptStacksCaptured))
    assert not taken.processes and "stacks_wait_s" in taken.note
    assert sid in world.ray._stopping


async def test_the_bound_comes_from_the_spec_or_the_runs_own_steps(world: World) -> None:
    fast = await _submit(world, "stall_timeout: 5m\n")
    sid = await world.running(fast)
    await _steps(world, sid, range(1, 4), every_s=200.0)  # slow steps; the spec says 5 minutes
    view = await world.view(fast)
    assert stall_bound(view, StallConfig())[:1] == (300.0,)
    world.clock.advance(301)
    await world.turn()
    assert any(isinstance(e, AttemptStalled) for e in await world.events(fast))
    # Without a spec's bound: 10 x its median step time, at least the floor.
    slow = view.attempts[-1]
    import msgspec
    derived = msgspec.structs.replace(view, stall_timeout_s=None, attempts=(msgspec.structs.replace(
        slow, step_time_s=200.0, stalled_at=None, stop_reason=""),))
    assert stall_bound(derived, StallConfig())[0] == 2000.0
    assert stall_bound(derived, StallConfig(default_s=120.0))[0] == 120.0
    assert stall_bound(derived, StallConfig(enabled=False)) is None


async def test_a_command_that_prints_no_step_is_never_judged_and_loading_has_its_own_bound(world: World) -> None:
    silent = await _submit(world)
    sid = await world.running(silent)
    world.clock.advance(86_400)  # a day without a word: not known to report steps
    await world.turn()
    assert not any(isinstance(e, AttemptStalled) for e in await world.events(silent))
    assert (await world.view(silent)).state is TaskState.RUNNING
    world.ray.succeed(sid)
    await world.turn(2)
    loading = await _submit(world)
    sid = await world.running(loading)
    tracker = ProgressTracker(world.config.shared_root, sid, world.clock)
    tracker.feed(b"Total training steps: 10\n")  # announced, then loads its models
    tracker.tick()
    world.clock.advance(5)
    await world.turn()
    world.clock.advance(3500)
    await world.turn()
    assert not any(isinstance(e, AttemptStalled) for e in await world.events(loading))
    world.clock.advance(100)
    await world.turn()
    stall = next(e for e in await world.events(loading) if isinstance(e, AttemptStalled))
    assert stall.step is None and stall.bound_s == 3600.0


async def test_a_multi_node_runs_stacks_come_from_its_driver_and_the_keepers_of_its_other_nodes(tmp_path: Path) -> None:
    """A two-node run stalls: its driver dumps its own host, the keeper of its other node
    dumps what runs there, and the stop waits for both (the request stays until the
    attempt ends, then is withdrawn). A keeper on the driver's own host only says so."""
    w = await make_world(tmp_path, nodes=2, progress_check_s=1.0, progress_record_s=10.0, preempt_grace_s=30.0)
    w.ray.stop_grace_s = 30.0
    try:
        spec = ("kind: advanced\nworkload: ppo\nnnodes: 2\nn_gpus_per_node: 8\nstall_timeout: 5m\n"
                "command: python3 -m argus.examples.toy_trainer trainer.nnodes=2 trainer.n_gpus_per_node=8\n")
        task_id = (await w.commands.submit(ALICE, spec)).task_id
        sid = await w.running(task_id)
        attempt = (await w.view(task_id)).attempts[-1]
        other = next(n for n in attempt.node_ids if n != attempt.driver_node_id)
        # The other node has a keeper (the driver's has none here: nobody to wait for).
        keeper = NodeKeeper(w.config.shared_root, other, clock=w.clock, nvidia_smi="")
        await _steps(w, sid, range(1, 3), every_s=60.0)
        w.clock.advance(295)
        await w.turn()
        assert keeper.check() is not None  # the reactor reads it at its next turn
        w.clock.advance(6)
        await w.turn()
        assert stacks_requested(w.config.shared_root, sid)
        with _hung_process(sid):
            capture_stacks(w.config.shared_root, sid)  # the driver, on its host
            await w.turn()
            assert sid not in w.ray._stopping  # the other node's keeper has not answered
            keeper.check()
            for _ in range(200):  # it answers on a thread
                if read_summary(w.config.shared_root, sid, other) is not None:
                    break
                await asyncio.sleep(0.1)
        await w.turn()
        taken = next(e for e in await w.events(task_id) if isinstance(e, AttemptStacksCaptured))
        assert [p.top_frame.split(" ")[0] for p in taken.processes] == ["hang_in_here"] * 2, taken
        assert sid in w.ray._stopping and read_stacks(w.config.shared_root, sid).count("hang_in_here") >= 2
        assert stacks_requested(w.config.shared_root, sid)  # until the attempt ends
        w.clock.advance(31)
        await w.turn(2)
        assert not stacks_requested(w.config.shared_root, sid)
    finally:
        await w.commands.close()
        await w.store.close()


def test_a_keeper_on_the_drivers_host_leaves_the_dump_to_the_driver(tmp_path: Path) -> None:
    code = "import time; print('up', flush=True); time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-c", code, "-m", "argus.driver"],
                            env={**os.environ, "ARGUS_SUBMISSION_ID": "t--a1"}, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        summary = answer_for_node(str(tmp_path), "t--a1", "n1")
    finally:
        proc.kill()
        proc.wait()
    assert (summary.node_id, summary.processes, summary.dump_bytes) == ("n1", [], 0)
    assert read_summary(str(tmp_path), "t--a1", "n1") == summary and read_stacks(str(tmp_path), "t--a1") is None
    merged = merge_summaries(None, {"n1": summary}, {"n1", "n2"})
    assert merged is None  # nothing until the driver answered
    driver = msgspec.structs.replace(summary, node_id="", note="no process of this attempt was found on this node")
    merged = merge_summaries(driver, {"n1": summary}, {"n1", "n2"})
    assert merged is not None and merged.missing == ["n2"]

"""``argus sim --from-db`` replays what the reactor really did: a log made by the real
reactor (SQLite store with its projections, ``Commands`` to submit, ``FakeRay`` for the
cluster, one clock) gives, through ``load_history`` and ``simulate`` under the same policy,
the same start time for every task.

The clock moves in 20 s steps (the reactor's ledger holds an ended attempt's resources
until it next observes Ray: hence two turns before the jobs start), jobs run as soon as they are admitted and are seen running at once, and tasks take
whole multiples of a step, so both see the same instants. Shapes are
whole nodes or half nodes, so FakeRay's first-fit placement and the policy's best fit
leave the same free nodes.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from argus.lifecycle import TaskState
from argus.rayjobs import submission_id_for
from argus.service.auth import Principal
from argus.sim.engine import simulate
from argus.sim.settings import SimSettings
from argus.sim.history import load_history
from tests.reactor.test_turn_on_fake import make_world

STEP = 20.0

# (arrival step, user, nnodes, GPUs per node, priority, run time in steps)
WORKLOAD = [
    (0, "alice", 1, 8, 0, 3), (0, "bob", 2, 8, 0, 2), (0, "alice", 1, 4, 5, 1), (0, "carol", 1, 4, 0, 2),
    (1, "bob", 1, 4, 9, 1), (1, "alice", 2, 8, 1, 1), (2, "carol", 1, 8, 0, 1), (2, "bob", 1, 4, 0, 4),
    (3, "alice", 1, 4, 3, 2), (4, "carol", 2, 8, 0, 1), (4, "bob", 1, 8, 7, 2), (5, "alice", 1, 4, 0, 1),
]


@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill", "priority"])
async def test_from_db_gives_the_starts_the_reactor_made(tmp_path: Path, policy: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    w = await make_world(tmp_path, nodes=3, gpus=8, policy=policy, max_running_tasks=100)  # type: ignore[arg-type]
    # The API stamps arrivals with its own clock: here, the reactor's.
    import time as real_time

    monkeypatch.setattr("argus.service.commands.time", types.SimpleNamespace(time=w.clock, perf_counter=real_time.perf_counter,
                                                                             monotonic=real_time.monotonic))
    start = w.clock.now
    runtime: dict[str, float] = {}
    started: dict[str, float] = {}
    try:
        for step in range(40):
            now = w.clock.now
            for task_id, at in list(started.items()):  # jobs due end now
                if task_id in runtime and now - at >= runtime[task_id] and w.ray.job(
                        submission_id_for(task_id, 1)).status.value == "RUNNING":
                    w.ray.succeed(submission_id_for(task_id, 1))
            for arrival, user, nnodes, gpus, priority, steps in WORKLOAD:
                if arrival == step:
                    spec = (f"kind: advanced\nworkload: ppo\nnnodes: {nnodes}\nn_gpus_per_node: {gpus}\n"
                            f"priority: {priority}\ncommand: python3 -m argus.examples.toy_trainer "
                            f"trainer.nnodes={nnodes} trainer.n_gpus_per_node={gpus}\n")
                    who = Principal(user_id=user, is_admin=False, disabled=False, max_priority=1_000_000, may_pin=True)
                    runtime[(await w.commands.submit(who, spec)).task_id] = steps * STEP
            await w.turn(2)  # the ends are recorded, then observed given back: admissions follow
            for task_id in runtime:
                view = await w.view(task_id)
                if task_id not in started and view.attempts:
                    w.ray.start(submission_id_for(task_id, 1))
                    started[task_id] = now
            await w.turn()  # sees them running now: settled (in Ray's counts) a step later
            w.clock.advance(STEP)
        await w.turn()
        for task_id in runtime:
            assert (await w.view(task_id)).state is TaskState.SUCCEEDED
    finally:
        await w.commands.close()
        await w.store.close()

    trace = load_history(tmp_path / "argus.db")
    assert sorted(t.task_id for t in trace.tasks) == sorted(runtime)
    assert {t.task_id: t.runtime for t in trace.tasks} == runtime
    simulated = {o.task_id: o.start for o in simulate(trace, policy, SimSettings(max_running_tasks=100)).outcomes}
    assert {t: (s - start) / STEP for t, s in simulated.items()} == {
        t: (s - start) / STEP for t, s in started.items()}

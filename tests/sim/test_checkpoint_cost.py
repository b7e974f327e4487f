"""What a stop costs in the simulator (``checkpoint_every_s``): a stopped task runs again
what it did since its last checkpoint, and the policy sees the checkpoints, so it stops
the task with the least unsaved work (``RunningTask.unsaved_since``)."""

from __future__ import annotations

from argus.config import FairShareConfig
from argus.events import Demand
from argus.sim import SimSettings, simulate
from argus.sim.engine import SimResult
from argus.sim.trace import SimNode, SimTask, Trace

NODE = [SimNode(node_id="n1", gpus=8.0, cpus=64.0)]


def _task(task_id: str, user: str, at: float, runtime: float, gpus: int) -> SimTask:
    return SimTask(task_id=task_id, user=user, arrival=at, runtime=runtime, preemptible=True,
                   demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=1.0))


def _run(tasks: list[SimTask], every: float) -> SimResult:
    # fair share with preemption: bob, holding nothing, is within his fair share (4 of 8
    # GPUs) and alice, holding all 8, beyond hers, so one of her tasks is stopped for him
    return simulate(Trace(tasks=tasks, nodes=NODE), "fairshare",
                    SimSettings(preemption=True, preempt_grace_s=30.0, fairshare=FairShareConfig(max_wait_s=0),
                                checkpoint_every_s=every, move_after_s=0))


def test_a_stopped_task_runs_again_what_it_did_since_its_last_checkpoint() -> None:
    tasks = [_task("a", "alice", 0.0, 10_000.0, 8), _task("b", "bob", 4_000.0, 1_000.0, 4)]
    saved_at_stop = _run(tasks, 0.0)
    every_half_hour = _run(tasks, 1_800.0)
    for result in (saved_at_stop, every_half_hour):
        a = next(o for o in result.outcomes if o.task_id == "a")
        assert a.preempted == 1 and a.end is not None
    a0 = next(o for o in saved_at_stop.outcomes if o.task_id == "a")
    a1 = next(o for o in every_half_hour.outcomes if o.task_id == "a")
    assert a0.lost_s == 0.0
    # stopped at 4,000 s + the 30 s grace, it had saved at 1,800 and 3,600 s of its work
    assert a1.lost_s == 4_030.0 - 3_600.0
    assert a1.end == a0.end + a1.lost_s  # it ran the lost part again, and nothing else changed


def test_the_policy_stops_the_task_with_the_least_unsaved_work() -> None:
    # a1 started first but saved at 3,600 s; a2 started at 1,000 s and last saved at 2,800 s
    tasks = [_task("a1", "alice", 0.0, 20_000.0, 4), _task("a2", "alice", 1_000.0, 20_000.0, 4),
             _task("b", "bob", 3_700.0, 1_000.0, 4)]
    stopped = {every: {o.task_id for o in _run(tasks, every).outcomes if o.preempted}
               for every in (0.0, 1_800.0)}
    # without checkpoints seen, the least work lost is the latest start's; with them, a1's
    # 100 s since its last save against a2's 900 s
    assert stopped == {0.0: {"a2"}, 1_800.0: {"a1"}}

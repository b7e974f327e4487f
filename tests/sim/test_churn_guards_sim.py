"""The churn guards through the simulator (the reactor's own inputs and plan): a per-user
minimum run keeps a task from being stopped until it has run that long, and a delay
before eviction holds the stop until the waiting task has waited it out."""

from __future__ import annotations

from argus.config import ChurnGuard, FairShareConfig
from argus.events import Demand
from argus.sim import SimSettings, simulate
from argus.sim.engine import SimResult
from argus.sim.trace import SimNode, SimTask, Trace

NODE = [SimNode(node_id="n1", gpus=8.0, cpus=64.0)]
# alice holds the node from 0 s; bob arrives at 100 s, within his fair share: one of
# alice's tasks is stopped for him, once the guards allow
TASKS = [SimTask(task_id="a", user="alice", arrival=0.0, runtime=10_000.0, preemptible=True,
                 demand=Demand(nnodes=1, n_gpus_per_node=8, cpus_per_node=1.0)),
         SimTask(task_id="b", user="bob", arrival=100.0, runtime=500.0,
                 demand=Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=1.0))]


def _run(**settings: object) -> SimResult:
    return simulate(Trace(tasks=TASKS, nodes=NODE), "fairshare", SimSettings(
        preemption=True, preempt_grace_s=30.0, fairshare=FairShareConfig(max_wait_s=0), move_after_s=0,
        **settings))  # type: ignore[arg-type]


def _start(result: SimResult, task_id: str) -> float:
    found = next(o for o in result.outcomes if o.task_id == task_id)
    assert found.start is not None
    return found.start


def test_a_users_minimum_run_holds_the_stop_until_it_has_run_that_long() -> None:
    plain = _run()
    assert _start(plain, "b") <= 100.0 + 30.0 + 1.0  # stopped at once, back after the grace
    guarded = _run(user_guards={"alice": ChurnGuard(preempt_min_run_s=1_800.0)})
    # from when it was seen running: the stop's grace and the simulator's turns after it
    assert 1_800.0 + 30.0 <= _start(guarded, "b") <= 1_800.0 + 30.0 + 120.0
    other = _run(user_guards={"carol": ChurnGuard(preempt_min_run_s=1_800.0)})  # not alice's
    assert _start(other, "b") == _start(plain, "b")


def test_a_delay_before_eviction_holds_the_stop_until_the_task_waited_it() -> None:
    delayed = _run(evict_after_s=600.0)
    assert 700.0 + 30.0 <= _start(delayed, "b") <= 700.0 + 30.0 + 120.0
    assert next(o for o in delayed.outcomes if o.task_id == "a").preempted == 1

"""Tasks that may not be preempted keep off the rare nodes, through the real ``Reactor``
(its SQLite log, projections and inputs) as through the simulator: the same decisions, and
the rare node goes only to a task that may be moved off it or that needs it."""

from __future__ import annotations

from pathlib import Path

from argus.events import Demand
from argus.sim.engine import Simulation
from argus.sim.settings import SimSettings, sim_config
from argus.sim.trace import SimNode, SimTask, Trace
from tests.sim.test_sim_core_vs_reactor import through_the_reactor

# 19 nodes of 8 GPUs and 64 CPUs, and one of 128 CPUs: the only home of a task with more
NODES = [SimNode(node_id=f"s{i:02d}", gpus=8.0, cpus=64.0) for i in range(19)] + [
    SimNode(node_id="big", gpus=8.0, cpus=128.0)]


def _task(task_id: str, at: float, runtime: float, gpus: int, cpus: float, *, preemptible: bool,
          priority: int = 0) -> SimTask:
    return SimTask(task_id=task_id, user="alice" if preemptible else "bob", arrival=at, runtime=runtime,
                   demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=cpus), preemptible=preemptible,
                   priority=priority)


TASKS = ([_task(f"pinned-{k:02d}", float(k), 1_000.0 + 50 * k, 8, 8.0, preemptible=False) for k in range(20)]
         + [_task("movable", 30.0, 5_000.0, 1, 4.0, preemptible=True),
            _task("needs-big", 100.0, 500.0, 8, 120.0, preemptible=False, priority=10)])


async def test_the_rare_node_goes_to_movable_or_needing_tasks_in_the_reactor_too(tmp_path: Path) -> None:
    trace = Trace(tasks=TASKS, nodes=NODES)
    sched = sim_config("priority", SimSettings(preemption=True, preempt_grace_s=30.0))
    simulated = await Simulation(trace, sched).run("priority")
    _, log = await through_the_reactor(trace, sched, "priority", tmp_path)
    assert simulated.decision_log == log
    on_big = [(task_id, kind) for _, task_id, kind, nodes in log if "big" in nodes or kind == "preempted"]
    # the 20th pinned task waited for a small node rather than take the big one; the
    # movable task took it, and was stopped for the task that needs it
    assert on_big[:3] == [("movable", "admitted"), ("movable", "preempted"), ("needs-big", "admitted")]
    assert {task_id for task_id, _ in on_big} == {"movable", "needs-big"}  # (movable came back later)
    pinned_20 = next(nodes for _, task_id, kind, nodes in log if task_id == "pinned-19" and kind == "admitted")
    assert pinned_20 != ("big",)

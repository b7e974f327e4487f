"""A task that may not be preempted keeps off the rare nodes it does not need
(``Pool.keeps_off``), under a policy that preempts: once it runs, nothing can move it, and
on the openb trace one such task on the only 128-CPU node kept the tasks that needed that
node waiting 284 h."""

from __future__ import annotations

from argus.events import Demand, NodeCapacity
from argus.scheduler import Admit, Capacity, Defer, PolicyConfig, QueuedTask, Reason, decide
from argus.scheduler.placement import rare_nodes

NOW = 10_000.0
FAIR = PolicyConfig(policy="fairshare", preemption=True, max_running_tasks=100)


def _cluster(big_free: float = 8.0, small_free: float = 0.0, small: int = 19) -> Capacity:
    """``small`` nodes of 8 GPUs and 64 CPUs (``small_free`` GPUs free on each), and one
    of 8 GPUs and 128 CPUs (``big_free`` free): the only home of a gang member with more
    than 64 CPUs."""
    nodes = [NodeCapacity(node_id=f"s{i:02d}", ip="", total_gpus=8, free_gpus=small_free, total_cpus=64,
                          free_cpus=64 if small_free else 0) for i in range(small)]
    nodes.append(NodeCapacity(node_id="big", ip="", total_gpus=8, free_gpus=big_free, total_cpus=128,
                              free_cpus=128))
    return Capacity(nodes=tuple(nodes))


def _task(task_id: str, *, gpus: int = 1, cpus: float = 4.0, preemptible: bool) -> QueuedTask:
    return QueuedTask(task_id=task_id, demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=cpus), seq=1,
                      user="alice", preemptible=preemptible)


def _decision(task: QueuedTask, capacity: Capacity, config: PolicyConfig = FAIR) -> Admit | Defer:
    (found,) = [d for d in decide([task], [], capacity, NOW, config) if d.task_id == task.task_id]
    assert isinstance(found, (Admit, Defer))
    return found


def test_a_task_that_may_not_be_preempted_waits_rather_than_take_a_rare_node() -> None:
    pinned = _decision(_task("p", preemptible=False), _cluster())
    assert isinstance(pinned, Defer) and pinned.reason == Reason.KEEPS_OFF_RARE
    assert "big" in pinned.message and "may not be preempted" in pinned.message


def test_a_preemptible_task_may_take_it_and_a_pinned_one_elsewhere() -> None:
    movable = _decision(_task("m", preemptible=True), _cluster())
    assert isinstance(movable, Admit) and movable.node_ids == ("big",)
    elsewhere = _decision(_task("p", preemptible=False), _cluster(small_free=1.0))
    assert isinstance(elsewhere, Admit) and elsewhere.node_ids[0].startswith("s")


def test_a_task_that_needs_the_rare_node_takes_it() -> None:
    needs_it = _decision(_task("n", gpus=8, cpus=120.0, preemptible=False), _cluster())
    assert isinstance(needs_it, Admit) and needs_it.node_ids == ("big",)


def test_only_where_tasks_are_preempted_and_nodes_are_many() -> None:
    # without preemption every task is as immovable as any other: none keeps off
    for config in (PolicyConfig(policy="fairshare", preemption=False, max_running_tasks=100),
                   PolicyConfig(policy="reserve-backfill", reserve=True, preemption=True, max_running_tasks=100)):
        assert isinstance(_decision(_task("p", preemptible=False), _cluster(), config), Admit)
    # on a small cluster keeping its largest node for larger work would cost too much
    assert isinstance(_decision(_task("p", preemptible=False), _cluster(small=5)), Admit)


def test_which_nodes_are_rare() -> None:
    small, big = (8.0, 64.0), (8.0, 128.0)
    assert rare_nodes((small,) * 19 + (big,), ("",) * 20) == frozenset({19})
    assert rare_nodes((small,) * 18 + (big,) * 2, ("",) * 20) == frozenset()  # two in 20: above 5 %
    assert rare_nodes((big,) * 20, ("",) * 20) == frozenset()  # all alike
    assert rare_nodes((small,) * 5 + (big,), ("",) * 6) == frozenset()  # too few nodes
    # a node of another GPU model is compared with its own model's nodes only
    assert rare_nodes((small,) * 19 + (small,), ("A",) * 19 + ("B",)) == frozenset({19})

"""Moving to make room (argus.scheduler.preempt, ``RoomPlanner._moves``): a task that would
wait long for the one node that can hold it gets a preemptible task there stopped, when
that task fits on another node now and more nodes can hold it; never otherwise."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.events import Demand, NodeCapacity
from argus.scheduler import Capacity, Decision, PolicyConfig, Preempt, QueuedTask, Reason, RunningTask, decide
from argus.scheduler.model import Admit, Defer

NOW = 100_000.0
HOUR = 3600.0


def _node(nid: str, cpus: float, free_gpus: float, free_cpus: float) -> NodeCapacity:
    return NodeCapacity(node_id=nid, ip="", total_gpus=8, free_gpus=free_gpus, total_cpus=cpus, free_cpus=free_cpus)


def _waiting(cpus: float = 120.0, priority: int = 0) -> QueuedTask:
    """An 8-GPU task that only the 128-CPU node holds."""
    return QueuedTask(task_id="wide", user="bob", priority=priority, seq=2,
                      demand=Demand(nnodes=1, n_gpus_per_node=8, cpus_per_node=cpus))


def _blocker(*, preemptible: bool = True, ends_in: float = 50 * HOUR, cpus: float = 64.0) -> RunningTask:
    """An 8-GPU task on the big node that fits any node (started two hours ago)."""
    return RunningTask(task_id="narrow", user="alice", demand=Demand(nnodes=1, n_gpus_per_node=8, cpus_per_node=cpus),
                       node_ids=("big",), preemptible=preemptible, started_at=NOW - 2 * HOUR,
                       expected_end=NOW + ends_in)


def _cluster(small_free: bool = True) -> Capacity:
    """The big node (128 CPUs) held by the blocker, and a 64-CPU node, idle or full."""
    return Capacity(nodes=(_node("big", 128, 0, 64), _node("small", 64, 8 if small_free else 0, 64 if small_free else 0)))


def _config(policy: str = "priority", move_after_s: float = HOUR) -> PolicyConfig:
    return PolicyConfig(policy=policy, preemption=True, move_after_s=move_after_s, max_running_tasks=100,
                        reserve=True, default_runtime_s=10 * HOUR)


def _stops(decisions: list[Decision]) -> list[Preempt]:
    return [d for d in decisions if isinstance(d, Preempt)]


def test_a_task_that_fits_elsewhere_is_moved_off_the_only_node_that_holds_the_waiting_one() -> None:
    for policy in ("priority", "fairshare", "reserve-backfill"):
        decisions = decide([_waiting()], [_blocker()], _cluster(), NOW, _config(policy))
        if policy == "reserve-backfill":  # no preemption in this policy at all
            assert not _stops(decisions)
            continue
        assert [(p.task_id, p.reason) for p in _stops(decisions)] == [("narrow", "moves")], policy
        defer = next(d for d in decisions if isinstance(d, Defer) and d.task_id == "wide")
        assert defer.reason == Reason.PREEMPTING
        assert "fewer nodes can hold that task" in _stops(decisions)[0].message


def test_no_move_when_it_would_not_pay() -> None:
    cases = {
        "not preemptible": ([_blocker(preemptible=False)], _cluster(), _config()),
        "nowhere else to go now": ([_blocker()], _cluster(small_free=False), _config()),
        "the node frees itself soon": ([_blocker(ends_in=0.5 * HOUR)], _cluster(), _config()),
        "moving is off": ([_blocker()], _cluster(), _config(move_after_s=0)),
    }
    for name, (running, capacity, config) in cases.items():
        assert not _stops(decide([_waiting()], running, capacity, NOW, config)), name


def test_no_move_for_a_task_that_fits_no_fewer_nodes_than_the_mover() -> None:
    """The mover (8 GPUs, 64 CPUs: nodes a, b, c) could go to the idle c, and the waiting
    task (4 GPUs, 100 CPUs: nodes a, b, d) fits only a once it does. But as many nodes hold
    the one as the other: a is no more the waiting task's node than the mover's, and the
    mover stays."""
    capacity = Capacity(nodes=(
        NodeCapacity(node_id="a", ip="", total_gpus=8, free_gpus=0, total_cpus=128, free_cpus=64),
        NodeCapacity(node_id="b", ip="", total_gpus=8, free_gpus=0, total_cpus=128, free_cpus=0),
        NodeCapacity(node_id="c", ip="", total_gpus=8, free_gpus=8, total_cpus=64, free_cpus=64),
        NodeCapacity(node_id="d", ip="", total_gpus=4, free_gpus=0, total_cpus=128, free_cpus=0)))
    waiting = QueuedTask(task_id="w", user="bob", seq=2, demand=Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=100))
    mover = msgspec.structs.replace(_blocker(), node_ids=("a",))
    assert not _stops(decide([waiting], [mover], capacity, NOW, _config()))
    # The same with the waiting task needing a 128-CPU, 8-GPU node (a or b only): it moves.
    wider = msgspec.structs.replace(waiting, demand=Demand(nnodes=1, n_gpus_per_node=8, cpus_per_node=100))
    assert [p.task_id for p in _stops(decide([wider], [mover], capacity, NOW, _config()))] == ["narrow"]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([64.0, 128.0]), st.integers(0, 8)), min_size=1, max_size=5),
       st.lists(st.tuples(st.integers(1, 8), st.sampled_from([8.0, 64.0, 120.0]), st.booleans(),
                          st.floats(0.1, 100.0)), max_size=6),
       st.lists(st.tuples(st.integers(1, 8), st.sampled_from([8.0, 64.0, 120.0])), min_size=1, max_size=4))
def test_moves_stop_only_preemptible_settled_tasks_and_never_overcommit(nodes, running_items, waiting_items) -> None:
    """On random clusters: every stop is of a preemptible, settled task; the admissions and
    the gangs made room for fit the nodes as the stops leave them."""
    caps, running, used = [], [], []
    for i, (cpus, held) in enumerate(nodes):
        used.append([float(held), min(cpus, held * 8.0)])
    for j, (gpus, cpus, preemptible, hours) in enumerate(running_items):
        i = j % len(nodes)
        running.append(RunningTask(task_id=f"r{j}", user=f"u{j % 2}", node_ids=(f"n{i}",), preemptible=preemptible,
                                   demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=min(cpus, nodes[i][0])),
                                   started_at=NOW - HOUR, expected_end=NOW + hours * HOUR))
    for i, (cpus, held) in enumerate(nodes):
        on = [r for r in running if r.node_ids == (f"n{i}",)]
        gpus = max(0.0, 8.0 - held - sum(r.demand.n_gpus_per_node for r in on))
        free_cpus = max(0.0, cpus - sum(r.demand.cpus_per_node for r in on))
        caps.append(_node(f"n{i}", cpus, gpus, free_cpus))
    queue = [QueuedTask(task_id=f"w{k}", user="w", seq=k, demand=Demand(nnodes=1, n_gpus_per_node=g, cpus_per_node=c))
             for k, (g, c) in enumerate(waiting_items)]
    decisions = decide(queue, running, Capacity(nodes=tuple(caps)), NOW, _config())
    by_id = {r.task_id: r for r in running}
    for stop in _stops(decisions):
        assert by_id[stop.task_id].preemptible and by_id[stop.task_id].settled
    # Nothing admitted beyond what is free now (moves free nothing until their stops are done).
    free = {n.node_id: [n.free_gpus, n.free_cpus] for n in caps}
    for d in decisions:
        if isinstance(d, Admit):
            t = next(t for t in queue if t.task_id == d.task_id)
            for nid in d.node_ids:
                free[nid][0] -= t.demand.n_gpus_per_node
                free[nid][1] -= t.demand.cpus_per_node
                assert free[nid][0] >= -1e-9 and free[nid][1] >= -1e-9

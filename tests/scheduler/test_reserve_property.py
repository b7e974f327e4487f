"""Reservations with backfill, as a property (hypothesis): on random clusters, running
tasks and queues, if every estimate holds (running tasks end at their expected end,
admitted ones after their estimate), the head's gang fits on its reserved nodes at its
reserved time, whatever the pass let start behind it; and only a task with a time limit
is let onto the reserved nodes."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from argus.events import Demand, NodeCapacity
from argus.scheduler import Admit, Capacity, Defer, PolicyConfig, QueuedTask, RunningTask, decide

NOW = 100_000.0
GPUS, CPUS = 8.0, 64.0

running_st = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(60, 20_000)), max_size=10)
queue_st = st.lists(st.tuples(st.integers(1, 2), st.sampled_from([1, 2, 4, 8]), st.integers(60, 20_000),
                              st.booleans()), min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 4), running_st, queue_st)
def test_a_reservation_is_never_delayed_by_what_passes_it(n_nodes, running_items, queue_items) -> None:
    free = {f"n{i}": GPUS for i in range(n_nodes)}
    running = []
    for k, (node, gpus, ends_in) in enumerate(running_items):
        nid = f"n{node % n_nodes}"
        if free[nid] >= gpus:
            free[nid] -= gpus
            running.append(RunningTask(task_id=f"r{k}", demand=Demand(nnodes=1, n_gpus_per_node=gpus, cpus_per_node=1),
                                       node_ids=(nid,), expected_end=NOW + ends_in, started_at=NOW - 10))
    capacity = Capacity(nodes=tuple(
        NodeCapacity(node_id=nid, ip="", total_gpus=GPUS, free_gpus=g, total_cpus=CPUS, free_cpus=CPUS - (GPUS - g))
        for nid, g in free.items()))
    queue = [QueuedTask(task_id=f"q{k}", demand=Demand(nnodes=nnodes, n_gpus_per_node=gpus, cpus_per_node=1),
                        seq=k + 1, estimate_s=float(estimate), limited=limited)
             for k, (nnodes, gpus, estimate, limited) in enumerate(queue_items)]
    decisions = decide(queue, running, capacity, NOW, PolicyConfig(policy="reserve-backfill", max_running_tasks=100))
    head = next((d for d in decisions if isinstance(d, Defer) and d.reserved_from is not None), None)
    event("a reservation" if head is not None else "no reservation")
    if head is None:
        return
    event("with a backfilled task" if any(isinstance(d, Admit) and d.note for d in decisions) else "nothing passed")
    by_id = {t.task_id: t for t in queue}
    for d in decisions:  # only a time limit lets a task onto the reserved nodes
        if isinstance(d, Admit) and not by_id[d.task_id].limited and d.note:
            assert not set(d.node_ids) & set(head.reserved_nodes), (d, head)
        if isinstance(d, Admit) and d.note and set(d.node_ids) & set(head.reserved_nodes):
            event("a time-limited task before the reservation, on its nodes")
    at = head.reserved_from
    assert at is not None
    # Who still holds GPUs on each node at the reserved time, if every estimate holds.
    held = {nid: 0.0 for nid in free}
    for r in running:
        if r.expected_end is not None and r.expected_end > at:
            for nid in r.node_ids:
                held[nid] += r.demand.n_gpus_per_node
    for d in decisions:
        if isinstance(d, Admit) and NOW + (by_id[d.task_id].estimate_s or 0) > at:
            for nid in d.node_ids:
                held[nid] += by_id[d.task_id].demand.n_gpus_per_node
    need = by_id[head.task_id].demand
    assert len(head.reserved_nodes) == need.nnodes
    for nid in head.reserved_nodes:
        assert GPUS - held[nid] >= need.n_gpus_per_node, (head, held, decisions)

"""Wait reasons name nodes as people can find them: the address and the start of Ray's
56-character id (as the cluster page shows it), never the whole id."""

from __future__ import annotations

from argus.events.catalog import Demand, NodeCapacity
from argus.scheduler import Capacity, PolicyConfig, QueuedTask, Reason, RunningTask, decide
from argus.scheduler.placement import node_label

NOW = 1_000.0
RAY_ID = "5c6569e36fa7ac52d1f0b8e2a4c3d9e17b6f0a2c5d8e1f4a7b0c3d6e"  # 56 hex, as Ray writes them
OTHER = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d"


def test_a_reservation_and_the_tasks_behind_it_name_nodes_by_address_and_short_id() -> None:
    assert len(RAY_ID) == 56 and node_label(RAY_ID, "10.0.0.12") == "10.0.0.12 (node 5c6569e3)"
    assert node_label("n01", "") == "node n01"  # a short id stays whole
    nodes = (NodeCapacity(node_id=RAY_ID, ip="10.0.0.12", total_gpus=8, free_gpus=4, total_cpus=64, free_cpus=64),
             NodeCapacity(node_id=OTHER, ip="10.0.0.13", total_gpus=2, free_gpus=2, total_cpus=64, free_cpus=64))
    running = [RunningTask(task_id="r", demand=Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=4),
                           node_ids=(RAY_ID,), expected_end=NOW + 3600)]
    queue = [QueuedTask(task_id="high", demand=Demand(nnodes=1, n_gpus_per_node=8, cpus_per_node=4), priority=5),
             QueuedTask(task_id="wide", demand=Demand(nnodes=1, n_gpus_per_node=4, cpus_per_node=4))]
    out = {d.task_id: d for d in decide(queue, running, Capacity(nodes=nodes), NOW,
                                        PolicyConfig(policy="priority", waits=True))}
    assert out["high"].reserved_nodes == (RAY_ID,)  # the record keeps Ray's id
    assert out["wide"].reason == Reason.BEHIND_RESERVATION
    for said in (out["high"].message, out["wide"].message):
        assert "10.0.0.12 (node 5c6569e3)" in said and RAY_ID not in said, said

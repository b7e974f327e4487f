"""Fragmentation-aware placement for whole GPUs (argus.scheduler.fragmentation)."""

from __future__ import annotations

import pytest

from argus.events.catalog import Demand, NodeCapacity
from argus.scheduler import Admit, Capacity, Defer, PolicyConfig, QueuedTask, decide
from argus.scheduler.fragmentation import ShapeMix


def shape(gpus: int, cpus: float, nnodes: int = 1) -> Demand:
    return Demand(nnodes=nnodes, n_gpus_per_node=gpus, cpus_per_node=cpus)


def test_fragmentation_counts_the_free_gpus_a_coming_task_could_not_use() -> None:
    mix = ShapeMix.of([shape(1, 1), shape(1, 8), shape(4, 1)])  # a third each
    assert mix.fragmentation(8, 64) == 0  # every shape fits
    assert mix.fragmentation(2, 2) == pytest.approx(2 * 2 / 3)  # the 1x8 and the 4-GPU shapes do not
    assert mix.fragmentation(1, 1) == pytest.approx(1 * 2 / 3)
    assert mix.fragmentation(0, 64) == 0  # nothing free, nothing stranded


def test_a_gang_counts_once_per_node_in_the_mix() -> None:
    mix = ShapeMix.of([shape(1, 1, nnodes=3), shape(2, 1)])
    assert dict(((g, c), w) for g, c, w in mix.shapes) == {(1.0, 1.0): 0.75, (2.0, 1.0): 0.25}


def test_placement_leaves_room_that_best_fit_would_strand() -> None:
    """n00 has 1 GPU and many CPUs, n01 2 GPUs and 2 CPUs. Best-fit puts the small task on
    n00 (fewest GPUs): n01's GPUs are then of no use to the 8-CPU task behind it. Aware of
    what waits, the small task goes to n01 and both run."""
    nodes = (NodeCapacity(node_id="n00", ip="", total_gpus=1, free_gpus=1, total_cpus=16, free_cpus=16),
             NodeCapacity(node_id="n01", ip="", total_gpus=2, free_gpus=2, total_cpus=2, free_cpus=2))
    queue = [QueuedTask(task_id="small", demand=shape(1, 1), seq=1),
             QueuedTask(task_id="cpu-heavy", demand=shape(1, 8), seq=2)]
    aware = PolicyConfig(policy="fifo", max_running_tasks=8, placement="fragmentation")
    decisions = {d.task_id: d for d in decide(queue, [], Capacity(nodes=nodes), 0.0, aware)}
    assert isinstance(decisions["small"], Admit) and decisions["small"].node_ids == ("n01",)
    assert isinstance(decisions["cpu-heavy"], Admit) and decisions["cpu-heavy"].node_ids == ("n00",)
    # Argus's own placement stays best-fit (the fragmentation-aware one lost on the trace),
    # but it spares n00 here: the only node the waiting 8-CPU task fits on.
    plain = {d.task_id: d for d in decide(queue, [], Capacity(nodes=nodes), 0.0,
                                          PolicyConfig(policy="fifo", max_running_tasks=8))}
    assert isinstance(plain["small"], Admit) and plain["small"].node_ids == ("n01",)
    assert isinstance(plain["cpu-heavy"], Admit) and plain["cpu-heavy"].node_ids == ("n00",)
    # With nothing waiting that needs n00, best-fit puts the small task there (fewest GPUs).
    alone = {d.task_id: d for d in decide(queue[:1], [], Capacity(nodes=nodes), 0.0,
                                          PolicyConfig(policy="fifo", max_running_tasks=8))}
    assert alone["small"].node_ids == ("n00",)  # type: ignore[union-attr]


def test_a_given_mix_is_used_and_ties_fall_back_to_best_fit() -> None:
    nodes = tuple(NodeCapacity(node_id=f"n{i}", ip="", total_gpus=8, free_gpus=g, total_cpus=64, free_cpus=64)
                  for i, g in enumerate((8, 3, 5)))
    queue = [QueuedTask(task_id="t", demand=shape(1, 1))]
    # Every shape of the mix fits everywhere before and after: no fragmentation either way,
    # so best-fit decides (fewest free GPUs).
    only_small = PolicyConfig(policy="fifo", placement="fragmentation", shape_mix=((1.0, 1.0, 1.0),))
    assert decide(queue, [], Capacity(nodes=nodes), 0.0, only_small)[0].node_ids == ("n1",)  # type: ignore[union-attr]
    # With only 4-GPU tasks coming, n1's 3 free GPUs are stranded already: taking one of
    # them strands fewer, while n0 and n2 keep room for a 4-GPU task either way.
    fours = PolicyConfig(policy="fifo", placement="fragmentation", shape_mix=((4.0, 1.0, 1.0),))
    picked = decide(queue, [], Capacity(nodes=nodes), 0.0, fours)[0]
    assert not isinstance(picked, Defer) and picked.node_ids == ("n1",)

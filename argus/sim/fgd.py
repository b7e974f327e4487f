"""Placement quality the FGD way (Weng et al., USENIX ATC'23): how much of the cluster's
GPU capacity gets allocated as tasks keep arriving and none leaves.

The paper's procedure: tasks sampled with replacement from the trace until their GPU
requests reach 1.3x the cluster's capacity, shuffled, then placed one by one in that
order, arrivals only, no departures; a task that cannot be placed is skipped. Reported:
the share of GPUs allocated when the arrived requests reach 100 % and 130 % of capacity.
Placements compared in one run: ``random`` (any node that fits), ``bestfit`` (the node
left with the fewest free GPUs), ``argus`` (the scheduler's own ``decide`` placing each
task on the cluster as it stands) and ``fragmentation`` (``decide`` with the
fragmentation-aware placement of ``argus.scheduler.fragmentation``, given the workload's
shape mix as the paper's FGD is). Whole GPUs only: the paper's headline numbers are
for fractional-GPU tasks, so they are context, not a like-for-like comparison.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import msgspec

from argus.events import NodeCapacity
from argus.scheduler import Admit, Capacity, PolicyConfig, QueuedTask, decide
from argus.scheduler.fragmentation import ShapeMix
from argus.sim.trace import SimNode, SimTask, Trace

__all__ = ["FgdResult", "PLACEMENTS", "fgd"]

Free = dict[str, list[float]]
Placement = Callable[[Free, SimTask, random.Random], tuple[str, ...] | None]


class FgdResult(msgspec.Struct, frozen=True, kw_only=True):
    placement: str
    allocated_at_100: float  # GPUs allocated / capacity when arrivals reach 100 % of it
    allocated_at_130: float
    failed: int  # tasks that could not be placed (skipped)
    unallocated_gpus: float  # GPUs left free at the end (130 %): what fragmentation stranded


def _fits(free: Free, task: SimTask) -> list[str]:
    d = task.demand
    return [nid for nid, (g, c) in free.items() if g >= d.n_gpus_per_node and c >= d.cpus_per_node]


def _random(free: Free, task: SimTask, rng: random.Random) -> tuple[str, ...] | None:
    fits = _fits(free, task)
    return tuple(rng.sample(fits, task.demand.nnodes)) if len(fits) >= task.demand.nnodes else None


def _bestfit(free: Free, task: SimTask, rng: random.Random) -> tuple[str, ...] | None:
    fits = sorted(_fits(free, task), key=lambda nid: (free[nid][0] - task.demand.n_gpus_per_node, nid))
    return tuple(fits[: task.demand.nnodes]) if len(fits) >= task.demand.nnodes else None


def _argus(free: Free, task: SimTask, rng: random.Random, placement: str = "bestfit",
           mix: tuple[tuple[float, float, float], ...] = ()) -> tuple[str, ...] | None:
    capacity = Capacity(nodes=tuple(NodeCapacity(node_id=nid, ip="", total_gpus=g, free_gpus=g, total_cpus=c,
                                                 free_cpus=c) for nid, (g, c) in free.items()))
    queue = [QueuedTask(task_id=task.task_id, demand=task.demand)]
    decision = decide(queue, [], capacity, 0.0, PolicyConfig(policy="fifo", max_running_tasks=1,
                                                                   placement=placement, shape_mix=mix))[0]
    return decision.node_ids if isinstance(decision, Admit) else None


PLACEMENTS: dict[str, Placement] = {"random": _random, "bestfit": _bestfit, "argus": _argus,
                                    "fragmentation": functools.partial(_argus, placement="fragmentation")}


def _workload(tasks: list[SimTask], nodes: list[SimNode], seed: int) -> list[SimTask]:
    rng = random.Random(seed)
    capacity = sum(n.gpus for n in nodes)
    out: list[SimTask] = []
    asked = 0.0
    while asked < 1.3 * capacity:
        task = rng.choice(tasks)
        out.append(msgspec.structs.replace(task, task_id=f"{task.task_id}#{len(out)}"))
        asked += task.demand.total_gpus
    rng.shuffle(out)
    return out


def fgd(trace: Trace, *, seed: int = 0, placements: tuple[str, ...] = tuple(PLACEMENTS)) -> list[FgdResult]:
    """The allocation ratios of each placement on the same sampled, shuffled workload."""
    workload = _workload(trace.tasks, trace.nodes, seed)
    mix = ShapeMix.of(t.demand for t in workload).shapes
    capacity = sum(n.gpus for n in trace.nodes)
    results = []
    for name in placements:
        place, rng = PLACEMENTS[name], random.Random(seed)
        if name == "fragmentation":  # as the paper's FGD, it knows the workload's shapes
            place = functools.partial(_argus, placement=name, mix=mix)
        free: Free = {n.node_id: [n.gpus, n.cpus] for n in trace.nodes}
        arrived = allocated = 0.0
        at_100: float | None = None
        failed = 0
        for task in workload:
            arrived += task.demand.total_gpus
            nodes = place(free, task, rng)
            if nodes is None:
                failed += 1
            else:
                for nid in nodes:
                    free[nid][0] -= task.demand.n_gpus_per_node
                    free[nid][1] -= task.demand.cpus_per_node
                allocated += task.demand.total_gpus
            if at_100 is None and arrived >= capacity:
                at_100 = allocated / capacity
        results.append(FgdResult(placement=name, allocated_at_100=at_100 or allocated / capacity,
                                 allocated_at_130=allocated / capacity, failed=failed,
                                 unallocated_gpus=capacity - allocated))
    return results

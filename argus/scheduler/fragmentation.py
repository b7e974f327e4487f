"""Fragmentation-aware placement for whole GPUs (the FGD idea of Weng et al., USENIX ATC'23,
without GPU sharing): place a gang where the cluster's expected fragmentation grows least.

A node's *fragmentation*, against a mix of task shapes, is the free GPUs that a task drawn
from the mix could not use there, weighed by how often such tasks come. With whole GPUs no
GPU is ever split, so a node strands its free GPUs only for tasks it is too small for, in
GPUs or in CPUs: 3 free GPUs and 2 free CPUs are of no use to a task asking 1 GPU and 4
CPUs. Best-fit (fewest GPUs left) ignores the CPUs and the mix; it can leave a node with
GPUs no coming task can take.

Tried, and not Argus's placement: it wins the FGD procedure (arrivals only, nothing
leaves: ``argus sim --fgd`` on openb leaves 1–4 GPUs of 6,212 unallocated where best-fit
leaves 14–22) but loses the trace run with departures and gangs (``argus sim … --placement
fragmentation``: FIFO's busy utilisation 0.283 against best-fit's 0.525, priority with
preemption 0.190 against 0.637; level under reservations, which protect their nodes). A
nearly empty 8-GPU node strands its GPUs for an 8-GPU task anyway by this measure, so
small tasks go there, and nodes stop draining for gangs.
So it is selectable in the simulator (``PolicyConfig.placement``), not in the service.

The mix is what the pass knows is coming: the shapes of the first ``MIX_SAMPLE`` waiting
tasks and of the running ones (so the mix follows the workload), unless a mix is given
(the simulator's FGD mode passes the sampled workload's, as the paper does).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from argus.events.catalog import Demand

__all__ = ["MIX_SAMPLE", "ShapeMix"]

MIX_SAMPLE = 1000  # waiting tasks whose shapes make the mix: the front of the line comes next


class ShapeMix:
    """How often each per-node shape (GPUs, CPUs) comes, and the fragmentation it implies."""

    def __init__(self, weights: Iterable[tuple[float, float, float]]) -> None:
        merged: dict[tuple[float, float], float] = {}
        for gpus, cpus, weight in weights:
            merged[(gpus, cpus)] = merged.get((gpus, cpus), 0.0) + weight
        total = sum(merged.values()) or 1.0
        self.shapes = tuple((g, c, w / total) for (g, c), w in merged.items() if w > 0)
        self._memo: dict[tuple[float, float], float] = {}

    @classmethod
    def of(cls, demands: Iterable[Demand]) -> "ShapeMix":
        """The mix of these gangs' per-node shapes (a gang of n nodes counts n times)."""
        counts: dict[tuple[float, float], float] = {}
        for d in demands:
            key = (float(d.n_gpus_per_node), float(d.cpus_per_node))
            counts[key] = counts.get(key, 0.0) + d.nnodes
        return cls((g, c, n) for (g, c), n in counts.items())

    def fragmentation(self, gpus: float, cpus: float) -> float:
        """Expected free GPUs of a node with ``gpus``, ``cpus`` free that a coming task
        could not use."""
        key = (gpus, cpus)
        found = self._memo.get(key)
        if found is None:
            found = gpus * sum(w for g, c, w in self.shapes if g > gpus or c > cpus) if gpus > 0 else 0.0
            self._memo[key] = found
        return found

    def order(self, fits: Sequence[int], gpus: Sequence[float], cpus: Sequence[float], ids: Sequence[str],
              d: Demand) -> list[int]:
        """The ``d.nnodes`` best of ``fits`` (node indexes that can take one member of ``d``):
        least fragmentation growth first; ties by fewest free GPUs, then CPUs, then id
        (best-fit)."""
        g, c, frag = d.n_gpus_per_node, d.cpus_per_node, self.fragmentation
        return heapq.nsmallest(d.nnodes, fits, key=lambda i: (frag(gpus[i] - g, cpus[i] - c) - frag(gpus[i], cpus[i]),
                                                              gpus[i], cpus[i], ids[i]))

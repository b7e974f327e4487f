"""Could a gang ever fit this cluster? Checked at submit, against whole nodes.

The admission policy asks "does it fit *now*" (free resources); this asks "would it fit an
empty cluster of this shape" (total resources per node). A task that fails it would wait
for ever, so the API refuses it at submit with what to change instead of queueing it.
"""

from __future__ import annotations

from collections.abc import Sequence

from argus.events.catalog import Demand, NodeCapacity
from argus.scheduler.gpumodel import allowed_nodes, models_of, models_present, wants
from argus.scheduler.policy import fmt_amount

__all__ = ["assumed_nodes", "unfit_reason"]


def assumed_nodes(count: int, gpus: float, cpus: float, gpu_type: str = "") -> list[NodeCapacity]:
    """A configured cluster shape, for when no worker node has been observed yet."""
    return [NodeCapacity(node_id=f"assumed-{i + 1}", ip="", total_gpus=gpus, free_gpus=gpus,
                         total_cpus=cpus, free_cpus=cpus, gpu_type=gpu_type) for i in range(count)]


def unfit_reason(demand: Demand, nodes: Sequence[NodeCapacity], where: str) -> tuple[str, str] | None:
    """None if ``demand`` fits ``nodes`` when all are empty, else the spec field to change
    and a message saying how. ``where`` says where the shape comes from (e.g. "as last
    observed")."""
    if not nodes:
        return None  # no shape known: nothing to judge by (the queue will tell)
    if demand.gpu_types:
        allowed = allowed_nodes(demand.gpu_types, tuple(n.gpu_type for n in nodes)) or frozenset()
        mine = [n for i, n in enumerate(nodes) if i in allowed]
        if not mine:
            present = sorted({n.gpu_type for n in nodes if n.gpu_type}, key=str.casefold)
            fix = (f"ask for one of {', '.join(present)}, or leave gpu_type out" if present
                   else "leave gpu_type out (no node is labelled with a GPU model)")
            return "gpu_type", (f"the task {wants(demand)} GPUs, but none of the {len(nodes)} worker node(s) ({where}) has "
                    f"them (models: {models_present([n.gpu_type for n in nodes])}): it could never start; {fix}")
        nodes = mine
    big_enough = [n for n in nodes if n.total_gpus >= demand.n_gpus_per_node
                  and n.total_cpus >= demand.cpus_per_node]
    if len(big_enough) >= demand.nnodes:
        return None
    max_gpus = max(n.total_gpus for n in nodes)
    model = f"{models_of(demand)} " if demand.gpu_types else ""
    cluster = (f"this cluster has {len(nodes)} {model}worker node(s) ({where}), the largest with "
               f"{fmt_amount(max_gpus)} GPUs and {fmt_amount(max(n.total_cpus for n in nodes))} CPUs")
    need = (f"the task needs {demand.nnodes} node(s) with {demand.n_gpus_per_node} {model}GPUs and "
            f"{fmt_amount(demand.cpus_per_node)} CPUs each")
    field = "n_gpus_per_node"
    if max_gpus < demand.n_gpus_per_node:
        fix = f"ask for n_gpus_per_node ≤ {fmt_amount(max_gpus)}{_reshaped(demand, nodes)}"
    elif not big_enough:
        fix = "ask for fewer GPUs per node (verl reserves CPUs with each GPU)"
    else:
        field, fix = "nnodes", f"ask for nnodes ≤ {len(big_enough)}{_reshaped(demand, nodes)}"
    if demand.gpu_types:
        fix += ", or accept more GPU models (gpu_type)"
    return field, f"{need}, but {cluster}: it could never start; {fix}"


def _reshaped(demand: Demand, nodes: Sequence[NodeCapacity]) -> str:
    """The same number of GPUs in a shape that fits ``nodes`` (the most GPUs per node
    first), said as an example; or, when none does, the most GPUs one task can have."""
    total = demand.total_gpus
    per_gpu_cpus = (demand.cpus_per_node - 1) / demand.n_gpus_per_node  # verl's CPUs per GPU bundle

    def hosts(per_node: int) -> int:
        return sum(1 for n in nodes if n.total_gpus >= per_node and n.total_cpus >= per_node * per_gpu_cpus + 1)

    sizes = range(int(max(n.total_gpus for n in nodes)), 0, -1)
    for per_node in sizes:
        if per_node != demand.n_gpus_per_node and total % per_node == 0 and hosts(per_node) >= total // per_node:
            return f" (e.g. nnodes={total // per_node}, n_gpus_per_node={per_node} for {total} GPUs)"
    best = max(sizes, key=lambda g: (g * hosts(g), g), default=0)
    if best == 0 or hosts(best) == 0:
        return ""
    return (f" (no shape of {total} GPUs fits: at most nnodes={hosts(best)}, n_gpus_per_node={best}, "
            f"{best * hosts(best)} GPUs)")

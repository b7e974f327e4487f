"""Estimated start times: the policy itself, run forward on a virtual clock.

Take the waiting tasks (the first ``horizon`` in the policy's order), the running tasks
with their expected ends, and the free capacity now; assume nothing else arrives and every
task runs its expected time. Each time resources come back (a running task's expected
end) or a retry's backoff ends, the policy decides again, exactly as the reactor would;
the time a task is admitted there is its estimated start. A task past the horizon, or one
the cluster could not hold, gets none.

Ray does not say which nodes a running job holds; where they are not known, a task's end
frees the nodes with the most GPUs in use (as reservations assume, ``reserve.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import msgspec

from argus.events.catalog import Demand, NodeCapacity
from argus.scheduler.order import queue_order
from argus.scheduler.policy import Admit, Capacity, PolicyConfig, QueuedTask, RunningTask, decide
from argus.scheduler.reserve import expected_end

__all__ = ["DEFAULT_HORIZON", "estimate_starts"]

DEFAULT_HORIZON = 200
_MAX_PASSES = 10_000  # a bound on the forward run, whatever the inputs


def estimate_starts(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity,
                    now: float, config: PolicyConfig, *, horizon: int = DEFAULT_HORIZON) -> dict[str, float]:
    """Estimated start of each of the first ``horizon`` waiting tasks (by task id)."""
    ahead = queue_order(config.policy, queue)[:horizon]
    nodes = sorted(capacity.nodes, key=lambda n: n.node_id)
    ids = [n.node_id for n in nodes]
    index = {nid: i for i, nid in enumerate(ids)}
    total = [(n.total_gpus, n.total_cpus) for n in nodes]
    free = [[n.free_gpus, n.free_cpus] for n in nodes]
    default = config.default_runtime_s
    # (time, order, task id, demand, node indices or () when unknown)
    ends: list[tuple[float, int, str, Demand, tuple[int, ...]]] = []
    live: dict[str, RunningTask] = {}
    known = [0.0] * len(ids)  # GPUs in use by tasks whose nodes are known
    for k, r in enumerate(running):
        at = expected_end(r.expected_end, r.started_at, now, default)
        placed = tuple(index[n] for n in r.node_ids if n in index)
        for i in placed:
            known[i] += r.demand.n_gpus_per_node
        heapq.heappush(ends, (at, k, r.task_id, r.demand, placed))
        live[r.task_id] = msgspec.structs.replace(r, claimed=True)
    wakes = sorted({t.next_run_at for t in ahead if t.next_run_at is not None and t.next_run_at > now})
    waiting = {t.task_id: t for t in ahead}
    starts: dict[str, float] = {}
    clock, order = now, len(running)
    for _ in range(_MAX_PASSES):
        snapshot = Capacity(nodes=tuple(
            NodeCapacity(node_id=ids[i], ip="", total_gpus=total[i][0], free_gpus=free[i][0],
                         total_cpus=total[i][1], free_cpus=free[i][1]) for i in range(len(ids))))
        for d in decide(list(waiting.values()), list(live.values()), snapshot, clock, config):
            if not isinstance(d, Admit):
                continue
            task = waiting.pop(d.task_id)
            starts[task.task_id] = clock
            picked = tuple(index[n] for n in d.node_ids)
            for i in picked:
                free[i][0] -= task.demand.n_gpus_per_node
                free[i][1] -= task.demand.cpus_per_node
                known[i] += task.demand.n_gpus_per_node
            live[task.task_id] = RunningTask(task_id=task.task_id, demand=task.demand, user=task.user,
                                             node_ids=d.node_ids, expected_end=clock + (task.estimate_s or default),
                                             started_at=clock)
            order += 1
            heapq.heappush(ends, (clock + (task.estimate_s or default), order, task.task_id, task.demand, picked))
        if not waiting:
            break
        next_end = ends[0][0] if ends else None
        wakes = [w for w in wakes if w > clock]
        upcoming = [t for t in (next_end, wakes[0] if wakes else None) if t is not None]
        if not upcoming:
            break  # nothing will free anything: the rest never start (by these estimates)
        clock = min(upcoming)
        while ends and ends[0][0] <= clock:
            _, _, task_id, demand, picked = heapq.heappop(ends)
            live.pop(task_id, None)
            for i in picked:
                known[i] -= demand.n_gpus_per_node
            for i in picked or _busiest(free, total, known, demand):
                free[i][0] = min(total[i][0], free[i][0] + demand.n_gpus_per_node)
                free[i][1] = min(total[i][1], free[i][1] + demand.cpus_per_node)
    return starts


def _busiest(free: list[list[float]], total: list[tuple[float, float]], known: list[float], d: Demand) -> list[int]:
    """The nodes a running task of unknown placement most likely holds: the most GPUs in
    use that no task of known placement accounts for."""
    unexplained = [total[i][0] - free[i][0] - known[i] for i in range(len(free))]
    used = [i for i in range(len(free)) if unexplained[i] >= d.n_gpus_per_node]
    return sorted(used, key=lambda i: -unexplained[i])[: d.nnodes]

"""Estimated start times: the policy itself, run forward on a virtual clock.

Take the waiting tasks (the first ``horizon`` in the policy's order), the running tasks
with their expected ends, and the free capacity now; assume nothing else arrives and every
task runs its expected time. Each time resources come back (a running task's expected
end) or a retry's backoff ends, the policy decides again, exactly as the reactor would;
the time a task is admitted there is its estimated start.

Tasks past the horizon (the first ``horizon`` in line), up to ``limit``, are not run
through the policy: its pass is O(waiting tasks) and the forward run makes one per start.
They get a coarse estimate instead: the cluster's free GPUs over time as the forward run
left them, and each, in line order, the earliest span with its GPUs free for its whole
expected run (conservative backfill on GPU counts, no nodes). On the trace it is late:
off by a median 52-110 % of the wait (seeds 0-3), later than the real start for three tasks
in four or more. A task the cluster could not hold, or past ``limit``, gets none.

Ray does not say which nodes a running job holds; where they are not known, a task's end
frees the nodes with the most GPUs in use (as reservations assume, ``reserve.py``).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

import msgspec

from argus.events.catalog import Demand, NodeCapacity
from argus.scheduler.gpumodel import allowed_nodes
from argus.scheduler.order import queue_order
from argus.scheduler.policy import Admit, Capacity, PolicyConfig, QueuedTask, RunningTask, decide
from argus.scheduler.reserve import expected_end

__all__ = ["DEFAULT_HORIZON", "DEFAULT_LIMIT", "estimate_starts"]

DEFAULT_HORIZON = 200
# Waiting tasks given an estimate, the first DEFAULT_HORIZON by the policy. The coarse rest
# costs O(tasks x steps of the GPU profile): 1,000 in ~80 ms, 2,000 in ~250 ms.
DEFAULT_LIMIT = 1_000
_MAX_PASSES = 10_000  # a bound on the forward run, whatever the inputs


def estimate_starts(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity,
                    now: float, config: PolicyConfig, *, horizon: int = DEFAULT_HORIZON,
                    limit: int = DEFAULT_LIMIT, in_line: bool = False) -> dict[str, float]:
    """Estimated start of each of the first ``limit`` waiting tasks (by task id): the
    first ``horizon`` by the policy run forward, the rest coarsely (module docstring).
    ``in_line``: ``queue`` is in the order users are shown (the API's, fair share's
    included), else it is put in ``queue_order``."""
    line = (list(queue) if in_line else queue_order(config.policy, queue))[:limit]
    ahead = line[:horizon]
    cluster = _Forward(capacity, running, now, config.default_runtime_s)
    wakes = sorted({t.next_run_at for t in ahead if t.next_run_at is not None and t.next_run_at > now})
    waiting = {t.task_id: t for t in ahead}
    starts: dict[str, float] = {}
    clock = now
    for _ in range(_MAX_PASSES):
        for d in decide(list(waiting.values()), list(cluster.live.values()), cluster.snapshot(), clock, config):
            if not isinstance(d, Admit):
                continue
            task = waiting.pop(d.task_id)
            starts[task.task_id] = clock
            cluster.start(task, d.node_ids, clock)
        if not waiting:
            break
        next_end = cluster.ends[0][0] if cluster.ends else None
        wakes = [w for w in wakes if w > clock]
        upcoming = [t for t in (next_end, wakes[0] if wakes else None) if t is not None]
        if not upcoming:
            return starts  # nothing will free anything: the rest never start (by these estimates)
        clock = min(upcoming)
        cluster.end_until(clock)
    if waiting:
        return starts  # the horizon's own tasks did not all start: the rest are past knowing
    behind = line[len(ahead):]
    if behind:
        starts.update(_by_gpu_profile(behind, cluster.free_now, cluster.deltas, cluster.total, cluster.types, now,
                                      config.default_runtime_s))
    return starts


class _Forward:
    """The cluster on the forward run's clock: free resources per node (indexed like
    ``ids``), the tasks running and when each is expected to end, and the free GPUs'
    changes over time for the coarse estimate past the horizon."""

    def __init__(self, capacity: Capacity, running: Sequence[RunningTask], now: float, default: float) -> None:
        nodes = sorted(capacity.nodes, key=lambda n: n.node_id)
        self.ids = [n.node_id for n in nodes]
        self.index = {nid: i for i, nid in enumerate(self.ids)}
        self.total = [(n.total_gpus, n.total_cpus) for n in nodes]
        self.types = [n.gpu_type for n in nodes]
        self.free = [[n.free_gpus, n.free_cpus] for n in nodes]
        self.default = default
        # (time, order, task id, demand, node indices or () when unknown)
        self.ends: list[tuple[float, int, str, Demand, tuple[int, ...]]] = []
        self.live: dict[str, RunningTask] = {}
        self.known = [0.0] * len(self.ids)  # GPUs in use by tasks whose nodes are known
        self.free_now = sum(g for g, _ in self.free)
        self.deltas: list[tuple[float, float]] = []  # (when, GPUs given back (+) or taken (-)) from now on
        for k, r in enumerate(running):
            at = expected_end(r.expected_end, r.started_at, now, default, r.by_progress)
            self.deltas.append((at, float(r.demand.total_gpus)))
            placed = tuple(self.index[n] for n in r.node_ids if n in self.index)
            for i in placed:
                self.known[i] += r.demand.n_gpus_per_node
            heapq.heappush(self.ends, (at, k, r.task_id, r.demand, placed))
            self.live[r.task_id] = msgspec.structs.replace(r, settled=True)
        # Ended gangs the ledger still holds give their resources back at once.
        for k, (node_ids, demand) in enumerate(capacity.releasing, start=len(running)):
            placed = tuple(self.index[n] for n in node_ids if n in self.index)
            for i in placed:
                self.known[i] += demand.n_gpus_per_node
            heapq.heappush(self.ends, (now, k, f"released:{k}", demand, placed))
            self.deltas.append((now, float(demand.total_gpus)))
        self.order = len(running) + len(capacity.releasing)  # pushed on ``ends``: equal times go in start order

    def snapshot(self) -> Capacity:
        """The free resources now, as the policy is given them."""
        ids, total, free, types = self.ids, self.total, self.free, self.types
        return Capacity(nodes=tuple(
            NodeCapacity(node_id=ids[i], ip="", total_gpus=total[i][0], free_gpus=free[i][0],
                         total_cpus=total[i][1], free_cpus=free[i][1], gpu_type=types[i]) for i in range(len(ids))))

    def start(self, task: QueuedTask, node_ids: tuple[str, ...], clock: float) -> None:
        """``task``, admitted on ``node_ids`` at ``clock``, runs its expected time."""
        picked = tuple(self.index[n] for n in node_ids)
        for i in picked:
            self.free[i][0] -= task.demand.n_gpus_per_node
            self.free[i][1] -= task.demand.cpus_per_node
            self.known[i] += task.demand.n_gpus_per_node
        run = task.estimate_s or self.default
        self.live[task.task_id] = RunningTask(task_id=task.task_id, demand=task.demand, user=task.user,
                                              node_ids=node_ids, expected_end=clock + run, started_at=clock,
                                              limited=task.limited)
        self.order += 1
        heapq.heappush(self.ends, (clock + run, self.order, task.task_id, task.demand, picked))
        self.deltas += [(clock, -float(task.demand.total_gpus)), (clock + run, float(task.demand.total_gpus))]

    def end_until(self, clock: float) -> None:
        """The tasks expected to end by ``clock`` give their resources back."""
        ends, free, total, known = self.ends, self.free, self.total, self.known
        while ends and ends[0][0] <= clock:
            _, _, task_id, demand, picked = heapq.heappop(ends)
            self.live.pop(task_id, None)
            for i in picked:
                known[i] -= demand.n_gpus_per_node
            for i in picked or _busiest(free, total, known, demand):
                free[i][0] = min(total[i][0], free[i][0] + demand.n_gpus_per_node)
                free[i][1] = min(total[i][1], free[i][1] + demand.cpus_per_node)


def _by_gpu_profile(behind: Sequence[QueuedTask], free_now: float, deltas: list[tuple[float, float]],
                    total: list[tuple[float, float]], types: list[str], now: float, default: float
                    ) -> dict[str, float]:
    """The coarse estimate past the horizon: the cluster's free GPUs over time as the
    forward run left them (running tasks' ends, the horizon's starts and ends); each task
    in line takes the earliest span, from now, with its GPUs free for its whole expected
    run (GPUs alone: no nodes, no GPU models). A gang larger than the nodes of its GPU
    models could hold gets none."""
    times, free = [now], [free_now]
    for at, change in sorted(deltas):
        at = max(at, now)
        if at == times[-1]:
            free[-1] += change
        else:
            times.append(at)
            free.append(free[-1] + change)
    starts: dict[str, float] = {}
    for t in behind:
        d = t.demand
        gpus = d.total_gpus
        allowed = allowed_nodes(d.gpu_types, tuple(types)) if d.gpu_types else None
        if sum(1 for i, (g, _) in enumerate(total) if g >= d.n_gpus_per_node
               and (allowed is None or i in allowed)) < d.nnodes:
            continue  # no nodes could hold it
        run = t.estimate_s or default
        earliest = now if t.next_run_at is None else max(now, t.next_run_at)
        i = max(0, bisect.bisect_right(times, earliest) - 1)
        start = None
        while i < len(times):
            begin = max(times[i], earliest)
            j = i
            while j < len(times) and times[j] < begin + run and free[j] >= gpus:
                j += 1
            if j == len(times) or times[j] >= begin + run:
                start = begin
                break
            i = j + 1  # free[j] is short: try from the next step on
        if start is None:
            continue
        starts[t.task_id] = start
        for edge in (start, start + run):  # take its GPUs over [start, start + run)
            k = bisect.bisect_right(times, edge) - 1
            if times[k] != edge:
                times.insert(k + 1, edge)
                free.insert(k + 1, free[k])
        for k in range(bisect.bisect_left(times, start), bisect.bisect_left(times, start + run)):
            free[k] -= gpus
    return starts


def _busiest(free: list[list[float]], total: list[tuple[float, float]], known: list[float], d: Demand) -> list[int]:
    """The nodes a running task of unknown placement most likely holds: the most GPUs in
    use that no task of known placement accounts for."""
    unexplained = [total[i][0] - free[i][0] - known[i] for i in range(len(free))]
    used = [i for i in range(len(free)) if unexplained[i] >= d.n_gpus_per_node]
    return sorted(used, key=lambda i: -unexplained[i])[: d.nnodes]

"""The simulation: a virtual clock, a simulated cluster, and the scheduler's own policy.

Events are task arrivals and task ends. After every instant at which something happened,
the waiting tasks go to ``argus.scheduler.decide`` exactly as the reactor hands them over
(``QueuedTask`` with its arrival as ``seq``; the policy orders them itself by its
``queue_order``), with the running tasks and the free capacity per node; every ``Admit``
starts its task on the nodes the policy chose, and the task ends ``runtime`` later. Ray's
own delays (job start, placement groups) are not modelled: the simulator judges the policy.

The policy never sees a task's real run time. It gets what the reactor gives it: an
estimate, the median of the same user's finished runs of the same shape so far, else
``default_runtime_s`` (traces carry no time limits); a running task is expected to end at
its start plus that estimate.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import msgspec

from argus.config import FairShareConfig
from argus.events import NodeCapacity
from argus.scheduler import Admit, Capacity, Defer, PolicyConfig, Preempt, QueuedTask, Reason, RunningTask, decide
from argus.scheduler.eta import DEFAULT_HORIZON, estimate_starts
from argus.scheduler.order import queue_order
from argus.sim.trace import SimTask, Trace
from projections.runtime_stats import RunKey, RuntimeHistory
from projections.usage import UsageLedger

__all__ = ["SimResult", "TaskOutcome", "simulate"]

Observer = Callable[[float, list[QueuedTask], list[RunningTask]], None]
_END, _ARRIVAL = 0, 1  # at one instant, ends free resources before arrivals are decided


class TaskOutcome(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    user: str
    nnodes: int
    gpus: int  # the whole gang
    arrival: float
    runtime: float
    start: float | None = None  # None: never admitted (the first start, when it was preempted)
    end: float | None = None
    preempted: int = 0  # times it was stopped to make room


class SimResult(msgspec.Struct, frozen=True, kw_only=True):
    policy: str
    outcomes: list[TaskOutcome]
    capacity_gpus: float
    decisions: int  # calls of the policy
    # ETAs given at arrival to sampled tasks that had to wait: |estimated - actual start|,
    # and how many sampled waiting tasks got no estimate (past the horizon, or never).
    # GPU-seconds in use, and offered, while some task waited: how much of the cluster the
    # policy used when there was work to give it.
    contended_used_gpu_s: float = 0.0
    contended_capacity_gpu_s: float = 0.0
    eta_errors: list[float] = []
    eta_waits: list[float] = []  # the same tasks' actual waits
    eta_coarse: list[bool] = []  # the same tasks': past the horizon (the coarse estimate)
    eta_unknown: int = 0


def simulate(trace: Trace, policy: str, *, max_running_tasks: int = 1_000_000, backfill: bool = False,
             max_running_per_user: int = 0, default_runtime_s: float = 3600.0, eta_every: int = 0,
             preemption: bool = False, grace_s: float = 30.0, fairshare: FairShareConfig | None = None,
             observe: Observer | None = None, placement: str = "bestfit", estimates: str = "history") -> SimResult:
    """Run ``trace`` through ``policy`` on the trace's nodes; every task's start and end.
    ``eta_every`` N > 0: every Nth arriving task that has to wait is given an ETA
    (``argus.scheduler.eta``, as a user would see it) to compare with its real start.
    ``preemption``: the policy may stop preemptible tasks; a victim stops ``grace_s``
    later, goes back to its place in line and later runs only what it had left (it
    resumes from a checkpoint taken at the stop: an optimistic model of lost work).
    ``fairshare``: half-life, shares and quotas of the ``fairshare`` policy.
    ``observe(now, waiting, running)``: called after each instant's decisions (tests).
    ``placement``: the policy's placement (``PolicyConfig.placement``).
    ``estimates``: what the policy is told of run times: ``history`` (what Argus knows:
    ``RuntimeHistory``'s estimate from the user's finished runs of the shape), or ``exact``
    (each task's real run time, as exact time limits would: what is left of an ETA's error
    is the policy's, not the estimates')."""
    fair = fairshare or FairShareConfig()
    config = PolicyConfig(policy=policy, max_running_tasks=max_running_tasks, backfill=backfill,
                          max_running_per_user=max_running_per_user, default_runtime_s=default_runtime_s,
                          preemption=preemption, preempt_grace_s=grace_s, shares=dict(fair.shares),
                          quotas=dict(fair.quotas), placement=placement)
    history = RuntimeHistory()  # finished runs, by user and shape (the trace has one workload)
    usage = UsageLedger(fair.half_life_s)

    if estimates not in ("history", "exact"):
        raise ValueError(f"estimates: 'history' or 'exact', not {estimates!r}")
    exact = estimates == "exact"  # the estimates hold, as enforced time limits would

    def estimate(task: SimTask) -> float:
        if exact:
            return left[task.task_id]  # what is left of it (all of it before a preemption)
        return history.expected(_run_key(task), default_runtime_s)[0]

    free = {n.node_id: [n.gpus, n.cpus] for n in trace.nodes}
    totals = {n.node_id: (n.gpus, n.cpus) for n in trace.nodes}
    tasks = {t.task_id: t for t in trace.tasks}
    events: list[tuple[float, int, int, str]] = []  # (time, kind, arrival seq or run token, task)
    seqs: dict[str, int] = {}
    for seq, task in enumerate(trace.tasks, start=1):
        heapq.heappush(events, (task.arrival, _ARRIVAL, seq, task.task_id))
        seqs[task.task_id] = seq
    waiting: dict[str, QueuedTask] = {}
    running: dict[str, tuple[RunningTask, tuple[str, ...]]] = {}
    left = {t.task_id: t.runtime for t in trace.tasks}  # run time still to go
    token: dict[str, int] = {}  # the current run of each task: ends of earlier runs are stale
    started: dict[str, float] = {}  # first start
    run_began: dict[str, float] = {}
    ended: dict[str, float] = {}
    preempted: dict[str, int] = {}
    making_room: dict[str, float] = {}  # waiting tasks the last pass stopped others for: since when
    decisions = 0
    arrivals = 0
    predicted: dict[str, float | None] = {}
    coarse: set[str] = set()  # sampled tasks that were past the forward run's horizon
    busy_used = busy_capacity = 0.0  # GPU-seconds used / offered while some task waited
    last, capacity_gpus, in_use = 0.0, sum(n.gpus for n in trace.nodes), 0.0  # in_use: GPUs of running tasks
    while events:
        now = events[0][0]
        if waiting:  # since the last instant, nothing changed: integrate its state
            busy_used += (now - last) * in_use
            busy_capacity += (now - last) * capacity_gpus
        last = now
        while events and events[0][0] == now:  # everything that happens at this instant
            _, kind, number, task_id = heapq.heappop(events)
            task = tasks[task_id]
            if kind == _ARRIVAL:
                waiting[task_id] = _queued(task, number)
                arrivals += 1
                if eta_every and arrivals % eta_every == 0:
                    predicted[task_id] = None  # asked for below, if it has to wait
                continue
            if token.get(task_id) != number:
                continue  # a run that was cut short by a preemption
            r, nodes = running.pop(task_id)
            _give(free, nodes, task, +1)
            in_use -= task.demand.total_gpus
            ran = now - run_began[task_id]
            usage.add(task.user, int((now - ran / 2) // 3600), task.demand.total_gpus * ran)
            left[task_id] -= ran
            if r.stopping and left[task_id] > 1e-6:  # preempted: back to its place in line
                waiting[task_id] = _queued(task, seqs[task_id])
                continue
            ended[task_id] = now
            history.add(_run_key(task), task.runtime)
        if not waiting:
            continue
        capacity = _capacity(free, totals)
        decisions += 1
        queue = [msgspec.structs.replace(q, estimate_s=estimate(tasks[q.task_id]), limited=exact,
                                         preempting_since=making_room.get(q.task_id)) for q in waiting.values()]
        if policy == "fairshare":
            live = [(r.user, int(((now + run_began[t]) / 2) // 3600), r.demand.total_gpus * (now - run_began[t]))
                    for t, (r, _) in running.items()]
            config = msgspec.structs.replace(config, usage=usage.at(now, live))
        since, making_room = making_room, {}
        for decision in decide(queue, [r for r, _ in running.values()], capacity, now, config):
            if isinstance(decision, Defer) and decision.reason == Reason.PREEMPTING:
                making_room[decision.task_id] = since.get(decision.task_id, now)
            if isinstance(decision, Preempt):
                r, nodes = running[decision.task_id]
                if r.stopping:
                    continue
                running[decision.task_id] = (msgspec.structs.replace(r, stopping=True), nodes)
                preempted[decision.task_id] = preempted.get(decision.task_id, 0) + 1
                end = min(now + grace_s, run_began[decision.task_id] + left[decision.task_id])
                token[decision.task_id] = token.get(decision.task_id, 0) + 1
                heapq.heappush(events, (end, _END, token[decision.task_id], decision.task_id))
                continue
            if not isinstance(decision, Admit):
                continue
            task = tasks[decision.task_id]
            del waiting[task.task_id]
            running[task.task_id] = (RunningTask(task_id=task.task_id, demand=task.demand, user=task.user,
                                                 node_ids=decision.node_ids, expected_end=now + estimate(task),
                                                 priority=task.priority, preemptible=task.preemptible,
                                                 started_at=now),
                                     decision.node_ids)
            _give(free, decision.node_ids, task, -1)
            in_use += task.demand.total_gpus
            started.setdefault(task.task_id, now)
            run_began[task.task_id] = now
            token[task.task_id] = token.get(task.task_id, 0) + 1
            heapq.heappush(events, (now + left[task.task_id], _END, token[task.task_id], task.task_id))
        if observe is not None:
            observe(now, list(waiting.values()), [r for r, _ in running.values()])
        asked = [t for t, eta in predicted.items() if eta is None and t in waiting]
        if asked:
            # estimates unchanged since the decision; put in line once, for both uses
            line = queue_order(config.policy, [q for q in queue if q.task_id in waiting])
            etas = estimate_starts(line, [r for r, _ in running.values()], _capacity(free, totals), now, config,
                                   in_line=True)
            ahead = {q.task_id for q in line[:DEFAULT_HORIZON]}
            for t in asked:
                predicted[t] = etas.get(t, -1.0)  # -1: no estimate
                if t not in ahead:
                    coarse.add(t)
        for t in [t for t, eta in predicted.items() if eta is None and t not in waiting]:
            del predicted[t]  # admitted at arrival: nothing to estimate
    outcomes = [TaskOutcome(task_id=t.task_id, user=t.user, nnodes=t.demand.nnodes, gpus=t.demand.total_gpus,
                            arrival=t.arrival, runtime=t.runtime, start=started.get(t.task_id),
                            end=ended.get(t.task_id), preempted=preempted.get(t.task_id, 0)) for t in trace.tasks]
    sampled = [(t, eta) for t, eta in predicted.items() if eta is not None and eta >= 0 and t in started]
    errors = [abs(started[t] - eta) for t, eta in sampled]
    waits = [started[t] - tasks[t].arrival for t, _ in sampled]
    return SimResult(policy=policy, outcomes=outcomes, capacity_gpus=capacity_gpus,
                     contended_used_gpu_s=busy_used, contended_capacity_gpu_s=busy_capacity,
                     decisions=decisions, eta_errors=errors, eta_waits=waits,
                     eta_coarse=[t in coarse for t, _ in sampled],
                     eta_unknown=sum(1 for eta in predicted.values() if eta is not None and eta < 0))


def _run_key(task: SimTask) -> RunKey:
    return RunKey(task.user, "trace", task.demand.nnodes, task.demand.n_gpus_per_node)


def _queued(task: SimTask, seq: int) -> QueuedTask:
    return QueuedTask(task_id=task.task_id, demand=task.demand, seq=seq, priority=task.priority, user=task.user)


def _capacity(free: dict[str, list[float]], totals: dict[str, tuple[float, float]]) -> Capacity:
    """The simulated cluster as the policy sees it."""
    return Capacity(nodes=tuple(
        NodeCapacity(node_id=nid, ip="", total_gpus=totals[nid][0], free_gpus=g, total_cpus=totals[nid][1],
                     free_cpus=c) for nid, (g, c) in free.items()))


def _give(free: dict[str, list[float]], nodes: tuple[str, ...], task: SimTask, sign: int) -> None:
    """Return (+1) or take (-1) a gang member's GPUs and CPUs on each of its nodes."""
    for nid in nodes:
        free[nid][0] += sign * task.demand.n_gpus_per_node
        free[nid][1] += sign * task.demand.cpus_per_node

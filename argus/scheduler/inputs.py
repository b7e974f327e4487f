"""What the policy is given: the log's tasks as ``QueuedTask``/``RunningTask``, and the
cluster as the ledger leaves it (``argus.scheduler.ledger``).

Ray's free capacity lags behind our own decisions: a job just handed to Ray has not yet
reserved its GPUs (verl creates its placement groups some time after the driver starts,
a minute or more on a busy host). So the capacity handed to the policy is not Ray's count
but, per node, the least of Ray's count and the node's total less every gang Argus has
admitted there and not yet seen given back: what Argus promised is never promised twice.

The reactor and the simulator (``argus.scheduler.core``), the API's ETAs and the queue
shown under ``fairshare`` (read from the projections in ``argus.views.fair_inputs``) all
build the policy's view here, so they cannot disagree. Everything here is pure: the tasks
and the time are handed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from argus.config import SchedulerConfig
from argus.events import Demand, NodeCapacity
from argus.lifecycle import TaskState
from argus.scheduler.ledger import Commitment, admissible, ready_nodes
from argus.scheduler.model import Capacity, QueuedTask, RunningTask
from projections import TaskView
from projections.runtime_stats import RuntimeHistory

__all__ = ["SETTLE_S", "QueueMemo", "settles_at", "commitments", "ledger_capacity", "policy_inputs", "with_driver"]


# How long a task has to have been seen running before it may be preempted (its trainer has
# started: stopping it sooner wastes its start for little).
SETTLE_S = 15.0


def commitments(active: Sequence[TaskView], driver_cpus: float,
                releasing: Sequence[Commitment] = ()) -> list[Commitment]:
    """What the ledger holds: the gang of every task with a live attempt (intent recorded,
    not ended), on the nodes it was admitted onto, plus ``releasing`` (ended attempts not
    yet seen given back)."""
    held = [Commitment(task_id=t.task_id, demand=with_driver(t.demand, driver_cpus), node_ids=a.node_ids)
            for t in active if (a := t.latest_attempt) is not None and not a.ended]
    return [*held, *releasing]


def ledger_capacity(nodes: Sequence[NodeCapacity], held: Sequence[Commitment], *, now: float,
                    seen_since: Mapping[str, float] | None = None, settle_s: float = 0.0) -> Capacity:
    """The nodes as the policy may use them: free = min(Ray's free, total - committed);
    a node not yet settled since it joined (``seen_since``; None: all settled) has none."""
    ready = None if seen_since is None else ready_nodes(seen_since, nodes, now, settle_s)
    return Capacity(nodes=tuple(
        msgspec.structs.replace(n.node, free_gpus=n.free_gpus, free_cpus=n.free_cpus)
        for n in admissible(nodes, held, ready)))


def with_driver(demand: Demand, driver_cpus: float) -> Demand:
    return msgspec.structs.replace(demand, cpus_per_node=demand.cpus_per_node + driver_cpus)


class QueueMemo:
    """The policy's entries (``QueuedTask``, ``RunningTask``) by task id, with what they were
    made from: an entry is made again only when its task's view changed (views are
    immutable: a new one is a change), the run-time history gained a run, or (running) it
    settled. A reactor or a simulation builds them every turn for thousands of tasks."""

    def __init__(self) -> None:
        self.queued: dict[str, tuple[TaskView, int, float, QueuedTask]] = {}
        self.running: dict[str, tuple[TaskView, int, float, bool, RunningTask]] = {}

    def queued_entry(self, t: TaskView, history: RuntimeHistory, default: float, driver_cpus: float) -> QueuedTask:
        hit = self.queued.get(t.task_id)
        if hit is not None and hit[0] is t and hit[1] == history.version and hit[2] == driver_cpus:
            return hit[3]
        q = QueuedTask(task_id=t.task_id, demand=with_driver(t.demand, driver_cpus), seq=t.seq,
                       priority=t.priority, user=t.user, next_run_at=t.next_run_at,
                       estimate_s=history.estimate(t, default)[0], limited=t.time_limit_s is not None,
                       preempting_since=t.preempting_since)
        self.queued[t.task_id] = (t, history.version, driver_cpus, q)
        return q

    def running_entry(self, t: TaskView, history: RuntimeHistory, default: float, driver_cpus: float,
                      now: float) -> RunningTask:
        settled = _settled(t, now)
        hit = self.running.get(t.task_id)
        if (hit is not None and hit[0] is t and hit[1] == history.version and hit[2] == driver_cpus
                and hit[3] == settled and t.latest_attempt is not None):  # (no attempt: it began "now")
            return hit[4]
        began = _began(t, now)
        r = RunningTask(task_id=t.task_id, demand=with_driver(t.demand, driver_cpus), user=t.user,
                        node_ids=t.latest_attempt.node_ids if t.latest_attempt is not None else (),
                        expected_end=began + history.estimate(t, default)[0], priority=t.priority,
                        preemptible=t.preemptible, stopping=_stopping(t), started_at=began, settled=settled)
        self.running[t.task_id] = (t, history.version, driver_cpus, settled, r)
        return r

    def keep(self, waiting: int, active: int) -> None:
        """Forget the entries of tasks that left, now and then (not every call)."""
        if len(self.queued) > 2 * waiting + 1024:
            self.queued = {}
        if len(self.running) > 2 * active + 1024:
            self.running = {}


def policy_inputs(
    *,
    waiting: Sequence[TaskView],
    active: Sequence[TaskView],
    capacity: Sequence[NodeCapacity] | None,
    now: float,
    config: SchedulerConfig,
    driver_cpus: float = 0.0,
    runtimes: RuntimeHistory | None = None,
    releasing: Sequence[Commitment] = (),
    seen_since: Mapping[str, float] | None = None,
    made: QueueMemo | None = None,
) -> tuple[list[QueuedTask], list[RunningTask], Capacity | None]:
    """The policy's view of the tasks and the cluster: what ``plan_admissions`` decides on,
    and what ETAs (``argus.scheduler.eta``) run forward from. ``capacity``: Ray's last
    observation (None: unknown); ``releasing``: ended attempts not yet seen given back;
    ``seen_since``: when each node's unbroken run of observations began (None: every
    node admits); ``made``: the queue entries of an earlier call, reused where the task
    and its estimate are unchanged (a reactor or a simulation calls this every turn)."""
    history = runtimes or RuntimeHistory()
    default = config.default_runtime_s
    snapshot = None if capacity is None else ledger_capacity(
        capacity, commitments(active, driver_cpus, releasing), now=now, seen_since=seen_since, settle_s=config.node_settle_s)
    memo = made if made is not None else QueueMemo()
    queue = [memo.queued_entry(t, history, default, driver_cpus) for t in waiting]
    running = [memo.running_entry(t, history, default, driver_cpus, now) for t in active]
    memo.keep(len(waiting), len(active))
    return queue, running, snapshot


def settles_at(task: TaskView) -> float | None:
    """When the task's running attempt may be preempted (seen running for ``SETTLE_S``);
    None: it is not running."""
    attempt = task.latest_attempt
    if attempt is None or attempt.ray_status != "RUNNING":
        return None
    seen = attempt.running_seen_at or attempt.started_at
    return None if seen is None else seen + SETTLE_S


def _settled(task: TaskView, now: float) -> bool:
    at = settles_at(task)
    return at is not None and now >= at


def _stopping(task: TaskView) -> bool:
    """Its Ray job is being stopped (preempted, time limit, watchdog, cancel)."""
    attempt = task.latest_attempt
    return task.state is TaskState.CANCELING or (attempt is not None and bool(attempt.stop_reason))


def _began(task: TaskView, now: float) -> float:
    """When the task's current attempt began, as far as the log knows."""
    attempt = task.latest_attempt
    if attempt is None:
        return now
    return attempt.started_at or attempt.submitted_at or attempt.decided_at

"""The one decision core of admission: (what the log says, what Ray was seen to have, now)
→ which tasks start where, which wait and why, which are stopped for whom.

The reactor calls it every turn with the state it folded from the log and the cluster it
has just observed; ``argus sim`` calls it with the state it folded from its own events and
its fake cluster on a virtual clock. Pure: no database, no clock, no Ray. The policy's view
is built in ``argus.scheduler.inputs`` (the ledger's capacity, the tasks), the decisions
come from ``argus.scheduler.policy``, and are sorted here into what the caller does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Generic

import msgspec

from argus.config import SchedulerConfig
from argus.events import NodeCapacity
from argus.scheduler.inputs import QueueMemo, policy_inputs
from argus.scheduler.ledger import Commitment
from argus.scheduler.model import Admit, Defer, PolicyConfig, Preempt, QueuedTask, RunningTask
from argus.scheduler.policy import decide, ends_matter
from argus.scheduler.task import TaskT
from argus.scheduler.history import RuntimeHistory

__all__ = ["AdmissionPlan", "Observed", "plan_admissions", "plan_expires_at", "waited_spans"]


class Observed(msgspec.Struct, frozen=True, kw_only=True):
    """What the caller knows of the cluster beyond the log's tasks and Ray's count: when each
    node's unbroken run of observations began (None: every node admits); ended attempts
    no observation has been recorded after yet (the ledger still holds them)."""

    seen_since: Mapping[str, float] | None = None
    releasing: Sequence[Commitment] = ()
    made: QueueMemo | None = None  # the caller's queue entries from earlier plans (reused)


class AdmissionPlan(msgspec.Struct, Generic[TaskT], frozen=True):
    """What ``plan_admissions`` decided, on the caller's own tasks."""

    admitted: list[TaskT]
    deferrals: list[tuple[TaskT, Defer]]
    notes: dict[str, str] = {}  # task id -> why an admitted task may pass a reservation
    preemptions: list[tuple[TaskT, Preempt]] = []  # running tasks to stop, and for whom
    expires_at: float = float("inf")  # plan_expires_at: until then the same inputs give this plan
    placed: dict[str, tuple[str, ...]] = {}  # task id -> the nodes its gang was admitted onto


def plan_expires_at(queue: Sequence[QueuedTask], running: Sequence[RunningTask], now: float,
                    observed: Observed | None = None, settle_s: float = 0.0, ends: bool = True,
                    waited: Sequence[float] = ()) -> float:
    """The first instant after ``now`` at which the clock alone could change a plan made
    now: a retry's backoff ends, a node settles, a running task may be preempted from then
    on, or (``ends``: the policy reserves, or weighs what running tasks have left) a
    running task passes its expected end, or a task has waited one of the ``waited``
    spans (a guard or a keep-off ends then). Until then, the same inputs give the same plan."""
    # C-level maps first: on a busy cluster this runs over thousands of entries per plan,
    # and only a few have an instant ahead.
    instants = [at for at in filter(None, map(_NEXT_RUN, queue)) if at > now]
    instants += [at for at in filter(None, map(_SETTLES, running)) if at > now]
    if ends:
        instants += [at for at in filter(None, map(_ENDS, running)) if at > now]
    for span in waited:
        instants += [at for since in filter(None, map(_SINCE, queue)) if (at := since + span) > now]
    if observed is not None and observed.seen_since is not None:
        instants += [at for since in observed.seen_since.values() if (at := since + settle_s) > now]
    return min(instants, default=float("inf"))


_NEXT_RUN = attrgetter("next_run_at")
_SETTLES = attrgetter("settles_at")
_SINCE = attrgetter("waiting_since")
_ENDS = attrgetter("expected_end")


def waited_spans(config: SchedulerConfig) -> list[float]:
    """How long a wait changes a plan by itself: the delay before a task may evict anyone
    (with preemption), or, without, ``move_after_s``, after which a task that keeps off the
    rare nodes may take one (priority and fairshare: argus.scheduler.stages)."""
    if config.preemption:
        spans = {config.evict_after_s, *(g.evict_after_s for g in config.user_guards.values() if g.evict_after_s)}
    else:
        spans = {config.move_after_s} if config.policy in ("priority", "fairshare") else set()
    return sorted(s for s in spans if s > 0)


def plan_admissions(
    *,
    waiting: Sequence[TaskT],
    active: Sequence[TaskT],
    capacity: Sequence[NodeCapacity] | None,
    now: float,
    config: SchedulerConfig,
    driver_cpus: float = 0.0,
    runtimes: RuntimeHistory | None = None,
    usage: dict[str, float] | None = None,
    observed: Observed | None = None,
    waits: bool = True,
    gpu_caps: Mapping[str, float] | None = None,
) -> AdmissionPlan[TaskT]:
    """Run the configured policy over the waiting tasks (in its ``queue_order``) and sort its decisions
    into admissions and deferrals. ``driver_cpus`` (the job driver's ``entrypoint_num_cpus``)
    is added to every task's per-node CPUs: the driver lands on one of the task's nodes,
    and which one is Ray's choice. ``runtimes``: the history behind each task's expected
    run time (its time limit first; ``config.default_runtime_s`` last). ``observed``: when
    ``capacity`` was taken, the nodes' settling and the ledger's releases (None: a bare
    count, every node settled: ETAs and tests). ``waits`` False: deferrals only for tasks
    that are or become ``preempting`` (``PolicyConfig.waits``: the simulator). ``gpu_caps``:
    the GPUs each capped user's tasks may hold at once (``PolicyConfig.gpu_caps``)."""
    seen = observed or Observed()
    queue, running, snapshot = policy_inputs(
        waiting=waiting, active=active, capacity=capacity, now=now, config=config, driver_cpus=driver_cpus,
        runtimes=runtimes, releasing=seen.releasing, seen_since=seen.seen_since, made=seen.made)
    policy_config = PolicyConfig.from_scheduler(config, usage=usage or {}, waits=waits, gpu_caps=dict(gpu_caps or {}))
    decisions = decide(queue, running, snapshot, now, policy_config)
    admitted: list[TaskT] = []
    deferrals: list[tuple[TaskT, Defer]] = []
    notes: dict[str, str] = {}
    preemptions: list[tuple[TaskT, Preempt]] = []
    placed: dict[str, tuple[str, ...]] = {}
    # Made only when there is something to sort: in a simulation most plans decide nothing.
    by_id = {t.task_id: t for t in waiting} if decisions else {}
    victims = {t.task_id: t for t in active} if any(isinstance(d, Preempt) for d in decisions) else {}
    for decision in decisions:
        if isinstance(decision, Preempt):
            preemptions.append((victims[decision.task_id], decision))
            continue
        task = by_id[decision.task_id]
        if isinstance(decision, Admit):
            admitted.append(task)
            placed[task.task_id] = decision.node_ids
            if decision.note:
                notes[task.task_id] = decision.note
        elif isinstance(decision, Defer) and decision.reason != "retry_backoff":
            # A retry's wait is already recorded by RetryScheduled.
            deferrals.append((task, decision))
    expires = plan_expires_at(queue, running, now, seen, config.node_settle_s, ends_matter(config.policy),
                              waited_spans(config))
    return AdmissionPlan(admitted=admitted, deferrals=deferrals, notes=notes, expires_at=expires,
                         preemptions=preemptions, placed=placed)



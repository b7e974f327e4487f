"""Admission policy: which queued tasks may start now, and why the others may not.

``decide(queue, running, capacity, now, config)`` is pure and deterministic: the same
inputs give the same decisions, so a replay of the log reproduces every admission.

Rules (docs/design.md §5):
- A task is admitted only when its whole gang fits *per node*: ``nnodes`` distinct alive
  worker nodes, each with ≥ ``n_gpus_per_node`` free GPUs and ≥ ``cpus_per_node`` free
  CPUs, after subtracting what earlier admissions of the same pass took (verl itself
  checks only the total and then hangs in its placement group when it is fragmented).
- Among the nodes a gang fits, best-fit (fewest free GPUs left), placed off the nodes that
  are every home a waiting task's shape has, where it fits elsewhere (``Pool.spared``).
- ``max_running_tasks`` caps concurrency (and ``max_running_per_user`` per user, if set).
- Unknown capacity (Ray unreachable) admits nothing: ``capacity_unknown``.
- Tasks whose ``next_run_at`` is in the future are skipped (``retry_backoff``); they do not
  hold their place in line while they wait.
- **Strict FIFO by default, with head-of-line blocking**: when the first eligible task does
  not fit, no task behind it is admitted even if it would fit (``blocked_by_head``) — big
  tasks are never starved by a stream of small ones. ``backfill=True`` lets smaller tasks
  pass a blocked head (better utilisation, but the head may wait indefinitely).
- A gang the alive worker nodes could not hold even if they were idle (nodes left, or
  are smaller than the one the task was accepted for) waits with ``never_fits`` and
  holds no one back; it is considered again on every pass, so it starts once big enough
  nodes return.
- Policy ``priority``: higher ``priority`` first, FIFO within a priority, with
  ``reserve-backfill``'s reservation for the first task that does not fit (strict order
  left the cluster draining behind a head that fit nowhere yet: docs/scheduling.md).
- The order a policy considers tasks in is ``argus.scheduler.order.queue_order``: the
  same function orders the queue users are shown.

Cost: one pass is O(queue) plus, per distinct demand shape per admission, a walk of the
nodes in best-fit order from the first with enough free GPUs (``argus.scheduler.freeindex``,
kept in order as admissions take resources); placement results are cached by shape and
dropped on each admission, and once nothing more can be admitted the rest of the queue gets
a shared, preformatted deferral.

The pass itself, stage by stage (eligibility, fit, reserve or backfill, preempt), is
``argus.scheduler.stages``; the policies here give it the queue in their order and, to
preempt, who may be stopped for whom.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from operator import attrgetter

import msgspec

from argus.scheduler.fairshare import FairShares, fair_pass
from argus.scheduler.model import (
    Admit, Capacity, Decision, Defer, PolicyConfig, Preempt, QueuedTask, Reason, RunningTask,
)
from argus.scheduler.order import ORDERS, queue_order
from argus.scheduler.placement import fmt_amount
from argus.scheduler.stages import run_pass

__all__ = [
    "Admit",
    "Capacity",
    "Decision",
    "Defer",
    "POLICIES",
    "Preempt",
    "PolicyConfig",
    "QueuedTask",
    "Reason",
    "RunningTask",
    "decide",
    "ends_matter",
    "fmt_amount",
    "register_policy",
]


_RESUME_FIRST = attrgetter("resume_first")

PolicyFn = Callable[
    [Sequence[QueuedTask], Sequence[RunningTask], "Capacity | None", float, PolicyConfig], list[Decision]
]
POLICIES: dict[str, PolicyFn] = {}
_ENDS_IGNORED: set[str] = set()  # policies whose decisions never depend on expected ends


def register_policy(name: str, *, ends_matter: bool = True) -> Callable[[PolicyFn], PolicyFn]:
    """Register a policy function; it receives the queue already in its order
    (``argus.scheduler.order.register_order`` must name that order first).
    ``ends_matter``: the running tasks' expected ends can change its decisions (a
    reservation, a fair order), so a plan is made again when one of them passes."""

    def add(fn: PolicyFn) -> PolicyFn:
        if name not in ORDERS:
            raise ValueError(f"policy {name!r} has no queue order: register_order({name!r}, key) first")
        POLICIES[name] = fn
        if ends_matter:
            _ENDS_IGNORED.discard(name)
        else:
            _ENDS_IGNORED.add(name)
        return fn

    return add


def ends_matter(policy: str) -> bool:
    """Whether ``policy``'s decisions can change when a running task passes its expected
    end: not for those that neither reserve nor weigh what running tasks have left
    (a plan made again at every such instant was a third of a simulation's plans)."""
    return policy not in _ENDS_IGNORED


def decide(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
           now: float, config: PolicyConfig) -> list[Decision]:
    """Run the policy named in ``config`` over ``queue`` in that policy's order
    (``queue_order``); KeyError for an unknown name."""
    policy = POLICIES[config.policy]
    return policy(resumed_first(queue_order(config.policy, queue)), running, capacity, now, config)


def resumed_first(queue: Sequence[QueuedTask]) -> list[QueuedTask]:
    """Tasks the operator interrupted (``resume_first``) before the others, each part in the
    order it had: a planned restart must not cost a run its place (docs/runs.md)."""
    if not any(map(_RESUME_FIRST, queue)):  # (C-level: asked of every waiting task, every pass)
        return list(queue)
    return [t for t in queue if t.resume_first] + [t for t in queue if not t.resume_first]


@register_policy("fifo", ends_matter=False)
def fifo(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
         now: float, config: PolicyConfig) -> list[Decision]:
    """Submission order; priorities are ignored (the order is ``queue_order``'s)."""
    return run_pass(queue, running, capacity, now, config)


@register_policy("fifo-backfill", ends_matter=False)
def fifo_backfill(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
                  now: float, config: PolicyConfig) -> list[Decision]:
    """Submission order, and any task that fits may pass a head that does not (better use
    of GPUs; the head may wait for ever: see docs/scheduling.md)."""
    return run_pass(queue, running, capacity, now, msgspec.structs.replace(config, backfill=True))


@register_policy("reserve-backfill")
def reserve_backfill(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
                     now: float, config: PolicyConfig) -> list[Decision]:
    """Submission order; the first task that does not fit gets a reservation (when and
    where its gang will fit, from the running tasks' expected ends) and a task behind it
    starts only if that cannot delay it (EASY backfilling, Slurm's backfill)."""
    return run_pass(queue, running, capacity, now, msgspec.structs.replace(config, reserve=True))


@register_policy("priority")
def priority(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
             now: float, config: PolicyConfig) -> list[Decision]:
    """Higher ``priority`` first; FIFO within a priority (the order is ``queue_order``'s),
    with reservations and backfill as ``reserve-backfill``: the first task that does not
    fit is reserved for, whatever its priority, so a later task of higher priority may
    take its place (Slurm's priority order under its backfill scheduler). With
    ``preemption``, a task that does not fit first stops preemptible tasks of lower
    priority; the room it makes is the reservation."""
    return run_pass(queue, running, capacity, now, msgspec.structs.replace(config, reserve=True), _ByPriority())


class _ByPriority:
    """A preemptible task of lower priority may be stopped for a higher one."""

    def rule(self, t: QueuedTask) -> Callable[[RunningTask], str | None]:
        return lambda r: "priority" if r.priority < t.priority else None

    def granted(self, t: QueuedTask, victims: Sequence[RunningTask]) -> None:
        pass

    def same_rule(self, t: QueuedTask) -> Hashable:
        return t.priority

    def alike(self, t: QueuedTask) -> Hashable:
        return t.priority


@register_policy("fairshare")
def fairshare(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
              now: float, config: PolicyConfig) -> list[Decision]:
    """Users by recent GPU use per share, quotas first (argus.scheduler.fairshare), with
    reservations and backfill as ``reserve-backfill``. With ``preemption``, a task that
    does not fit stops preemptible tasks of users beyond their quota (for a user within
    theirs) or beyond their fair share (for one within theirs)."""
    total = sum(n.total_gpus for n in capacity.nodes) if capacity is not None else None
    line = fair_pass(queue, running, now, config, total, in_line_order=True)
    ordered = resumed_first(line.order)
    return run_pass(ordered, running, capacity, now, msgspec.structs.replace(config, reserve=True),
                    _ByShare(line.shares))


class _ByShare:
    """A preemptible task of a user beyond its quota may be stopped for a user within its
    own; of a user beyond its fair share, for a user within its own. What each user holds
    counts this pass's admissions and stops, so a user is never granted past its share in
    one pass (two users would then stop each other's tasks in turn)."""

    def __init__(self, shares: FairShares) -> None:
        self.shares = shares
        # same_rule's answer per user until a grant changes it: asked once per waiting task
        # that does not fit, which on a full cluster is every task of the pass.
        self._same: dict[str, tuple[str, float]] = {}
        self._grants = 0  # grants so far: each may change who is over a share

    def rule(self, t: QueuedTask) -> Callable[[RunningTask], str | None]:
        shares, gpus = self.shares, t.demand.total_gpus
        in_quota, in_fair = shares.under_quota(t.user, gpus), shares.within_fair(t.user, gpus)

        def outranks(r: RunningTask) -> str | None:
            if r.user == t.user:
                return None
            if in_quota and shares.over_quota(r.user):
                return "quota"
            if in_fair and shares.over_fair(r.user):
                return "fair_share"
            return None

        return outranks

    def same_rule(self, t: QueuedTask) -> Hashable:
        same = self._same.get(t.user)
        if same is None:  # a grant changes what the user may claim
            same = self._same[t.user] = (t.user, self.shares.held.get(t.user, 0.0))
        return same

    def alike(self, t: QueuedTask) -> Hashable:
        # Who may be stopped depends on the user only through these two: a user within
        # their quota (or fair share) is not beyond it, so their own tasks are never among
        # the victims either way. Users alike share one attempt per shape, not one each.
        gpus = t.demand.total_gpus
        return self.shares.under_quota(t.user, gpus), self.shares.within_fair(t.user, gpus), self._grants

    def granted(self, t: QueuedTask, victims: Sequence[RunningTask]) -> None:
        self._grants += 1
        self.shares.grant(t.user, t.demand.total_gpus)
        self._same.pop(t.user, None)
        for r in victims:
            self.shares.grant(r.user, -r.demand.total_gpus)
            self._same.pop(r.user, None)

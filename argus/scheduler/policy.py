"""Admission policy: which queued tasks may start now, and why the others may not.

``decide(queue, running, capacity, now, config)`` is pure and deterministic: the same
inputs give the same decisions, so a replay of the log reproduces every admission.

Rules (DESIGN.md §5):
- A task is admitted only when its whole gang fits *per node*: ``nnodes`` distinct alive
  worker nodes, each with ≥ ``n_gpus_per_node`` free GPUs and ≥ ``cpus_per_node`` free
  CPUs, after subtracting what earlier admissions of the same pass took (verl itself
  checks only the total and then hangs in its placement group when it is fragmented).
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
- Policy ``priority``: higher ``priority`` first, FIFO within a priority.
- The order a policy considers tasks in is ``argus.scheduler.order.queue_order``: the
  same function orders the queue users are shown.

Cost: one pass is O(queue) plus O(nodes) per distinct demand shape per admission; placement
results are cached by shape and dropped on each admission, and once nothing more can be
admitted the rest of the queue gets a shared, preformatted deferral.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

import msgspec

from argus.scheduler.fairshare import FairShares, fair_order, fair_shares
from argus.scheduler.fragmentation import MIX_SAMPLE, ShapeMix
from argus.scheduler.model import (
    Admit, Capacity, Decision, Defer, PolicyConfig, Preempt, QueuedTask, Reason, RunningTask,
)
from argus.scheduler.order import ORDERS, queue_order
from argus.scheduler.placement import NOT_ASKED, Pool, fmt_amount, needs
from argus.scheduler.preempt import RoomPlanner
from argus.scheduler.reserve import Ending, Reservation, expected_end, fmt_clock

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
    "fmt_amount",
    "register_policy",
]


PolicyFn = Callable[
    [Sequence[QueuedTask], Sequence[RunningTask], "Capacity | None", float, PolicyConfig], list[Decision]
]
POLICIES: dict[str, PolicyFn] = {}


def register_policy(name: str) -> Callable[[PolicyFn], PolicyFn]:
    """Register a policy function; it receives the queue already in its order
    (``argus.scheduler.order.register_order`` must name that order first)."""

    def add(fn: PolicyFn) -> PolicyFn:
        if name not in ORDERS:
            raise ValueError(f"policy {name!r} has no queue order: register_order({name!r}, key) first")
        POLICIES[name] = fn
        return fn

    return add


def decide(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
           now: float, config: PolicyConfig) -> list[Decision]:
    """Run the policy named in ``config`` over ``queue`` in that policy's order
    (``queue_order``); KeyError for an unknown name."""
    policy = POLICIES[config.policy]
    return policy(queue_order(config.policy, queue), running, capacity, now, config)


_BLOCKED_MSG = "waiting in line: an earlier task that does not fit yet is at the head of the FIFO queue"
_UNKNOWN_MSG = "cluster capacity is unknown (Ray unreachable); nothing is admitted until it is observed"


class Outranks(Protocol):
    """Who may be stopped for whom, as a policy sees it (``priority``, ``fairshare``)."""

    def rule(self, t: QueuedTask) -> Callable[[RunningTask], str | None]:
        """For waiting ``t``: why a running task may be stopped for it, or None."""

    def granted(self, t: QueuedTask, victims: Sequence[RunningTask]) -> None:
        """``t`` was admitted, or got room by stopping ``victims``, in this pass."""

    def same_rule(self, t: QueuedTask) -> Hashable:
        """Tasks with equal values here (and one shape) find the same room, or none."""

    def alike(self, t: QueuedTask) -> Hashable:
        """Coarser than ``same_rule`` (asked only when it misses): tasks with equal values
        here (and one shape) may stop the same running tasks, as things stand in the pass."""


def _shape_mix(queue: Sequence[QueuedTask], running: Sequence[RunningTask], config: PolicyConfig) -> ShapeMix:
    """The shapes placement should leave room for: the configured mix, else what waits at
    the front of the line and what runs."""
    if config.shape_mix:
        return ShapeMix(config.shape_mix)
    return ShapeMix.of([t.demand for t in queue[:MIX_SAMPLE]] + [r.demand for r in running])


def _run(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
         now: float, config: PolicyConfig, outranks: Outranks | None = None) -> list[Decision]:
    out: list[Decision] = []
    append = out.append
    if capacity is None:
        for t in queue:
            if t.next_run_at is not None and t.next_run_at > now:
                append(Defer(task_id=t.task_id, reason=Reason.RETRY_BACKOFF,
                             message=f"retry not before t={t.next_run_at:.0f} ({t.next_run_at - now:.0f}s)"))
            else:
                append(Defer(task_id=t.task_id, reason=Reason.CAPACITY_UNKNOWN, message=_UNKNOWN_MSG))
        return out

    pool = Pool(capacity.nodes, running, mix=(lambda: _shape_mix(queue, running, config))
                if config.placement == "fragmentation" else None)
    n_running = len(running)
    per_user: dict[str, int] = {}
    if config.max_running_per_user > 0:
        for r in running:
            per_user[r.user] = per_user.get(r.user, 0) + 1
    explained: dict[tuple[int, int, float], Defer] = {}
    blocked = False  # strict FIFO: the head did not fit
    backfill = config.backfill or config.reserve
    reserved: Reservation | None = None
    endings: list[Ending] = []
    if config.reserve:
        index = {nid: i for i, nid in enumerate(pool.ids)}
        endings = [Ending(at=expected_end(r.expected_end, r.started_at, now, config.default_runtime_s),
                          demand=r.demand, nodes=tuple(index[n] for n in r.node_ids if n in index))
                   for r in running]
    planner: RoomPlanner | None = None  # made when a task first needs room (preemption)
    no_room: set[tuple[tuple[int, int, float], Hashable]] = set()
    no_room_alike: set[tuple[tuple[int, int, float], Hashable]] = set()
    full_msg = f"{config.max_running_tasks} task(s) already running (max_running_tasks)"
    # Read once, not per task: on a full cluster every one of 10,000 tasks reaches the
    # checks below, and attribute lookups were a measurable part of the pass.
    max_running, user_limit, reserve = config.max_running_tasks, config.max_running_per_user, config.reserve
    never_known = pool.never_known
    same_rule = outranks.same_rule if outranks is not None and config.preemption else None
    for t in queue:
        if t.next_run_at is not None and t.next_run_at > now:
            append(Defer(task_id=t.task_id, reason=Reason.RETRY_BACKOFF,
                         message=f"retry not before t={t.next_run_at:.0f} ({t.next_run_at - now:.0f}s)"))
            continue
        d = t.demand
        key = (d.nnodes, d.n_gpus_per_node, d.cpus_per_node)
        never = never_known.get(key, NOT_ASKED)
        if never is NOT_ASKED:
            never = pool.never_fits(d, key)
        if never is not None:  # waiting in line for it would only block everyone behind it
            append(Defer(task_id=t.task_id, reason=never.reason, message=never.message,
                         free_gpus_per_node=never.free_gpus_per_node))
            continue
        if blocked:
            append(Defer(task_id=t.task_id, reason=Reason.BLOCKED_BY_HEAD, message=_BLOCKED_MSG,
                         free_gpus_per_node=pool.free_gpus()))
            continue
        if n_running >= max_running:
            append(Defer(task_id=t.task_id, reason=Reason.MAX_RUNNING, message=full_msg))
            continue
        if user_limit > 0 and per_user.get(t.user, 0) >= user_limit:
            append(Defer(task_id=t.task_id, reason=Reason.USER_LIMIT, message=(
                f"user {t.user!r} already runs {per_user[t.user]} task(s) "
                f"(max_running_per_user={user_limit})")))
            continue
        why = explained.get(key)
        if why is None:
            picked = pool.place(d)
            note = ""
            if picked is not None and reserved is not None:
                picked, note, behind = _backfill(t, picked, pool, reserved, now, config)
                if behind is not None:
                    append(behind)
                    continue
            if picked is not None:
                if config.reserve:
                    endings.append(Ending(at=now + (t.estimate_s or config.default_runtime_s), demand=d, nodes=picked))
                pool.take(picked, d)
                if planner is not None:
                    planner.admitted(picked, d)
                if outranks is not None:
                    outranks.granted(t, ())
                n_running += 1
                if config.max_running_per_user > 0:
                    per_user[t.user] = per_user.get(t.user, 0) + 1
                append(Admit(task_id=t.task_id, node_ids=tuple(pool.ids[i] for i in picked), note=note))
                continue
            # Explained once per shape and pass: the message shows the free resources at the
            # moment the shape was first found not to fit (they only shrink afterwards).
            why = explained[key] = pool.explain(d)
            seen_before = False
        else:
            seen_before = True
        if same_rule is not None and (key, same_rule(t)) not in no_room:
            if planner is None:
                planner = RoomPlanner(running, ids=pool.ids, free_gpus=pool.gpus, free_cpus=pool.cpus,
                                      total_gpus=[g for g, _ in pool.totals], total_cpus=[c for _, c in pool.totals])
            assert outranks is not None  # same_rule is its method
            alike = (key, outranks.alike(t))
            room = None if alike in no_room_alike else _make_room(t, why, planner, outranks.rule(t), config)
            if room is None:
                no_room.add((key, same_rule(t)))  # its like would find none either
                no_room_alike.add(alike)
            else:
                defer, preempts, room_nodes = room
                outranks.granted(t, [r for r in running if r.task_id in {p.task_id for p in preempts}])
                out.extend(preempts)
                append(defer)
                if backfill and reserved is None:  # the room is a reservation: others pass only if they cannot delay it
                    reserved = Reservation(task_id=t.task_id, start=now + config.preempt_grace_s, nodes=room_nodes)
                elif not backfill:
                    blocked = True
                continue
        if seen_before and (reserved is not None or not reserve):
            # this shape already failed in this pass: it still fails
            append(Defer(task_id=t.task_id, reason=why.reason, message=why.message,
                         free_gpus_per_node=why.free_gpus_per_node))
            if not backfill:
                blocked = True
            continue
        if reserve and reserved is None:  # the first that does not fit: reserve for it
            reserved = pool.reservation(t, endings, now)
            if reserved is not None:
                nodes = tuple(pool.ids[i] for i in reserved.nodes)
                append(Defer(task_id=t.task_id, reason=why.reason, free_gpus_per_node=why.free_gpus_per_node,
                             message=f"{why.message}; reserved nodes {', '.join(nodes)} from ~{fmt_clock(reserved.start)}",
                             reserved_from=reserved.start, reserved_nodes=nodes))
                continue
        append(Defer(task_id=t.task_id, reason=why.reason, message=why.message,
                     free_gpus_per_node=why.free_gpus_per_node))
        if not backfill:
            blocked = True
    return out


def _make_room(t: QueuedTask, why: Defer, planner: RoomPlanner, outranks: Callable[[RunningTask], str | None],
               config: PolicyConfig) -> tuple[Defer, list[Preempt], tuple[int, ...]] | None:
    """Stop preemptible tasks ``outranks`` allows so ``t`` fits (argus.scheduler.preempt):
    its deferral, the preemptions, and the nodes it will have. None: no room to make."""
    room = planner.make_room(t.demand, outranks)
    if room is None:
        return None
    if not room.victims:  # stops under way make it fit: wait for them
        message = f"{why.message}; room is being made: preempted task(s) are stopping"
    else:
        message = (f"{why.message}; making room: preempting "
                   + ", ".join(f"{r.task_id} ({r.user})" for r, _ in room.victims))
    defer = Defer(task_id=t.task_id, reason=Reason.PREEMPTING, message=message,
                  free_gpus_per_node=why.free_gpus_per_node)
    preempts = [Preempt(task_id=r.task_id, for_task=t.task_id, for_user=t.user, reason=reason,
                        message=_preempt_message(t, r, reason, config)) for r, reason in room.victims]
    return defer, preempts, room.nodes


def _preempt_message(t: QueuedTask, r: RunningTask, reason: str, config: PolicyConfig) -> str:
    why = {"priority": f"its priority {t.priority} is higher than {r.priority}",
           "quota": f"{t.user!r} is within its quota of {fmt_amount(config.quotas.get(t.user, 0))} GPUs "
                    f"and {r.user!r} borrows beyond its own",
           "fair_share": f"{t.user!r} is under its fair share and {r.user!r} over its own"}.get(reason, reason)
    return (f"preempted to make room for {t.task_id} ({t.user}, {needs(t.demand)}): {why}; "
            f"back to its place in line, to resume from its checkpoints")


def _backfill(t: QueuedTask, picked: tuple[int, ...], pool: Pool, reserved: Reservation, now: float,
              config: PolicyConfig) -> tuple[tuple[int, ...] | None, str, Defer | None]:
    """May ``t``, which fits now on ``picked``, start without delaying ``reserved``? Yes if
    it fits on nodes the reservation does not need, or if its time limit ends it before
    the reservation starts. A run time that is only an estimate (history, the default)
    does not let it onto the reservation's nodes: estimates run over, each overrun moved
    the reservation later, and in the trace a gang so passed again and again waited for
    days (docs/scheduling.md). Returns its nodes and why, or the deferral that says why not."""
    avoid = frozenset(reserved.nodes)
    elsewhere = picked if avoid.isdisjoint(picked) else pool.place_avoiding(t.demand, avoid)
    if elsewhere is not None:
        return elsewhere, f"backfilled on nodes the reservation of {reserved.task_id} does not need", None
    estimate = t.estimate_s or config.default_runtime_s
    if t.limited and now + estimate <= reserved.start:
        return picked, (f"backfilled: its time limit ends it by ~{fmt_clock(now + estimate)}, before the "
                        f"reservation of {reserved.task_id} from ~{fmt_clock(reserved.start)}"), None
    # No times in these messages: they would change with the clock, and be recorded again,
    # for every task behind the reservation.
    nodes = ", ".join(pool.ids[i] for i in reserved.nodes)
    why = ("its time limit would still run" if t.limited else
           "without a time_limit its run time is only an estimate (set one to let it start before the "
           "reservation when it ends in time), and it would run")
    return None, "", Defer(task_id=t.task_id, reason=Reason.BEHIND_RESERVATION, message=(
        f"{needs(t.demand)}; fits now, but only on nodes reserved for {reserved.task_id} "
        f"({nodes}): {why} on them when that reservation starts"))


@register_policy("fifo")
def fifo(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
         now: float, config: PolicyConfig) -> list[Decision]:
    """Submission order; priorities are ignored (the order is ``queue_order``'s)."""
    return _run(queue, running, capacity, now, config)


@register_policy("fifo-backfill")
def fifo_backfill(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
                  now: float, config: PolicyConfig) -> list[Decision]:
    """Submission order, and any task that fits may pass a head that does not (better use
    of GPUs; the head may wait for ever: see docs/scheduling.md)."""
    return _run(queue, running, capacity, now, msgspec.structs.replace(config, backfill=True))


@register_policy("reserve-backfill")
def reserve_backfill(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
                     now: float, config: PolicyConfig) -> list[Decision]:
    """Submission order; the first task that does not fit gets a reservation (when and
    where its gang will fit, from the running tasks' expected ends) and a task behind it
    starts only if that cannot delay it (EASY backfilling, Slurm's backfill)."""
    return _run(queue, running, capacity, now, msgspec.structs.replace(config, reserve=True))


@register_policy("priority")
def priority(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
             now: float, config: PolicyConfig) -> list[Decision]:
    """Higher ``priority`` first; FIFO within a priority (the order is ``queue_order``'s).
    With ``preemption``, a head that does not fit stops preemptible tasks of lower priority."""

    return _run(queue, running, capacity, now, config, _ByPriority())


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
    total = sum(n.total_gpus for n in capacity.nodes) if capacity is not None else 0.0
    shares = fair_shares(queue, running, total, config.shares, config.quotas)
    ordered = fair_order(queue, running, now, usage=config.usage, shares=config.shares, quotas=config.quotas,
                         default_runtime_s=config.default_runtime_s,
                         fair=shares.fair if config.preemption and capacity is not None else None,
                         in_line_order=True)
    return _run(ordered, running, capacity, now, msgspec.structs.replace(config, reserve=True), _ByShare(shares))


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

"""One admission pass, stage by stage (the rules it applies: ``argus.scheduler.policy``).

Each task in the policy's order goes through the stages in turn, as Kueue separates them,
and the first that decides for it ends its turn:

1. order and eligibility: a retry's backoff, a gang that never fits, a blocked head,
   ``max_running_tasks``, the per-user limits on tasks and on GPUs held (inline in ``run_pass``' loop: every one of
   10,000 queued tasks reaches them, and a call per task was a measurable part of a pass);
2. fit: place its gang on the pool and admit it (``_Pass.fit``, ``_Pass.admit``);
3. reserve or backfill: while a reservation holds, a task that fits starts only if it
   cannot delay it (``_backfill``); the first task that does not fit gets the
   reservation, the others wait (``_Pass.reserve_or_defer``);
4. preempt: make room for a task that does not fit by stopping running tasks its policy
   outranks, or that can run elsewhere when it would wait long (``_Pass.preempt``); asked
   before 3's reservation, as a room made is one.

``_Pass`` holds what the stages share and change within the pass: the pool, the counters,
the cached explanations, the reservation, the room planner.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from operator import attrgetter
from typing import Protocol

from msgspec.structs import replace

from argus.events.catalog import Demand
from argus.scheduler.fragmentation import MIX_SAMPLE, ShapeMix
from argus.scheduler.model import (
    Admit, Capacity, Decision, Defer, PolicyConfig, Preempt, QueuedTask, Reason, RunningTask,
)
from argus.scheduler.order import arrival_only
from argus.scheduler.guards import evicts_from, max_preemptions_by_user
from argus.scheduler.per_model import ModelHolds, backfill
from argus.scheduler.placement import Pool, fmt_amount, needs
from argus.scheduler.preempt import RoomPlanner
from argus.scheduler.reserve import Ending, Endings, Reservation, fmt_clock

__all__ = ["Outranks", "run_pass"]

# From a time limit to the GPUs being free again: the stop's grace (preempt_grace_s, the
# same for every stop) plus this, for Ray to free the gang and the reactor to see it.
STOP_SLACK_S = 60.0

_BLOCKED_MSG = "waiting in line: an earlier task that does not fit yet is at the head of the FIFO queue"
_UNKNOWN_MSG = "cluster capacity is unknown (Ray unreachable); nothing is admitted until it is observed"

# (nnodes, n_gpus_per_node, cpus_per_node, gpu_types), and True for a task that keeps off
# the rare nodes (Pool.keeps_off): what placement depends on
Shape = tuple[object, ...]
_NONE: frozenset[int] = frozenset()
_DEMAND = attrgetter("demand")
_SHAPE = attrgetter("demand.nnodes", "demand.n_gpus_per_node", "demand.cpus_per_node", "demand.gpu_types")


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


def run_pass(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
             now: float, config: PolicyConfig, outranks: Outranks | None = None) -> list[Decision]:
    """A decision for each task of ``queue`` (in the policy's order), through the stages in
    turn (module docstring); ``outranks``: who may be stopped for whom, to preempt."""
    if capacity is None:
        return _capacity_unknown(queue, now)
    p = _Pass(queue, running, capacity, now, config, outranks)
    append = p.out.append
    # Read once, not per task: at 10,000 tasks, attribute lookups were a measurable part of the pass.
    pool, explained, per_user, same_rule, no_room = p.pool, p.explained, p.per_user, p.same_rule, p.no_room
    max_running, user_limit, reserve = config.max_running_tasks, config.max_running_per_user, config.reserve
    gpu_caps, held, backfill = config.gpu_caps, p.held, p.backfill
    blocked, quiet, pins = False, not config.waits, p.pins  # blocked: strict FIFO's head did not fit
    for t in queue:
        # ``quiet``: only a task that was preempting is told why it waits (leaving is news)
        told = not quiet or t.preempting_since is not None
        # 1. order and eligibility
        if t.next_run_at is not None and t.next_run_at > now:
            if told:
                append(Defer(task_id=t.task_id, reason=Reason.RETRY_BACKOFF,
                             message=f"retry not before t={t.next_run_at:.0f} ({t.next_run_at - now:.0f}s)"))
            continue
        if blocked and not told:
            if p.none_told(queue):  # nothing behind a blocked head to tell: the pass is over
                break
            continue
        d = t.demand
        key: Shape = _SHAPE(t)  # (one C-level call: every task of the queue asks)
        if pins is not None and pins(t) and pool.keeps_off(d):  # it could not be moved once it runs
            key = (*key, True)  # it may not be stopped: placed, explained, reserved for apart from its shape
        # Why its shape failed earlier in the pass (most of a long queue): then it could fit idle nodes
        why = explained.get(key)
        if why is None and (never := pool.never_fits(d, key)) is not None:  # it could not: waiting in line
            append(replace(never, task_id=t.task_id))  # for it would only block everyone behind it
            continue
        if blocked:
            append(_blocked(t, pool))
            continue
        if (p.n_running >= max_running or (user_limit > 0 and per_user.get(t.user, 0) >= user_limit) or (
                gpu_caps and t.user in gpu_caps and held.get(t.user, 0.0) + d.total_gpus > gpu_caps[t.user] + 1e-9)):
            if told:  # its own user's limits hold no one else back
                append(_limited(t, p.n_running, per_user, held, config))
            continue
        # 2. fit, asked once per shape until the shape fails (free resources only shrink)
        seen_before = why is not None
        if why is None:
            why = p.fit(t, key)
            if why is None:  # admitted, or deferred behind the reservation
                continue
        blocked = not backfill  # strict FIFO: it holds back everyone behind it, whatever stages 3-4 decide
        # 4. preempt: before 3's reservation, since the room it makes is one
        if same_rule is not None and (key, same_rule(t)) not in no_room and p.preempt(t, key, why):
            continue
        # 3. reserve or defer; inline for a shape that already failed in this pass (it still fails)
        if seen_before and (not reserve or p.reserved is not None):
            if told:
                append(replace(why, task_id=t.task_id))
            continue
        p.reserve_or_defer(t, key, why)
    return p.out


class _Pass:
    """What the stages of one pass share and change: the pool's free resources, how many
    tasks run (in all and per user), why each shape failed, the reservation, the expected
    ends it is computed from, the room planner, and the decisions so far."""

    __slots__ = ("running", "now", "config", "outranks", "out", "pool", "n_running", "per_user", "held", "explained",
                 "backfill", "reserved", "endings", "planner", "same_rule", "no_room", "no_room_alike", "releasing",
                 "behind", "behind_said", "no_start", "_none_told", "holds", "pins", "evicts")

    def __init__(self, queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity,
                 now: float, config: PolicyConfig, outranks: Outranks | None) -> None:
        self.running, self.now, self.config, self.outranks = running, now, config, outranks
        self.out: list[Decision] = []
        self.pool = Pool(capacity.nodes, mix=(lambda: _shape_mix(queue, running, config))
                         if config.placement == "fragmentation" else None, waiting=lambda: map(_DEMAND, queue),
                         minor_last=config.minor_models_last)
        self.n_running = len(running)
        self.releasing = capacity.releasing  # ended gangs the ledger holds until the next observation
        self.per_user: dict[str, int] = {}
        if config.max_running_per_user > 0:
            for r in running:
                self.per_user[r.user] = self.per_user.get(r.user, 0) + 1
        self.held: dict[str, float] = {}  # GPUs held per user with a cap (stopping tasks hold theirs)
        if config.gpu_caps:
            for r in running:
                if r.user in config.gpu_caps:
                    self.held[r.user] = self.held.get(r.user, 0.0) + r.demand.total_gpus
        self.explained: dict[Shape, Defer] = {}  # why each shape failed, when first it did
        # Shapes that fit now only on the reservation's nodes, for a task without a time
        # limit: every such task of the shape waits behind it too, until an admission
        # changes the pool (on the trace, most of a pass's tasks were asked this again).
        self.behind: dict[Shape, Reservation] = {}  # (and the reservation that holds it back)
        # behind_message's, by (demand, limited, the reservation's task)
        self.behind_said: dict[tuple[Demand, bool, str], Defer] = {}
        # Shapes for which no reservation found a start: their like would find none either,
        # until an admission changes the pool and the endings (10,000 arrivals at a first
        # observation, with nothing running, asked it of each).
        self.no_start: set[Shape] = set()
        self._none_told: bool | None = None
        self.backfill = config.backfill or config.reserve
        self.reserved: Reservation | None = None
        # a reservation per GPU model beside the head's (argus.scheduler.per_model)
        self.holds = ModelHolds() if config.reserve and config.reserve_per_model else None
        self.endings = Endings(running, now, config.default_runtime_s)  # grouped only if a reservation asks
        if config.reserve:
            # Ended gangs the ledger still holds are free at the next observation: without
            # them the head found no start at all for a turn, and the task behind it took
            # the reservation (the simulator saw a firm bound broken by 11 h).
            index = {nid: i for i, nid in enumerate(self.pool.ids)}
            for nodes, d in capacity.releasing:
                self.endings.add(Ending(at=now, demand=d, nodes=tuple(index[n] for n in nodes if n in index),
                                        limited=True))
        self.planner: RoomPlanner | None = None  # made when a task first needs room (preemption)
        self.same_rule = outranks.same_rule if outranks is not None and config.preemption else None
        self.pins = _pinned(outranks, config, now)  # which tasks keep off the rare nodes (None: none)
        self.evicts = _evict_delay(config)  # when a task may first evict (None: no delay for anyone)
        # (shape, same_rule) and (shape, alike) that found no room: their like would find none either
        self.no_room: set[tuple[Shape, Hashable]] = set()
        self.no_room_alike: set[tuple[Shape, Hashable]] = set()

    def none_told(self, queue: Sequence[QueuedTask]) -> bool:
        """A quiet pass, in which no task is to be told why it waits (it tells only tasks
        that were preempting); asked once strict FIFO's head is blocked."""
        if self._none_told is None:
            self._none_told = not self.config.waits and all(t.preempting_since is None for t in queue)
        return self._none_told

    def fit(self, t: QueuedTask, key: Shape) -> Defer | None:
        """Stage 2 for ``t``, whose shape has not failed in this pass: admit it where its
        gang fits (unless stage 3's backfill check defers it behind the reservation) and
        return None, or return why it does not fit, remembered for its shape."""
        pool, d = self.pool, t.demand
        if key in self.behind and not t.limited:  # its shape fits only on the reservation's nodes
            if self.config.waits or t.preempting_since is not None:
                self.out.append(self.behind_message(t, self.behind[key]))
            return None
        off = self.off(t, key)
        picked = pool.place_avoiding(d, off) if off else pool.place(d)
        if picked is None:
            # Explained once per shape and pass: the message shows the free resources at the
            # moment the shape was first found not to fit (they only shrink afterwards).
            rare = off and pool.place(d) is not None  # it would fit there
            why = self.explained[key] = (_keeps_off(d, pool, off, self.config) if rare
                                         else pool.explain(d, self.config.waits))
            return why
        note = ""
        held = (self.holds.all(self.reserved, t) if self.holds is not None
                else [self.reserved] if self.reserved is not None else [])
        if held:
            fits, note, blocking = _backfill(t, picked, pool, held, self.now, self.config, off)
            if fits is None:
                if not t.limited:
                    self.behind[key] = blocking
                if self.config.waits or t.preempting_since is not None:
                    self.out.append(self.behind_message(t, blocking))
                return None
            picked = fits
        self.admit(t, picked, note)
        return None

    def behind_message(self, t: QueuedTask, reserved: Reservation) -> Defer:
        """``_behind`` for ``t`` behind ``reserved``, made once per shape, time limit and
        reservation: on a long queue every task behind one was told anew (the node list
        joined each time)."""
        key = (t.demand, t.limited, reserved.task_id)
        made = self.behind_said.get(key)
        if made is None:
            made = self.behind_said[key] = _behind(t, self.pool, reserved)
        return replace(made, task_id=t.task_id)

    def off(self, t: QueuedTask, key: Shape) -> frozenset[int]:
        """The nodes ``t`` keeps off (it may not be preempted: ``Pool.keeps_off``)."""
        return self.pool.keeps_off(t.demand) if len(key) > 4 else _NONE

    def admit(self, t: QueuedTask, picked: tuple[int, ...], note: str) -> None:
        """``t`` starts on ``picked`` (node indices): everything later in the pass sees it run."""
        config, d = self.config, t.demand
        if config.reserve:
            self.endings.add(Ending(at=self.now + (t.estimate_s or config.default_runtime_s), demand=d,
                                    nodes=picked, limited=t.limited))
        self.pool.take(picked, d)
        self.behind.clear()  # (the pool changed)
        self.no_start.clear()
        if self.planner is not None:
            self.planner.admitted(picked, d)
        if self.outranks is not None:
            self.outranks.granted(t, ())
        self.n_running += 1
        if config.max_running_per_user > 0:
            self.per_user[t.user] = self.per_user.get(t.user, 0) + 1
        if t.user in config.gpu_caps:
            self.held[t.user] = self.held.get(t.user, 0.0) + d.total_gpus
        self.out.append(Admit(task_id=t.task_id, node_ids=tuple(map(self.pool.ids.__getitem__, picked)), note=note))

    def preempt(self, t: QueuedTask, key: Shape, why: Defer) -> bool:
        """Stage 4 for ``t``, which does not fit (``why``): stop running tasks it outranks
        so that it does. True: room is made (its preemptions and deferral are decided, and
        with backfill the room is the reservation), or it may not stop anyone yet (its
        deferral, from stage 3, says from when); False: there is none to make."""
        outranks = self.outranks
        assert outranks is not None  # only asked when the policy preempts
        until = self.evicts(t, self.now) if self.evicts is not None else None
        if until is not None:  # it may not stop anyone yet (v2.scheduler.evict_after_s): it waits, and says till when
            self.reserve_or_defer(t, key, _evicts_later(t, why, until, self.config.waits))
            return True
        planner = self.planner
        if planner is None:
            pool = self.pool
            planner = self.planner = RoomPlanner(
                self.running, ids=pool.ids, free_gpus=pool.gpus, free_cpus=pool.cpus,
                total_gpus=[g for g, _ in pool.totals], total_cpus=[c for _, c in pool.totals],
                max_preemptions=self.config.max_preemptions, types=pool.types, releasing=self.releasing,
                caps=max_preemptions_by_user(self.config.user_guards))
        alike = (key, outranks.alike(t))
        off = self.off(t, key)
        room = None if alike in self.no_room_alike else _make_room(
            t, why, planner, outranks.rule(t), self.config, long_wait=lambda: self._long_wait(t, off), avoid=off)
        if room is None:
            self.no_room.add((key, outranks.same_rule(t)))  # its like would find none either
            self.no_room_alike.add(alike)
            return False
        defer, preempts, room_nodes = room
        stopped = {v.task_id for v in preempts}
        outranks.granted(t, [r for r in self.running if r.task_id in stopped])
        self.out.extend(preempts)
        self.out.append(defer)
        # The room is a reservation: others pass only if they cannot delay it.
        if self.backfill and self.reserved is None:
            self.reserved = Reservation(task_id=t.task_id, start=self.now + self.config.preempt_grace_s,
                                        nodes=room_nodes)
        return True

    def _long_wait(self, t: QueuedTask, off: frozenset[int]) -> bool:
        """Whether ``t`` would wait ``move_after_s`` or more for its gang (by its
        reservation's estimate; no start found: yes): then moving tasks out of its way is
        worth their restart (argus.scheduler.preempt, ``RoomPlanner.make_room``)."""
        after = self.config.move_after_s
        if after <= 0:
            return False
        found = self.pool.reservation(t, self.endings, self.now, off)
        return found is None or found.start - self.now >= after

    def reserve_or_defer(self, t: QueuedTask, key: Shape, why: Defer) -> None:
        """Stage 3 for ``t``, which does not fit (``why``) and got no room: the first such
        task gets the reservation (with ``reserve``), the others wait."""
        told = self.config.waits or t.preempting_since is not None
        holds, head = self.holds, self.reserved is None
        if self.config.reserve and key not in self.no_start and (head or (holds is not None and holds.wants(t))):
            if head:  # reserve for it
                reserved = self.reserved = self.pool.reservation(t, self.endings, self.now, self.off(t, key))
                if reserved is None:
                    self.no_start.add(key)
                elif holds is not None:
                    holds.covered(t)
            else:  # the first of its GPU models that does not fit: a reservation of its own, apart
                reserved = self.pool.reservation(t, self.endings, self.now, self.off(t, key) | holds.avoid(self.reserved))  # type: ignore[union-attr]
                holds.add(t, reserved)  # type: ignore[union-attr]
            if reserved is not None:  # said even in a quiet pass (without words): it is a promise
                nodes = tuple(self.pool.ids[i] for i in reserved.nodes)
                # A promise only where no later arrival can go ahead of it (fair share broke
                # 7-10 % of such bounds on the trace: a user under its share arrives first).
                firm = reserved.firm and arrival_only(self.config.policy)
                latest = reserved.start + self.config.preempt_grace_s + STOP_SLACK_S if firm else None
                message = ""
                if self.config.waits:
                    bound = f", at the latest ~{fmt_clock(latest)} (the time limits it waits for)" if latest else ""
                    names = ", ".join(self.pool.labels[i] for i in reserved.nodes)
                    message = f"{why.message}; reserved nodes {names} from ~{fmt_clock(reserved.start)}{bound}"
                self.out.append(Defer(
                    task_id=t.task_id, reason=why.reason, free_gpus_per_node=why.free_gpus_per_node, message=message,
                    reserved_from=reserved.start, reserved_nodes=nodes, reserved_latest=latest))
                return
        if told:
            self.out.append(Defer(task_id=t.task_id, reason=why.reason, message=why.message,
                                  free_gpus_per_node=why.free_gpus_per_node))


def _pinned(outranks: Outranks | None, config: PolicyConfig, now: float) -> Callable[[QueuedTask], bool] | None:
    """Which waiting tasks keep off the rare nodes (``Pool.keeps_off``), under a policy that
    may preempt (None: none). With preemption, those that may not be preempted; without,
    every task (nothing can move it once it runs) until it has waited ``move_after_s``, and
    then it takes a rare node: a long task on the only node some shapes fit on made fair
    share's longest wait 3x reserve-backfill's on the trace, and waiting for ever for a
    common node starved the tasks that need none (docs/evaluation/2026-12-03-gpu-models-and-churn.md)."""
    if outranks is None:
        return None
    if config.preemption:
        return lambda t: not t.preemptible
    after = config.move_after_s
    if after <= 0:
        return lambda t: False
    return lambda t: t.waiting_since is None or now - t.waiting_since < after


def _evict_delay(config: PolicyConfig) -> Callable[[QueuedTask, float], float | None] | None:
    """``evicts_from`` for this pass's settings; None when no delay is set for anyone."""
    if config.evict_after_s <= 0 and not any(g.evict_after_s for g in config.user_guards.values()):
        return None
    return lambda t, now: evicts_from(t.user, t.waiting_since, now, config.evict_after_s, config.user_guards)


def _evicts_later(t: QueuedTask, why: Defer, until: float, words: bool) -> Defer:
    """``why`` ``t`` does not fit, and from when it may stop or move other tasks."""
    if not words:
        return why
    return replace(why, message=f"{why.message}; it may stop other tasks to make room from ~{fmt_clock(until)} "
                                f"(after waiting v2.scheduler.evict_after_s)")


def _limited(t: QueuedTask, n_running: int, per_user: dict[str, int], held: dict[str, float],
             config: PolicyConfig) -> Defer:
    """``max_running_tasks`` run, or ``t``'s user runs the most ``max_running_per_user``
    allows, or holds so many GPUs that ``t``'s gang would take them past their cap."""
    if n_running >= config.max_running_tasks:
        # Says the setting and its number: a task held back by the head's cap looks, on a
        # cluster with free GPUs, like a bug unless the wait names what holds it.
        return Defer(task_id=t.task_id, reason=Reason.MAX_RUNNING, message=(
            f"the head runs its limit of {config.max_running_tasks} task(s) at once "
            "(v2.scheduler.max_running_tasks): it starts when one ends"))
    if config.max_running_per_user <= 0 or per_user.get(t.user, 0) < config.max_running_per_user:
        return _over_gpu_cap(t, held.get(t.user, 0.0), config.gpu_caps[t.user])
    return Defer(task_id=t.task_id, reason=Reason.USER_LIMIT, message=(
        f"user {t.user!r} already runs {per_user[t.user]} task(s) "
        f"(max_running_per_user={config.max_running_per_user})"))


def _over_gpu_cap(t: QueuedTask, held: float, cap: float) -> Defer:
    """``t``'s user holds so many GPUs that ``t``'s gang would take them past their cap."""
    return Defer(task_id=t.task_id, reason=Reason.USER_GPU_LIMIT, message=(
        f"user {t.user!r} holds {fmt_amount(held)} of the {fmt_amount(cap)} GPUs their cap allows at once and "
        f"this task needs {fmt_amount(t.demand.total_gpus)}: it starts when enough of their running tasks end "
        f"(an admin sets the cap: argus users set {t.user} --max-gpus N)"))


def _keeps_off(d: Demand, pool: Pool, off: frozenset[int], config: PolicyConfig) -> Defer:
    """A task that may not be preempted fits now only on rare nodes it does not need."""
    words, nodes = config.waits, ", ".join(pool.labels[i] for i in sorted(off))
    unless = ("a preemptible task may use them now" if config.preemption else
              f"it takes one once it has waited {config.move_after_s:g} s")
    return Defer(task_id="", reason=Reason.KEEPS_OFF_RARE, free_gpus_per_node=pool.free_gpus(), message=(
        f"{needs(d)}; it fits now only on {nodes}, which few nodes match and larger tasks need: a task that may "
        f"not be preempted keeps off them while other nodes could hold it, and starts when one of those has room "
        f"({unless})") if words else "")


def _blocked(t: QueuedTask, pool: Pool) -> Defer:
    """Strict FIFO: ``t`` waits behind a head that does not fit."""
    return Defer(task_id=t.task_id, reason=Reason.BLOCKED_BY_HEAD, message=_BLOCKED_MSG,
                 free_gpus_per_node=pool.free_gpus())


def _capacity_unknown(queue: Sequence[QueuedTask], now: float) -> list[Decision]:
    """Nothing is admitted while capacity is unknown; a task in a retry's backoff says so."""
    out: list[Decision] = []
    append = out.append  # a lookup per task saved: this runs over the whole queue
    for t in queue:
        if t.next_run_at is not None and t.next_run_at > now:
            append(Defer(task_id=t.task_id, reason=Reason.RETRY_BACKOFF,
                         message=f"retry not before t={t.next_run_at:.0f} ({t.next_run_at - now:.0f}s)"))
        else:
            append(Defer(task_id=t.task_id, reason=Reason.CAPACITY_UNKNOWN, message=_UNKNOWN_MSG))
    return out


def _shape_mix(queue: Sequence[QueuedTask], running: Sequence[RunningTask], config: PolicyConfig) -> ShapeMix:
    """The shapes placement should leave room for: the configured mix, else what waits at
    the front of the line and what runs."""
    if config.shape_mix:
        return ShapeMix(config.shape_mix)
    return ShapeMix.of([t.demand for t in queue[:MIX_SAMPLE]] + [r.demand for r in running])


def _make_room(t: QueuedTask, why: Defer, planner: RoomPlanner, outranks: Callable[[RunningTask], str | None],
               config: PolicyConfig, *, long_wait: Callable[[], bool], avoid: frozenset[int]
               ) -> tuple[Defer, list[Preempt], tuple[int, ...]] | None:
    """Stop preemptible tasks ``outranks`` allows so ``t`` fits, or, if ``long_wait()``,
    tasks that can run elsewhere (argus.scheduler.preempt): its deferral, the
    preemptions, and the nodes it will have. None: no room to make."""
    room = planner.make_room(t.demand, outranks, long_wait=long_wait, avoid=avoid)
    if room is None:
        return None
    if not room.victims:  # stops under way make it fit: wait for them
        message = "room is being made: preempted task(s) are stopping"
    else:
        message = "making room: preempting " + ", ".join(f"{r.task_id} ({r.user})" for r, _ in room.victims)
    message = f"{why.message}; {message}" if why.message else message  # (a quiet pass explains no fit)
    defer = Defer(task_id=t.task_id, reason=Reason.PREEMPTING, message=message,
                  free_gpus_per_node=why.free_gpus_per_node)
    preempts = [Preempt(task_id=r.task_id, for_task=t.task_id, for_user=t.user, reason=reason,
                        message=_preempt_message(t, r, reason, config)) for r, reason in room.victims]
    return defer, preempts, room.nodes


def _preempt_message(t: QueuedTask, r: RunningTask, reason: str, config: PolicyConfig) -> str:
    why = {"priority": f"its priority {t.priority} is higher than {r.priority}",
           "quota": f"{t.user!r} is within its quota of {fmt_amount(config.quotas.get(t.user, 0))} GPUs "
                    f"and {r.user!r} borrows beyond its own",
           "fair_share": f"{t.user!r} is under its fair share and {r.user!r} over its own",
           "moves": "it fits on other nodes now, and fewer nodes can hold that task"}.get(reason, reason)
    return (f"preempted to make room for {t.task_id} ({t.user}, {needs(t.demand)}): {why}; "
            f"back to its place in line, to resume from its checkpoints")


def _backfill(t: QueuedTask, picked: tuple[int, ...], pool: Pool, held: Sequence[Reservation], now: float,
              config: PolicyConfig, off: frozenset[int]) -> tuple[tuple[int, ...] | None, str, Reservation]:
    """May ``t``, which fits now on ``picked``, start without delaying ``reserved``? Yes if
    it fits on nodes the reservation does not need, or if its time limit ends it before
    the reservation starts. A run time that is only an estimate (history, the default)
    does not let it onto the reservation's nodes: estimates run over, each overrun moved
    the reservation later, and in the trace a gang so passed again and again waited for
    days (docs/scheduling.md). With a reservation per GPU model (argus.scheduler.per_model)
    it must delay none of them. Returns its nodes and why, or None (``_behind`` says why),
    and the reservation that holds it back."""
    avoid = frozenset().union(*(r.nodes for r in held)) | off
    elsewhere = picked if avoid.isdisjoint(picked) else pool.place_avoiding(t.demand, avoid)
    return backfill(t, picked, held, now, config, elsewhere)


def _behind(t: QueuedTask, pool: Pool, reserved: Reservation) -> Defer:
    """Why ``t``, which fits now, waits: only on the reservation's nodes, and it may delay it."""
    # No times in these messages: they would change with the clock, and be recorded again,
    # for every task behind the reservation.
    nodes = ", ".join(pool.labels[i] for i in reserved.nodes)
    why = ("its time limit would still run" if t.limited else
           "without a time_limit its run time is only an estimate (set one to let it start before the "
           "reservation when it ends in time), and it would run")
    return Defer(task_id=t.task_id, reason=Reason.BEHIND_RESERVATION, message=(
        f"{needs(t.demand)}; fits now, but only on nodes reserved for {reserved.task_id} "
        f"({nodes}): {why} on them when that reservation starts"))

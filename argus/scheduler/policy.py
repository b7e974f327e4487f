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

from collections.abc import Callable, Sequence
from typing import Union

import msgspec

from argus.config import SchedulerConfig
from argus.events.catalog import Demand, NodeCapacity
from argus.scheduler.order import ORDERS, queue_order
from argus.scheduler.reserve import Ending, Reservation, earliest_start, fmt_clock

__all__ = [
    "Admit",
    "Capacity",
    "Decision",
    "Defer",
    "POLICIES",
    "PolicyConfig",
    "QueuedTask",
    "Reason",
    "RunningTask",
    "decide",
    "register_policy",
]


class Reason:
    """Deferral reason codes (stable strings: they are stored in TaskDeferred events)."""

    NO_CAPACITY_PER_NODE = "no_capacity_per_node"
    INSUFFICIENT_GPUS = "insufficient_gpus"
    MAX_RUNNING = "max_running"
    USER_LIMIT = "user_limit"
    CAPACITY_UNKNOWN = "capacity_unknown"
    RETRY_BACKOFF = "retry_backoff"
    BLOCKED_BY_HEAD = "blocked_by_head"
    NEVER_FITS = "never_fits"
    BEHIND_RESERVATION = "behind_reservation"


class QueuedTask(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A waiting task (QUEUED or PENDING_RESOURCES). ``seq``: its submission's log
    position (arrival order; tasks with equal ``seq`` keep the order they are given in)."""

    task_id: str
    demand: Demand
    seq: int = 0
    priority: int = 0
    user: str = ""
    next_run_at: float | None = None
    estimate_s: float | None = None  # expected run time (time limit or history); None: the default


class RunningTask(msgspec.Struct, frozen=True, kw_only=True):
    """A task holding (or about to hold) a Ray job. ``node_ids``: where it was admitted,
    when known. ``claimed=False`` means its resources may not show in Ray's free counts
    yet (a job just handed to Ray reserves its GPUs seconds later): the policy then takes
    its demand off ``node_ids``, or, where those are not known, off the nodes with the
    most free GPUs (where Ray would put it), so the GPUs are not handed out twice."""

    task_id: str
    demand: Demand
    user: str = ""
    node_ids: tuple[str, ...] = ()
    claimed: bool = True
    expected_end: float | None = None  # start + time limit or estimate; None: now + the default


class Capacity(msgspec.Struct, frozen=True, kw_only=True):
    """Free resources of the alive worker nodes, as the Ray gateway observed them."""

    nodes: tuple[NodeCapacity, ...]


class PolicyConfig(msgspec.Struct, frozen=True, kw_only=True):
    policy: str = "fifo"
    max_running_tasks: int = 8
    max_running_per_user: int = 0  # 0: no per-user limit
    backfill: bool = False
    reserve: bool = False  # the first task that does not fit gets a reservation (argus.scheduler.reserve)
    default_runtime_s: float = 3600.0  # a task's expected run time when nothing better is known

    @classmethod
    def from_scheduler(cls, cfg: SchedulerConfig, **overrides: object) -> "PolicyConfig":
        settings: dict[str, object] = dict(
            policy=cfg.policy, max_running_tasks=cfg.max_running_tasks,
            max_running_per_user=cfg.max_running_per_user, backfill=cfg.backfill,
            default_runtime_s=cfg.default_runtime_s)
        return cls(**{**settings, **overrides})  # type: ignore[arg-type]


# gc=False: a pass creates one decision per queued task; these hold only strings and
# tuples (no cycles), and keeping them out of the cyclic GC avoids multi-ms collections.
class Admit(msgspec.Struct, frozen=True, kw_only=True, tag="admit", gc=False):
    task_id: str
    node_ids: tuple[str, ...]  # one per gang member, distinct
    note: str = ""  # why it may pass a reservation (backfill), when it does


class Defer(msgspec.Struct, frozen=True, kw_only=True, tag="defer", gc=False):
    task_id: str
    reason: str
    message: str
    free_gpus_per_node: tuple[float, ...] = ()
    reserved_from: float | None = None  # the head's reservation: when its gang is expected to fit
    reserved_nodes: tuple[str, ...] = ()


Decision = Union[Admit, Defer]
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


# ---------------------------------------------------------------------------------------


def fmt_amount(x: float) -> str:
    """A resource amount as people write it: 4, not 4.0; 0.5 stays 0.5."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _list(values: Sequence[float], limit: int = 16) -> str:
    shown = ", ".join(fmt_amount(v) for v in values[:limit])
    more = f", …(+{len(values) - limit} more)" if len(values) > limit else ""
    return f"[{shown}{more}]"


def _needs(d: Demand) -> str:
    return (f"needs {d.nnodes} node{'s' if d.nnodes != 1 else ''} × {d.n_gpus_per_node} GPUs "
            f"(+{fmt_amount(d.cpus_per_node)} CPUs each)")


class _Pool:
    """Mutable free-resource view for one pass (arrays indexed like ``ids``)."""

    def __init__(self, nodes: Sequence[NodeCapacity], running: Sequence[RunningTask]) -> None:
        ordered = sorted(nodes, key=lambda n: n.node_id)
        self.ids = [n.node_id for n in ordered]
        self.gpus = [max(0.0, n.free_gpus) for n in ordered]
        self.cpus = [max(0.0, n.free_cpus) for n in ordered]
        unclaimed = [task for task in running if not task.claimed]
        if unclaimed:
            index = {nid: i for i, nid in enumerate(self.ids)}
            for task in unclaimed:
                self._reserve(task, index)
        self._cache: dict[tuple[int, int, float], tuple[int, ...] | None] = {}
        self._snapshot: tuple[float, ...] | None = None
        self._totals = [(n.total_gpus, n.total_cpus) for n in ordered]
        self._never: dict[tuple[int, int, float], Defer | None] = {}

    def never_fits(self, d: Demand) -> Defer | None:
        """Why ``d`` could not be placed even on idle nodes (by their totals), or None."""
        key = (d.nnodes, d.n_gpus_per_node, d.cpus_per_node)
        if key not in self._never:
            big = sum(1 for g, c in self._totals if g >= d.n_gpus_per_node and c >= d.cpus_per_node)
            largest = max(self._totals, default=(0.0, 0.0))
            self._never[key] = None if big >= d.nnodes else Defer(
                task_id="", reason=Reason.NEVER_FITS, free_gpus_per_node=self.free_gpus(), message=(
                    f"{_needs(d)}; the {len(self._totals)} alive worker node(s) could not hold it even if "
                    f"idle: {big} of them have ≥ {d.n_gpus_per_node} GPUs and ≥ {fmt_amount(d.cpus_per_node)} "
                    f"CPUs in all (largest: {fmt_amount(largest[0])} GPUs, {fmt_amount(largest[1])} CPUs); "
                    f"it holds no one back and starts when big enough nodes join"))
        return self._never[key]

    def _reserve(self, task: RunningTask, index: dict[str, int]) -> None:
        """Take an unclaimed task's demand off the nodes it will hold (conservative: for a
        few seconds, until Ray's snapshot shows it, a job may be counted twice)."""
        d = task.demand
        if task.node_ids:
            nodes = [index[nid] for nid in task.node_ids if nid in index]
        else:
            nodes = sorted(range(len(self.ids)), key=lambda i: (-self.gpus[i], self.ids[i]))[: d.nnodes]
        for i in nodes:
            self.gpus[i] = max(0.0, self.gpus[i] - d.n_gpus_per_node)
            self.cpus[i] = max(0.0, self.cpus[i] - d.cpus_per_node)

    def free_gpus(self) -> tuple[float, ...]:
        if self._snapshot is None:
            self._snapshot = tuple(self.gpus)
        return self._snapshot

    def place_avoiding(self, d: Demand, avoid: frozenset[int]) -> tuple[int, ...] | None:
        """Best-fit nodes for the gang among the nodes not in ``avoid``, or None."""
        g, c = d.n_gpus_per_node, d.cpus_per_node
        fits = [i for i in range(len(self.gpus)) if i not in avoid and self.gpus[i] >= g and self.cpus[i] >= c]
        if len(fits) < d.nnodes or d.nnodes <= 0:
            return None
        fits.sort(key=lambda i: (self.gpus[i], self.cpus[i], self.ids[i]))
        return tuple(fits[: d.nnodes])

    def reservation(self, t: QueuedTask, endings: Sequence[Ending], now: float) -> Reservation | None:
        """The earliest start of ``t``'s gang as ``endings`` free resources (see reserve.py)."""
        found = earliest_start(
            t.demand, now=now, ids=self.ids, free_gpus=self.gpus, free_cpus=self.cpus,
            total_gpus=[g for g, _ in self._totals], total_cpus=[c for _, c in self._totals], endings=endings)
        return None if found is None else Reservation(task_id=t.task_id, start=found[0], nodes=found[1])

    def place(self, d: Demand) -> tuple[int, ...] | None:
        """Best-fit nodes for the gang (fewest free GPUs first, then id), or None."""
        key = (d.nnodes, d.n_gpus_per_node, d.cpus_per_node)
        if key in self._cache:
            return self._cache[key]
        g, c = d.n_gpus_per_node, d.cpus_per_node
        gpus, cpus = self.gpus, self.cpus
        fits = [i for i in range(len(gpus)) if gpus[i] >= g and cpus[i] >= c]
        result: tuple[int, ...] | None = None
        if len(fits) >= d.nnodes > 0:
            fits.sort(key=lambda i: (gpus[i], cpus[i], self.ids[i]))
            result = tuple(fits[: d.nnodes])
        self._cache[key] = result
        return result

    def take(self, picked: tuple[int, ...], d: Demand) -> None:
        for i in picked:
            self.gpus[i] -= d.n_gpus_per_node
            self.cpus[i] -= d.cpus_per_node
        # Free resources only shrink within a pass: a shape that did not fit still does not,
        # so only the successful placements are forgotten.
        self._cache = {k: v for k, v in self._cache.items() if v is None}
        self._snapshot = None

    def explain(self, d: Demand) -> Defer:
        """Why ``d`` does not fit: not even in total, or only not per node."""
        free = self.free_gpus()
        total = sum(free)
        if total < d.total_gpus:
            return Defer(task_id="", reason=Reason.INSUFFICIENT_GPUS, free_gpus_per_node=free, message=(
                f"{_needs(d)} = {d.total_gpus} GPUs; only {fmt_amount(total)} GPUs free in total "
                f"on {len(free)} worker node(s); free GPUs per node: {_list(free)}"))
        ok = sum(1 for i in range(len(free)) if free[i] >= d.n_gpus_per_node and self.cpus[i] >= d.cpus_per_node)
        return Defer(task_id="", reason=Reason.NO_CAPACITY_PER_NODE, free_gpus_per_node=free, message=(
            f"{_needs(d)}; fits in total ({fmt_amount(total)} ≥ {d.total_gpus} GPUs free) but not per node: "
            f"only {ok} node(s) have ≥ {d.n_gpus_per_node} free GPUs and ≥ {fmt_amount(d.cpus_per_node)} "
            f"free CPUs; free GPUs per node: {_list(free)}; free CPUs per node: {_list(self.cpus)}"))


_BLOCKED_MSG = "waiting in line: an earlier task that does not fit yet is at the head of the FIFO queue"
_UNKNOWN_MSG = "cluster capacity is unknown (Ray unreachable); nothing is admitted until it is observed"


def _run(queue: Sequence[QueuedTask], running: Sequence[RunningTask], capacity: Capacity | None,
         now: float, config: PolicyConfig) -> list[Decision]:
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

    pool = _Pool(capacity.nodes, running)
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
        endings = [Ending(at=r.expected_end if r.expected_end is not None else now + config.default_runtime_s,
                          demand=r.demand, nodes=tuple(index[n] for n in r.node_ids if n in index))
                   for r in running]
    full_msg = f"{config.max_running_tasks} task(s) already running (max_running_tasks)"
    for t in queue:
        if t.next_run_at is not None and t.next_run_at > now:
            append(Defer(task_id=t.task_id, reason=Reason.RETRY_BACKOFF,
                         message=f"retry not before t={t.next_run_at:.0f} ({t.next_run_at - now:.0f}s)"))
            continue
        never = pool.never_fits(t.demand)
        if never is not None:  # waiting in line for it would only block everyone behind it
            append(Defer(task_id=t.task_id, reason=never.reason, message=never.message,
                         free_gpus_per_node=never.free_gpus_per_node))
            continue
        if blocked:
            append(Defer(task_id=t.task_id, reason=Reason.BLOCKED_BY_HEAD, message=_BLOCKED_MSG,
                         free_gpus_per_node=pool.free_gpus()))
            continue
        if n_running >= config.max_running_tasks:
            append(Defer(task_id=t.task_id, reason=Reason.MAX_RUNNING, message=full_msg))
            continue
        if config.max_running_per_user > 0 and per_user.get(t.user, 0) >= config.max_running_per_user:
            append(Defer(task_id=t.task_id, reason=Reason.USER_LIMIT, message=(
                f"user {t.user!r} already runs {per_user[t.user]} task(s) "
                f"(max_running_per_user={config.max_running_per_user})")))
            continue
        d = t.demand
        key = (d.nnodes, d.n_gpus_per_node, d.cpus_per_node)
        why = explained.get(key)
        if why is not None and (reserved is not None or not config.reserve):
            # this shape already failed in this pass: it still fails
            append(Defer(task_id=t.task_id, reason=why.reason, message=why.message,
                         free_gpus_per_node=why.free_gpus_per_node))
            if not backfill:
                blocked = True
            continue
        picked = pool.place(d) if why is None else None
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
            n_running += 1
            if config.max_running_per_user > 0:
                per_user[t.user] = per_user.get(t.user, 0) + 1
            append(Admit(task_id=t.task_id, node_ids=tuple(pool.ids[i] for i in picked), note=note))
            continue
        # Explained once per shape and pass: the message shows the free resources at the
        # moment the shape was first found not to fit (they only shrink afterwards).
        if why is None:
            why = explained[key] = pool.explain(d)
        if config.reserve and reserved is None:  # the first that does not fit: reserve for it
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


def _backfill(t: QueuedTask, picked: tuple[int, ...], pool: _Pool, reserved: Reservation, now: float,
              config: PolicyConfig) -> tuple[tuple[int, ...] | None, str, Defer | None]:
    """May ``t``, which fits now on ``picked``, start without delaying ``reserved``? Yes if
    it is expected to end before the reservation starts, or fits on nodes the reservation
    does not need. Returns its nodes and why, or the deferral that says why not."""
    estimate = t.estimate_s or config.default_runtime_s
    if now + estimate <= reserved.start:
        return picked, (f"backfilled: expected to end by ~{fmt_clock(now + estimate)}, before the "
                        f"reservation of {reserved.task_id} from ~{fmt_clock(reserved.start)}"), None
    avoid = frozenset(reserved.nodes)
    elsewhere = picked if avoid.isdisjoint(picked) else pool.place_avoiding(t.demand, avoid)
    if elsewhere is not None:
        return elsewhere, f"backfilled on nodes the reservation of {reserved.task_id} does not need", None
    # No times in this message: it would change with the clock, and be recorded again,
    # for every task behind the reservation.
    nodes = ", ".join(pool.ids[i] for i in reserved.nodes)
    return None, "", Defer(task_id=t.task_id, reason=Reason.BEHIND_RESERVATION, message=(
        f"{_needs(t.demand)}; fits now, but would still run, by its expected run time, on nodes "
        f"reserved for {reserved.task_id} ({nodes}) when that reservation starts"))


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
    """Higher ``priority`` first; FIFO within a priority (the order is ``queue_order``'s)."""
    return _run(queue, running, capacity, now, config)

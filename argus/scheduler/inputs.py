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

import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import TypeVar, cast

import msgspec

from argus.config import SchedulerConfig
from argus.events import Demand, FailureKind, NodeCapacity
from argus.lifecycle import TaskState
from argus.scheduler.guards import min_run_by_user
from argus.scheduler.ledger import Commitment, CommittedSums, committed_per_node, node_ledgers, ready_nodes
from argus.scheduler.model import Capacity, QueuedTask, RunningTask
from argus.scheduler.running_end import running_end
from argus.scheduler.task import TaskFacts
from argus.scheduler.history import RuntimeHistory

__all__ = ["SETTLE_S", "QueueMemo", "settles_at", "commitments", "ledger_capacity", "policy_inputs", "with_driver"]


# How long a task has to have been seen running before it may be preempted, unless the
# configuration says (``preempt_min_run_s``): its trainer has started (stopping it sooner
# wastes its start for little).
SETTLE_S = 15.0


E = TypeVar("E", QueuedTask, RunningTask)


def commitments(active: Sequence[TaskFacts], driver_cpus: float,
                releasing: Sequence[Commitment] = ()) -> list[Commitment]:
    """What the ledger holds: the gang of every task with a live attempt (intent recorded,
    not ended), on the nodes it was admitted onto, plus ``releasing`` (ended attempts not
    yet seen given back)."""
    held = [c for t in active if (c := _commitment(t, driver_cpus)) is not None]
    return [*held, *releasing]


def _commitment(t: TaskFacts, driver_cpus: float) -> Commitment | None:
    """The gang ``t``'s live attempt holds (None: no attempt, or it ended)."""
    a = t.latest_attempt
    if a is None or a.ended:
        return None
    return Commitment(task_id=t.task_id, demand=with_driver(t.demand, driver_cpus), node_ids=a.node_ids)


def ledger_capacity(nodes: Sequence[NodeCapacity], held: Sequence[Commitment], *, now: float,
                    seen_since: Mapping[str, float] | None = None, settle_s: float = 0.0) -> Capacity:
    """The nodes as the policy may use them: free = min(Ray's free, total - committed);
    a node not yet settled since it joined (``seen_since``; None: all settled) has none."""
    ready = None if seen_since is None else ready_nodes(seen_since, nodes, now, settle_s)
    return _ledger(nodes, held, ready)


def _ledger(nodes: Sequence[NodeCapacity], held: Sequence[Commitment], ready: frozenset[str] | None) -> Capacity:
    return Capacity(nodes=_free_nodes(nodes, committed_per_node(nodes, held), ready))


def _free_nodes(nodes: Sequence[NodeCapacity], used: Mapping[str, tuple[float, float]],
                ready: frozenset[str] | None) -> tuple[NodeCapacity, ...]:
    return tuple(msgspec.structs.replace(n.node, free_gpus=n.free_gpus, free_cpus=n.free_cpus)
                 for n in node_ledgers(nodes, used, ready))


def with_driver(demand: Demand, driver_cpus: float) -> Demand:
    return msgspec.structs.replace(demand, cpus_per_node=demand.cpus_per_node + driver_cpus)


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    """The same objects in the same order (views are immutable: the same view, no change)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


class QueueMemo:
    """The policy's entries (``QueuedTask``, ``RunningTask``) by task id, with what they were
    made from: an entry is made again only when its task's view changed (views are
    immutable: a new one is a change), its run-time estimate changed, or (running) it
    settled. A reactor or a simulation builds them every turn for thousands of tasks, so
    the whole lists, and the ledger's capacity, are kept too, and handed out again while
    the same views (and the same observation) come in."""

    def __init__(self) -> None:
        self.queued: dict[str, tuple[TaskFacts, int, float, QueuedTask]] = {}
        # by task id: (view, history version, driver CPUs, when it settles, entry)
        self.running: dict[str, tuple[TaskFacts, int, tuple[float, float], float | None, RunningTask]] = {}
        # The whole lists as last handed out: the views, what they were made with, the
        # history's version, the entries (running: and until when they hold), and each
        # entry by its view's id (entries are looked up by view: mostly a task or two came,
        # went or changed since, and a history change affects only its user's tasks).
        self._queue: tuple[list[TaskFacts], object, int, list[QueuedTask]] = ([], None, -1, [])
        self._by_view: dict[int, QueuedTask] = {}
        self._running: tuple[list[TaskFacts], object, int, list[RunningTask], float] = ([], None, -1, [], -1.0)
        self._by_view_running: dict[int, RunningTask] = {}
        self._held: dict[str, tuple[TaskFacts, float, Commitment | None]] = {}  # by task id
        self._capacity: tuple[list[TaskFacts], list[Commitment], tuple[NodeCapacity, ...], object, Capacity] | None = None
        self._sums: tuple[CommittedSums | None, dict[int, TaskFacts], float] = (None, {}, 0.0)
        # node id -> (the node as observed, its commitments, ready, as the policy may use it)
        self._nodes: dict[str, tuple[NodeCapacity, tuple[float, float], bool, NodeCapacity]] = {}

    def queue(self, waiting: Sequence[TaskFacts], history: RuntimeHistory, default: float,
              driver_cpus: float) -> list[QueuedTask]:
        key = (id(history), driver_cpus, default)
        views, made_on, version, entries = self._queue
        if made_on == key and version == history.version and _same(waiting, views):
            return list(entries)
        by_view = self._by_view if made_on == key else {}
        found: list[QueuedTask | None] = list(map(by_view.get, map(id, waiting)))
        if by_view and version != history.version:
            found = _stale_users(found, history.users_since(version), waiting)
        for i in _missing(found):  # mostly a task or two: found by C-level scans, not a loop over the queue
            found[i] = self.queued_entry(waiting[i], history, default, driver_cpus)
        entries = cast(list[QueuedTask], found)
        self._by_view = dict(zip(map(id, waiting), entries))
        self._queue = (list(waiting), key, history.version, entries)  # (keeps the views: their ids stay theirs)
        return list(entries)

    def running_list(self, active: Sequence[TaskFacts], history: RuntimeHistory, default: float, driver_cpus: float,
                     now: float, min_run_s: float = SETTLE_S,
                     min_run_by_user: Mapping[str, float] | None = None) -> list[RunningTask]:
        """``min_run_by_user``: users whose minimum run is not ``min_run_s`` (argus.scheduler.guards)."""
        mine = min_run_by_user or {}
        key = (id(history), driver_cpus, default, min_run_s, tuple(sorted(mine.items())))
        views, made_on, version, entries, until = self._running
        if made_on == key and version == history.version and now < until and _same(active, views):
            return list(entries)
        by_view = self._by_view_running if made_on == key else {}
        found: list[RunningTask | None] = list(map(by_view.get, map(id, active)))
        if by_view and version != history.version:
            found = _stale_users(found, history.users_since(version), active)
        if by_view and now >= until:  # some have settled since
            found = [None if e is not None and e.settles_at is not None and e.settles_at <= now else e for e in found]
        began_now: list[int] = []  # tasks whose attempt is not recorded yet: they began "now"
        for i in _missing(found):
            t = active[i]
            found[i] = self.running_entry(t, history, default, driver_cpus, now, mine.get(t.user, min_run_s))
            if t.latest_attempt is None:
                began_now.append(id(t))
        entries = cast(list[RunningTask], found)
        self._by_view_running = dict(zip(map(id, active), entries))
        for view_id in began_now:  # made again on every call
            del self._by_view_running[view_id]
        # Valid until one of them settles, or at once while one began "now".
        until = now if began_now else min(filter(None, map(_SETTLES, entries)), default=float("inf"))
        self._running = (list(active), key, history.version, entries, until)
        return list(entries)

    def capacity(self, capacity: Sequence[NodeCapacity], active: Sequence[TaskFacts], releasing: Sequence[Commitment],
                 *, now: float, driver_cpus: float, seen_since: Mapping[str, float] | None, settle_s: float) -> Capacity:
        """``ledger_capacity`` of the live attempts of ``active`` and of ``releasing``."""
        ready = None if seen_since is None else ready_nodes(seen_since, capacity, now, settle_s)
        observed = tuple(capacity)
        last = self._capacity
        if (last is not None and last[3] == (ready, driver_cpus) and last[2] == observed
                and _same(releasing, last[1]) and _same(active, last[0])):
            return last[4]
        used = self._committed(observed, active, driver_cpus).per_node(releasing)
        if used is None:  # a gang must be placed by the ledger: the whole sum, in order
            used = committed_per_node(observed, [*self._commitments(active, driver_cpus), *releasing])
        made = Capacity(nodes=self._free_nodes(observed, used, ready),
                        releasing=tuple((c.node_ids, c.demand) for c in releasing))
        self._capacity = (list(active), list(releasing), observed, (ready, driver_cpus), made)
        return made

    def _free_nodes(self, observed: Sequence[NodeCapacity], used: Mapping[str, tuple[float, float]],
                    ready: frozenset[str] | None) -> tuple[NodeCapacity, ...]:
        """``_free_nodes``, each node made again only when it, its commitments or its
        readiness changed (mostly a job started or ended on one or two of 60 nodes)."""
        made, out = self._nodes, []
        if len(made) > 2 * len(observed) + 64:
            made.clear()
        for n in observed:
            use, is_ready = used[n.node_id], ready is None or n.node_id in ready
            hit = made.get(n.node_id)
            if hit is None or hit[1] != use or hit[2] != is_ready or hit[0] != n:
                free = _free_nodes((n,), {n.node_id: use}, None if is_ready else frozenset())[0]
                hit = made[n.node_id] = (n, use, is_ready, free)
            out.append(hit[3])
        return tuple(out)

    def _committed(self, observed: Sequence[NodeCapacity], active: Sequence[TaskFacts],
                   driver_cpus: float) -> CommittedSums:
        """The live attempts' commitments, counted again only for views that changed."""
        node_ids = frozenset(n.node_id for n in observed)
        sums, views_before, cpus = self._sums
        if sums is None or sums.node_ids != node_ids or cpus != driver_cpus:
            sums, views_before = CommittedSums(node_ids), {}
        views = dict(zip(map(id, active), active))
        for gone in views_before.keys() - views.keys():
            sums.remove(views_before[gone].task_id)
        for new in views.keys() - views_before.keys():
            t = views[new]
            c = _commitment(t, driver_cpus)
            if c is None:
                sums.remove(t.task_id)
            else:
                sums.add(c)
        self._sums = (sums, views, driver_cpus)  # (keeps the views: their ids stay theirs)
        return sums

    def _commitments(self, active: Sequence[TaskFacts], driver_cpus: float) -> list[Commitment]:
        """``commitments(active, driver_cpus)``, each made again only when its view changed."""
        made, out = self._held, []
        for t in active:
            hit = made.get(t.task_id)
            if hit is None or hit[0] is not t or hit[1] != driver_cpus:
                hit = made[t.task_id] = (t, driver_cpus, _commitment(t, driver_cpus))
            if hit[2] is not None:
                out.append(hit[2])
        if len(made) > 2 * len(active) + 1024:
            self._held = {t.task_id: made[t.task_id] for t in active}
        return out

    def queued_entry(self, t: TaskFacts, history: RuntimeHistory, default: float, driver_cpus: float) -> QueuedTask:
        hit = self.queued.get(t.task_id)
        if hit is not None and hit[0] is t and hit[2] == driver_cpus:
            if hit[1] == history.version:
                return hit[3]
            if history.estimate(t, default)[0] == hit[3].estimate_s:  # another user's run was added
                self.queued[t.task_id] = (t, history.version, driver_cpus, hit[3])
                return hit[3]
        q = QueuedTask(task_id=t.task_id, demand=with_driver(t.demand, driver_cpus), seq=t.seq,
                       priority=t.priority, user=t.user, next_run_at=t.next_run_at,
                       estimate_s=history.estimate(t, default)[0], limited=t.time_limit_s is not None,
                       preempting_since=t.preempting_since, waiting_since=t.waiting_since,
                       preemptible=t.preemptible, resume_first=_interrupted(t))
        self.queued[t.task_id] = (t, history.version, driver_cpus, q)
        return q

    def running_entry(self, t: TaskFacts, history: RuntimeHistory, default: float, driver_cpus: float,
                      now: float, min_run_s: float = SETTLE_S) -> RunningTask:
        hit = self.running.get(t.task_id)
        if hit is not None and hit[0] is t and hit[2] == (driver_cpus, min_run_s) and t.latest_attempt is not None:
            # (no attempt: it began "now", made again)
            at, r = hit[3], hit[4]
            if r.settled == (at is not None and now >= at):
                if hit[1] == history.version:
                    return r
                if running_end(t, history, default, _began(t, now)).at == r.expected_end:
                    self.running[t.task_id] = (t, history.version, (driver_cpus, min_run_s), at, r)
                    return r
        at = settles_at(t, min_run_s)
        began = _began(t, now)
        end = running_end(t, history, default, began)
        r = RunningTask(task_id=t.task_id, demand=with_driver(t.demand, driver_cpus), user=t.user,
                        node_ids=t.latest_attempt.node_ids if t.latest_attempt is not None else (),
                        expected_end=end.at, priority=t.priority,
                        preemptible=t.preemptible, stopping=_stopping(t), started_at=began,
                        settled=at is not None and now >= at,
                        preempted=sum(1 for a in t.attempts if a.preempted_by),
                        limited=end.limited, by_progress=end.by_progress,
                        settles_at=at if at is not None and now < at else None,
                        checkpointed_at=t.latest_attempt.checkpointed_at if t.latest_attempt is not None else None)
        self.running[t.task_id] = (t, history.version, (driver_cpus, min_run_s), at, r)
        return r

    def keep(self, waiting: int, active: int) -> None:
        """Forget the entries of tasks that left, now and then (not every call)."""
        if len(self.queued) > 2 * waiting + 1024:
            self.queued = {}
        if len(self.running) > 2 * active + 1024:
            self.running = {}


_SETTLES = operator.attrgetter("settles_at")
_USER = operator.attrgetter("user")


def _stale_users(found: list[E | None], users: set[str] | None, views: Sequence[TaskFacts]) -> list[E | None]:
    """``found`` (the entries of ``views``, in order) less those of ``users`` (whose estimates
    may have changed; None: anyone's may have)."""
    if users is None:
        return [None] * len(found)
    if users:
        names = list(map(_USER, views))
        for user in users:  # (C-level scans: a run's end names one user, the queue has thousands)
            for i in _positions(names, user):
                found[i] = None
    return found


def _positions(items: list[object], value: object) -> Iterator[int]:
    """Where ``value`` is in ``items``, by ``list.index`` (a scan in C per hit)."""
    i = -1
    while True:
        try:
            i = items.index(value, i + 1)
        except ValueError:
            return
        yield i


def _missing(found: list[E | None]) -> list[int]:
    """The positions of the entries still to be made (None)."""
    return list(_positions(cast(list[object], found), None))


def policy_inputs(
    *,
    waiting: Sequence[TaskFacts],
    active: Sequence[TaskFacts],
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
    memo = made if made is not None else QueueMemo()
    snapshot = None if capacity is None else memo.capacity(
        capacity, active, releasing, now=now, driver_cpus=driver_cpus, seen_since=seen_since,
        settle_s=config.node_settle_s)
    queue = memo.queue(waiting, history, default, driver_cpus)
    running = memo.running_list(active, history, default, driver_cpus, now, config.preempt_min_run_s,
                                min_run_by_user(config.user_guards))
    memo.keep(len(waiting), len(active))
    return queue, running, snapshot


def settles_at(task: TaskFacts, min_run_s: float = SETTLE_S) -> float | None:
    """When the task's running attempt may be preempted (seen running for ``min_run_s``);
    None: it is not running."""
    attempt = task.latest_attempt
    if attempt is None or attempt.ray_status != "RUNNING":
        return None
    seen = attempt.running_seen_at or attempt.started_at
    return None if seen is None else seen + min_run_s


def _stopping(task: TaskFacts) -> bool:
    """Its Ray job is being stopped (preempted, time limit, watchdog, cancel)."""
    attempt = task.latest_attempt
    return task.state is TaskState.CANCELING or (attempt is not None and bool(attempt.stop_reason))


def _began(task: TaskFacts, now: float) -> float:
    """When the task's current attempt began, as far as the log knows."""
    attempt = task.latest_attempt
    if attempt is None:
        return now
    return attempt.started_at or attempt.submitted_at or attempt.decided_at


def _interrupted(t: TaskFacts) -> bool:
    """Its last attempt was stopped by the operator (``INTERRUPTED``): it resumes first."""
    return t.latest_attempt is not None and t.latest_attempt.failure_kind is FailureKind.INTERRUPTED

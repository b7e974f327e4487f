"""What the reactor knows: every unfinished task, folded from the log with ``evolve_task``.

The reactor keeps nothing that the log cannot rebuild. On start it reads the ``tasks``
projection (itself the fold of the log) together with that projection's checkpoint in one
read transaction (``argus.views.reactor_start``), then folds every later event from its
subscription.
"""

from __future__ import annotations

from bisect import bisect_left

from argus.events import (
    AttemptEnded, CapacityObserved, ClusterUnreachable, HoldKind, NodeCapacity, NodeHeld, NodeReleased, Recorded,
    UserCreated, UserLimitsSet,
)
from argus.lifecycle import AttemptStatus, TaskState
from argus.scheduler.history import RuntimeHistory, run_key, run_seconds
from argus.scheduler.inputs import QueueMemo, with_driver
from argus.scheduler.ledger import Commitment
from argus.views.reactor_start import ReactorStart
from projections import TaskView, evolve_task
from projections.cluster import NodeHold
from projections.tasks import TASK_EVENT_TYPES
from projections.usage import UsageLedger, ended_usage

__all__ = ["ReactorState"]


class _Sorted:
    """Task views kept in the order of a fixed number per task, changed in place as tasks
    change: a turn asks for the waiting and the active tasks, and sorting thousands of
    them again after every event was a fifth of a simulation's time."""

    __slots__ = ("keys", "views")

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.views: list[TaskView] = []

    def put(self, key: int, view: TaskView) -> None:
        i = bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            self.views[i] = view
        else:
            self.keys.insert(i, key)
            self.views.insert(i, view)

    def drop(self, key: int) -> None:
        i = bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            del self.keys[i]
            del self.views[i]


class ReactorState:
    """Unfinished tasks by id, the last capacity the reactor recorded, and what the ledger
    needs beyond the tasks: when each node's unbroken run of observations began, and the
    attempts that ended but that Ray has not been observed since (``releasing``)."""

    def __init__(self, half_life_s: float, driver_cpus: float = 0.0) -> None:
        self.driver_cpus = driver_cpus
        self.seen_since: dict[str, float] = {}
        self.releasing: dict[str, Commitment] = {}  # by submission id
        self.queue_memo = QueueMemo()  # the policy's queue entries, made again only on change
        # waiting() in submission order, active() in the order tasks were first folded
        self._waiting = _Sorted()
        self._active = _Sorted()
        self._ordinal: dict[str, int] = {}  # task id -> when it was first folded
        self._folded = 0  # tasks folded so far (the next ordinal)
        self.tasks: dict[str, TaskView] = {}
        self.position = 0
        self.last_capacity: tuple[NodeCapacity, ...] | None = None
        self.cluster_reachable: bool | None = None
        self.runtimes = RuntimeHistory()  # succeeded runs: the estimates of the others
        self.usage = UsageLedger(half_life_s)  # ended attempts' GPU-seconds, decayed (fairshare)
        self.gpu_caps: dict[str, float] = {}  # by user: GPUs their tasks may hold at once (UserLimitsSet)
        self._admins: set[str] = set()  # not limited
        # Nodes held from admitting, by (node id, kind): drained or quarantined (NodeHeld).
        self.holds: dict[tuple[str, HoldKind], NodeHold] = {}

    @classmethod
    def load(cls, start: ReactorStart, half_life_s: float, driver_cpus: float = 0.0) -> "ReactorState":
        """The state from the projections' snapshot (``argus.views.reactor_start``). (Ended
        attempts awaiting release are not kept across a restart: the first observation of
        the new leader comes after every end it could have missed.)"""
        state = cls(half_life_s, driver_cpus)
        state.usage = start.usage
        state.position = start.position
        for task in start.tasks:
            state._set(task)
        state.runtimes = start.runtimes
        state.gpu_caps, state._admins = start.gpu_caps, start.admins
        cluster = start.cluster
        if cluster is not None:
            state.cluster_reachable = cluster.reachable
            state.last_capacity = cluster.nodes
            state.holds = {(h.node_id, h.kind): h for h in cluster.holds}
            if cluster.reachable:  # since at least then (conservative: maybe earlier)
                state.seen_since = {n.node_id: cluster.observed_at for n in cluster.nodes}
        return state

    def fold(self, rec: Recorded) -> None:
        """Apply one event from the log (events at or before ``position`` are ignored)."""
        if rec.position <= self.position:
            return
        self.position = rec.position
        if rec.type in TASK_EVENT_TYPES:
            task_id: str = rec.event.task_id  # type: ignore[attr-defined]
            if rec.type != "TaskSubmitted" and task_id not in self.tasks:
                return  # a task that ended before our snapshot: nothing to do
            before = self.tasks.get(task_id)
            view = evolve_task(before, rec)
            if isinstance(rec.event, AttemptEnded):  # as the gpu_usage projection adds it
                for user, hour, gpu_s in ended_usage(before, view):
                    self.usage.add(user, hour, gpu_s)
                self._release_later(before, rec.event)
            if view.state.is_terminal():
                self._drop(task_id)
                seconds = run_seconds(view) if view.state is TaskState.SUCCEEDED else None
                if seconds is not None:
                    self.runtimes.add(run_key(view), seconds)
            else:
                self._set(view)
        elif isinstance(rec.event, CapacityObserved):
            self._observed(rec.event)
        elif isinstance(rec.event, ClusterUnreachable):
            self.cluster_reachable = False
            self.seen_since = {}  # every node must be seen again, and settle, after an outage
        elif isinstance(rec.event, NodeHeld):
            e = rec.event
            self.holds[(e.node_id, e.kind)] = NodeHold(node_id=e.node_id, ip=e.ip, kind=e.kind, reason=e.reason,
                                                      by=e.by, since=e.held_at)
        elif isinstance(rec.event, NodeReleased):
            self.holds.pop((rec.event.node_id, rec.event.kind), None)
        elif isinstance(rec.event, UserLimitsSet):
            self._limits_set(rec.event)
        elif isinstance(rec.event, UserCreated) and rec.event.is_admin:
            self._admins.add(rec.event.user_id)

    def _limits_set(self, event: UserLimitsSet) -> None:
        """An admin changed a user's GPU cap: it holds from the next plan on."""
        if event.max_gpus > 0 and event.user_id not in self._admins:
            self.gpu_caps[event.user_id] = event.max_gpus
        else:
            self.gpu_caps.pop(event.user_id, None)

    def _observed(self, event: CapacityObserved) -> None:
        at = event.observed_at
        self.seen_since = {n.node_id: self.seen_since.get(n.node_id, at) for n in event.nodes}
        self.last_capacity = tuple(event.nodes)
        self.cluster_reachable = True
        # Every end folded so far was recorded before this observation was taken (the
        # reactor observes at the start of a turn): Ray's count now shows what came back.
        self.releasing = {}

    def _release_later(self, before: TaskView | None, event: AttemptEnded) -> None:
        """An attempt that reached Ray stays committed until Ray is observed after its end."""
        attempt = before.latest_attempt if before is not None else None
        if attempt is None or attempt.ended or event.ray_status == AttemptStatus.NOT_SUBMITTED:
            return
        assert before is not None
        self.releasing[event.submission_id] = Commitment(
            task_id=before.task_id, demand=with_driver(before.demand, self.driver_cpus),
            node_ids=attempt.node_ids, ended_at=event.ended_at)

    def waiting(self) -> list[TaskView]:
        """Tasks not yet handed to Ray, in FIFO order (submission position)."""
        return list(self._waiting.views)

    def active(self) -> list[TaskView]:
        """Tasks that may hold a Ray job (including ones being canceled)."""
        return list(self._active.views)

    def has_waiting(self) -> bool:
        return bool(self._waiting.views)

    def _set(self, view: TaskView) -> None:
        """``view`` is the task's state now (not terminal): file it as waiting or active."""
        task_id = view.task_id
        self.tasks[task_id] = view
        ordinal = self._ordinal.get(task_id)
        if ordinal is None:
            ordinal = self._ordinal[task_id] = self._folded
            self._folded += 1
        if view.state.is_waiting():
            self._waiting.put(view.seq, view)
        else:
            self._waiting.drop(view.seq)
        if view.state.holds_ray_job() or view.state is TaskState.CANCELING:
            self._active.put(ordinal, view)
        else:
            self._active.drop(ordinal)

    def _drop(self, task_id: str) -> None:
        view = self.tasks.pop(task_id, None)
        ordinal = self._ordinal.pop(task_id, None)
        if view is not None:
            self._waiting.drop(view.seq)
        if ordinal is not None:
            self._active.drop(ordinal)

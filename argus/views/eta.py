"""Estimated start times of the waiting tasks, as ``GET /tasks/{id}`` and ``/queue`` show
them: the scheduler's own policy run forward (``argus.scheduler.eta``) from the log's
projections: the unfinished tasks, the cluster as last observed and the run-time history.

One forward run serves every request for a while: it is redone only when the log has
moved and ``min_interval_s`` has passed. It reads whole views only of what the policy runs
forward: the first ``DEFAULT_HORIZON`` waiting tasks in the shown order and the tasks
holding Ray jobs. The rest of the line, up to ``DEFAULT_LIMIT`` (1,000), gets the coarse
estimate (``argus.scheduler.eta``) from its queue entries and workloads.

Read-side assembly, hence in ``argus.views`` (the API serves what it gives).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from typing import NamedTuple, TypeVar

import msgspec

from argus.config import ArgusConfig
from argus.events import Demand
from argus.lifecycle import TaskState
from argus.scheduler import Capacity, PolicyConfig, RunningTask, queue_order
from argus.scheduler.eta import DEFAULT_HORIZON, DEFAULT_LIMIT, estimate_starts
from argus.scheduler.eta_calibration import EtaCalibration, StartRange
from argus.scheduler.fairshare import fair_pass
from argus.scheduler.history import RunKey, RuntimeHistory
from argus.scheduler.inputs import policy_inputs, with_driver
from argus.scheduler.model import QueuedTask
from argus.store import EventStore
from argus.store.dbfile import read_transaction
from argus.views.fair_inputs import read_fair_inputs
from argus.views.queue import fair_view, queue_page
from projections.cluster import read_cluster
from projections.queue import QueueEntry
from projections.reads import ProjectionReads
from projections.runtime_stats import read_runtime_history
from projections.tasks import TASK_FOLD
from projections.tasks_read import TaskDetail, TaskSummary, task_workloads, tasks_in_states
from projections.users import gpu_caps

__all__ = ["DryRun", "EtaBoard", "Estimates", "with_estimates"]

log = logging.getLogger(__name__)


class Estimates(NamedTuple):
    """What one refresh gives: each waiting task's point ETA and its 80 % interval
    (``argus.scheduler.eta_calibration``; none until enough ETAs have come true or not),
    by task id. A task the forward run gave no start (no cluster seen yet, or it never
    fits by these estimates) has its reservation's, where the reactor made one."""

    starts: dict[str, float]
    ranges: dict[str, StartRange]


Estimated = TypeVar("Estimated", QueueEntry, TaskSummary, TaskDetail)


def with_estimates(item: Estimated, etas: Estimates) -> Estimated:
    """A queue entry, task-list row or task page with its estimated start and interval
    (none for a task that is not waiting, or past the first ``DEFAULT_LIMIT`` in line).
    The one place all three get them, so they show the same."""
    task_id = item.task_id or ""
    span = etas.ranges.get(task_id)
    return msgspec.structs.replace(item, expected_start=etas.starts.get(task_id),
                                   start_earliest=span.earliest if span else None,
                                   start_latest=span.latest if span else None)


class DryRun(NamedTuple):
    """A dry run's answer (``EtaBoard.dry_run``); None: not known."""

    position: int | None
    expected_start: float | None
    start_range: StartRange | None


class EtaBoard:
    """The latest estimated starts and their intervals, by task id (tasks past
    ``DEFAULT_LIMIT`` have none).

    A request never waits for a new refresh (a forward run takes ~0.1 s on a long queue)
    once there is a result: it gets the last one while the next is made in the background.
    Only the first request waits, so that a task's first look shows its estimate.

    The intervals learn from this board's own ETAs: each task's first, scored when it
    starts (``calibration``; kept in memory, so a restarted API learns again)."""

    def __init__(self, store: EventStore, config: ArgusConfig, min_interval_s: float = 5.0) -> None:
        self.store, self.config, self.min_interval_s = store, config, min_interval_s
        self.reads = ProjectionReads(store)
        self._estimates = Estimates(starts={}, ranges={})
        self._head = -1
        self._at = -float("inf")
        self._refresh: asyncio.Task[None] | None = None  # the refresh under way
        self.calibration = EtaCalibration()  # driven by one refresh at a time

    async def estimates(self) -> Estimates:
        if self._refresh is None and time.monotonic() - self._at >= self.min_interval_s:
            self._at = time.monotonic()
            head = await self.store.head_position()
            if head != self._head and self._refresh is None:
                self._refresh = asyncio.get_running_loop().create_task(self._run(head))
        if self._refresh is not None and self._head < 0:
            await asyncio.shield(self._refresh)  # no result yet: the first one is worth the wait
        return self._estimates

    async def _run(self, head: int) -> None:
        try:
            self._estimates = await self.reads.read_view(self._compute)
            self._head = head
        except Exception:  # noqa: BLE001 - estimates are a convenience: keep the last ones
            log.exception("estimating start times failed; keeping the last estimates")
            self._head = max(self._head, 0)  # do not make the next request wait for a retry
        finally:
            self._refresh = None

    def _compute(self, db: sqlite3.Connection) -> Estimates:
        sched = self.config.v2.scheduler
        now = time.time()
        line = self._line(db, now, with_usage=False)
        if line.capacity is None:
            return Estimates(starts=dict(line.reserved), ranges={})
        starts = estimate_starts(line.queue, line.running, line.capacity, now,
                                 PolicyConfig.from_scheduler(sched, gpu_caps=line.gpu_caps), in_line=True)
        self._score(db, starts)
        calibration = self.calibration
        calibration.overdue(now)
        ranges = calibration.give_line(now, starts, ahead={t.task_id for t in line.queue[:DEFAULT_HORIZON]})
        # (reservations after the scoring: the intervals learn from the forward run's ETAs only)
        return Estimates(starts={**line.reserved, **starts}, ranges=ranges)

    def _score(self, db: sqlite3.Connection, starts: dict[str, float]) -> None:
        """The ETAs of tasks that left the line since: scored if they started, forgotten if
        they ended without starting (canceled)."""
        left = [t for t in self.calibration.pending if t not in starts]
        for task_id, view in TASK_FOLD.load_many(db, left).items():
            asked = self.calibration.pending[task_id].given_at
            began = [a.decided_at for a in view.attempts if a.decided_at >= asked]
            if began:
                self.calibration.started(task_id, min(began))
            elif not view.state.is_waiting():
                self.calibration.forget(task_id)

    def _line(self, db: sqlite3.Connection, now: float, with_usage: bool = True) -> "_Line":
        """The waiting tasks as the policy sees them, in the order shown (the first
        ``DEFAULT_HORIZON`` from their views, the rest coarsely), what runs, the cluster
        (None: not seen, or unreachable) and (``with_usage``, under fairshare) each user's
        usage, read together."""
        sched = self.config.v2.scheduler
        with read_transaction(db):
            shown = queue_page(db, sched.policy, limit=DEFAULT_LIMIT, fair=fair_view(self.config, now)).items
            head, rest = shown[:DEFAULT_HORIZON], shown[DEFAULT_HORIZON:]
            found = TASK_FOLD.load_many(db, [e.task_id for e in head if e.task_id])
            workloads = task_workloads(db, [e.task_id for e in rest if e.task_id])
            active = tasks_in_states(db, [s for s in TaskState if s.holds_ray_job() or s is TaskState.CANCELING])
            cluster = read_cluster(db)
            history = read_runtime_history(db)
            caps = gpu_caps(db)
            usage = read_fair_inputs(db, sched, now, self.config.entrypoint_num_cpus).usage \
                if with_usage and sched.policy == "fairshare" else {}
        reachable = cluster is not None and cluster.reachable
        waiting = [found[e.task_id] for e in head if e.task_id in found]
        queue, running, capacity = policy_inputs(
            waiting=waiting, active=active, capacity=list(cluster.nodes) if reachable and cluster else None,
            now=now, config=sched, driver_cpus=self.config.entrypoint_num_cpus, runtimes=history)
        queue += self._coarse(rest, workloads, history)
        reserved = {t.task_id: t.expected_start for t in waiting if t.expected_start is not None}
        return _Line(queue=queue, running=running, capacity=capacity, history=history, usage=usage,
                     full=len(shown) >= DEFAULT_LIMIT, gpu_caps=caps, reserved=reserved)

    async def dry_run(self, user: str, workload: str, demand: Demand, priority: int,
                      time_limit_s: float | None) -> DryRun:
        """Where a task submitted now would wait (its place in the policy's order, 1 = next)
        and when it would start, with its interval, as this board estimates the others
        (``sbatch --test-only``); None where not known (no cluster seen; past the first
        ``DEFAULT_LIMIT`` in line)."""
        return await self.reads.read_view(
            lambda db: self._dry_run(db, user, workload, demand, priority, time_limit_s))

    def _dry_run(self, db: sqlite3.Connection, user: str, workload: str, demand: Demand, priority: int,
                 time_limit_s: float | None) -> DryRun:
        sched = self.config.v2.scheduler
        now = time.time()
        line = self._line(db, now)
        key = RunKey(user, workload, demand.nnodes, demand.n_gpus_per_node)
        estimate = time_limit_s or line.history.expected(key, sched.default_runtime_s)[0]
        new = QueuedTask(task_id=f"{user}-dry-run", demand=with_driver(demand, self.config.entrypoint_num_cpus),
                         seq=max((t.seq for t in line.queue), default=0) + 1, priority=priority, user=user,
                         estimate_s=estimate, limited=time_limit_s is not None)
        if sched.policy == "fairshare":
            total = sum(n.total_gpus for n in line.capacity.nodes) if line.capacity is not None else 0.0
            ordered = fair_pass([*line.queue, new], line.running, now, PolicyConfig.from_scheduler(
                sched, usage=line.usage), total).order
        else:
            ordered = queue_order(sched.policy, [*line.queue, new])
        place = ordered.index(new) + 1
        position = None if line.full and place > len(line.queue) else place  # (behind more than it read)
        if line.capacity is None:
            return DryRun(position, None, None)
        config = PolicyConfig.from_scheduler(sched, usage=line.usage, gpu_caps=line.gpu_caps)
        start = estimate_starts(ordered, line.running, line.capacity, now, config, in_line=True).get(new.task_id)
        coarse = place > DEFAULT_HORIZON  # past the forward run's horizon, as the board's own
        return DryRun(position, start, None if start is None else self.calibration.range(now, start, coarse))

    def _coarse(self, rest: list[QueueEntry], workloads: dict[str, str], history: RuntimeHistory) -> list[QueuedTask]:
        """The line past the horizon, for the coarse estimate: from the queue entries, with
        the median of each (user, workload, shape)'s runs (time limits are in the views,
        which are not read for these)."""
        default, driver = self.config.v2.scheduler.default_runtime_s, self.config.entrypoint_num_cpus
        medians: dict[RunKey, float] = {}
        out = []
        for e in rest:
            if e.task_id is None or e.user is None:
                continue  # redacted: not what this reads (it reads the queue whole)
            key = RunKey(e.user, workloads.get(e.task_id, ""), e.demand.nnodes, e.demand.n_gpus_per_node)
            if key not in medians:
                medians[key] = history.expected(key, default)[0]
            out.append(QueuedTask(task_id=e.task_id, demand=with_driver(e.demand, driver), seq=e.seq,
                                  priority=e.priority, user=e.user, next_run_at=e.next_run_at,
                                  estimate_s=medians[key]))
        return out


class _Line(NamedTuple):
    queue: list[QueuedTask]  # in the order shown
    running: list[RunningTask]
    capacity: Capacity | None  # None: the cluster is not seen, or unreachable
    history: RuntimeHistory
    usage: dict[str, float]  # fairshare: each user's decayed GPU-seconds; else empty
    full: bool  # the line is longer than what was read (DEFAULT_LIMIT)
    gpu_caps: dict[str, float]  # by user: GPUs their tasks may hold at once
    reserved: dict[str, float]  # by task id: the reactor's reservation (TaskDeferred.reserved_from)

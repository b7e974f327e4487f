"""The simulation: a virtual clock, the fake Ray port, and the reactor's own decision core.

A trace's tasks arrive as ``TaskSubmitted`` events on an in-memory log; at every instant
something happens (an arrival, a job's end, a stop's grace running out, a delayed gang
placed, a plan's expiry), the simulated reactor (``argus.sim.turns.SimReactor``) turns as
the real one does, until a turn records nothing: it observes the fake Ray, follows the
attempts, plans with ``argus.reactor.plan.plan_turn`` (the ledger, the policy) and submits
to the fake Ray. The simulator itself only plays Ray's part beyond the port: it starts each
submitted job at once and ends it when its run time is over.

The policy never sees a task's real run time. It gets what the reactor gives it: the
median of the same user's finished runs of the same shape so far, else
``default_runtime_s`` (``estimates="exact"``: each task's run time, as an exact time limit).
``placement_lag_s``: a job's gang is placed that long after it started (verl reserves its
GPUs after loading its models), so Ray's free count lags, and the ledger has to hold it.

What a stop costs (``checkpoint_every_s``): 0 resumes a stopped task where it was stopped
(a checkpoint at every stop: the optimistic model). C > 0: a task saves a checkpoint
after every C seconds of its own work, counted across its attempts as verl counts steps;
a stopped task resumes from its last one and runs the rest again. Each save is recorded
as the reactor would see it (``CheckpointObserved``), so the policy's least-loss choice of
victims works on the same facts it has in a real cluster.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from typing import Protocol
from concurrent.futures import ThreadPoolExecutor

import msgspec

from argus.config import FairShareConfig, SchedulerConfig
from argus.events import NodeCapacity, TaskSubmitted
from argus.lifecycle import AttemptStatus
from argus.rayjobs.fake import FakeRay
from argus.reactor.checkpoints import Found
from argus.reactor.state import ReactorState
from argus.scheduler import QueuedTask, RunningTask
from argus.scheduler.inputs import policy_inputs
from argus.sim.etas import EtaSampler
from argus.sim.trace import SimTask, Trace
from argus.sim.turns import SimReactor

__all__ = ["SimResult", "Simulation", "TaskOutcome", "Turner", "sim_config", "simulate"]

Observer = Callable[[float, list[QueuedTask], list[RunningTask]], None]
Progress = Callable[[float, int, int], None]  # (virtual now, tasks started, tasks in all)
_END, _ARRIVAL, _WAKE, _SAVE, _CANCEL = 0, 1, 2, 3, 4  # at one instant: ends, then arrivals, ..., then the turns
_MAX_TURNS = 12  # turns at one instant (the reactor's appends wake it again at once)


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
    lost_s: float = 0.0  # its own seconds of work stops threw away (run again after its last checkpoint)


class SimResult(msgspec.Struct, frozen=True, kw_only=True):
    policy: str
    outcomes: list[TaskOutcome]
    capacity_gpus: float
    decisions: int  # plans made (calls of the policy)
    # GPU-seconds in use, and offered, while some task waited: how much of the cluster the
    # policy used when there was work to give it.
    contended_used_gpu_s: float = 0.0
    contended_capacity_gpu_s: float = 0.0
    # ... until the last task arrived (then the cluster drains: see PolicyMetrics)
    arriving_used_gpu_s: float = 0.0
    arriving_capacity_gpu_s: float = 0.0
    # ETAs given at arrival to sampled tasks that had to wait: |estimated - actual start|,
    # and how many sampled waiting tasks got no estimate (past the horizon, or never).
    eta_errors: list[float] = []
    eta_waits: list[float] = []  # the same tasks' actual waits
    eta_coarse: list[bool] = []  # the same tasks': past the horizon (the coarse estimate)
    eta_unknown: int = 0
    # The 80 % intervals' (argus.scheduler.eta_calibration): the real start inside or not,
    # the width and the real wait, per sampled task that got one.
    eta_inside: list[bool] = []
    eta_widths: list[float] = []
    eta_range_waits: list[float] = []
    # "At the latest" bounds given (reservations waiting only for enforced time limits):
    # (task id, bound, its start) for each that started.
    promises: list[tuple[str, float, float]] = []
    # Every admission and preemption, in order: (instant, task id, "admitted" | "preempted",
    # its nodes | the task it made room for); and the instants the reactor turned at.
    decision_log: list[tuple[float, str, str, tuple[str, ...]]] = []
    instants: list[float] = []


def sim_config(policy: str, *, max_running_tasks: int = 1_000_000, backfill: bool = False,
               max_running_per_user: int = 0, default_runtime_s: float = 3600.0, preemption: bool = False,
               grace_s: float = 30.0, fairshare: FairShareConfig | None = None,
               placement: str = "bestfit", min_run_s: float = 15.0, max_preemptions: int = 0,
               move_after_s: float = 3600.0, **more: object) -> SchedulerConfig:
    """The reactor's scheduler settings for a simulation: nodes never rejoin (no settling),
    and nothing gives up waiting. ``more``: any other ``SchedulerConfig`` setting."""
    return msgspec.convert(dict(
        policy=policy, max_running_tasks=max_running_tasks, backfill=backfill,
        max_running_per_user=max_running_per_user, default_runtime_s=default_runtime_s, preemption=preemption,
        preempt_grace_s=grace_s, fairshare=fairshare or FairShareConfig(), placement=placement,
        preempt_min_run_s=min_run_s, max_preemptions=max_preemptions, move_after_s=move_after_s,
        node_settle_s=0.0, max_pending_s=0.0, **more), SchedulerConfig)


def simulate(trace: Trace, policy: str, *, max_running_tasks: int = 1_000_000, backfill: bool = False,
             max_running_per_user: int = 0, default_runtime_s: float = 3600.0, eta_every: int = 0,
             preemption: bool = False, grace_s: float = 30.0, fairshare: FairShareConfig | None = None,
             observe: Observer | None = None, placement: str = "bestfit", estimates: str = "history",
             placement_lag_s: float = 0.0, progress: Progress | None = None, min_run_s: float = 15.0,
             max_preemptions: int = 0, move_after_s: float = 3600.0, checkpoint_every_s: float = 0.0,
             settings: dict[str, object] | None = None) -> SimResult:
    """Run ``trace`` through ``policy`` on the trace's nodes; every task's start and end.
    ``eta_every`` N > 0: every Nth arriving task that has to wait is given an ETA
    (``argus.scheduler.eta``, as a user would see it) to compare with its real start.
    ``preemption``: the policy may stop preemptible tasks; a victim stops ``grace_s``
    later, goes back to its place in line and later runs only what it had left (it
    resumes from a checkpoint taken at the stop, or with ``checkpoint_every_s`` C > 0 from
    its last save, one every C seconds of its work: the module says more), only
    once it ran ``min_run_s``, at most ``max_preemptions`` times (0: no cap); for a task that
    would wait ``move_after_s`` or more, tasks that fit elsewhere are moved (0: never).
    ``observe(now, waiting, running)``: called after each instant's turns (tests);
    ``progress(now, started, total)``: now and then (every 500 instants), for long runs.
    ``settings``: any other ``SchedulerConfig`` setting (``reserve_per_model``, ...)."""
    if estimates not in ("history", "exact"):
        raise ValueError(f"estimates: 'history' or 'exact', not {estimates!r}")
    sched = sim_config(policy, max_running_tasks=max_running_tasks, backfill=backfill,
                       max_running_per_user=max_running_per_user, default_runtime_s=default_runtime_s,
                       preemption=preemption, grace_s=grace_s, fairshare=fairshare, placement=placement,
                       min_run_s=min_run_s, max_preemptions=max_preemptions, move_after_s=move_after_s,
                       **(settings or {}))
    run = Simulation(trace, sched, exact=estimates == "exact", lag=placement_lag_s, eta_every=eta_every,
                     observe=observe, progress=progress, checkpoint_every_s=checkpoint_every_s)
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # the usual case: no event loop here yet
        return asyncio.run(run.run(policy))
    with ThreadPoolExecutor(1) as pool:  # called from async code (tests): a loop of its own
        return pool.submit(asyncio.run, run.run(policy)).result()


class Turner(Protocol):
    """What the simulation drives: ``SimReactor``, or (in a test) the real ``Reactor``
    on its SQLite log, behind the same calls."""

    state: ReactorState
    submitted: list[str]  # submission ids handed to Ray since the caller last took them

    @property
    def plans(self) -> int: ...

    @property
    def plan_expires_at(self) -> float: ...

    async def arrive(self, event: TaskSubmitted, now: float) -> None: ...

    async def turn(self, now: float) -> bool: ...

    async def cancel(self, task_id: str, now: float) -> None: ...


class Simulation:
    """One run: the clock, the event heap, the fake Ray, the reactor it drives
    (``make_reactor(ray, sched)``: the simulated one unless given)."""

    def __init__(self, trace: Trace, sched: SchedulerConfig, *, exact: bool = False, lag: float = 0.0,
                 eta_every: int = 0, observe: Observer | None = None, progress: Progress | None = None,
                 make_reactor: Callable[[FakeRay, SchedulerConfig], Turner] | None = None,
                 checkpoint_every_s: float = 0.0) -> None:
        self.trace, self.sched, self.exact, self.observe, self.progress = trace, sched, exact, observe, progress
        self.checkpoint_every_s = checkpoint_every_s
        self.now = 0.0
        self.tasks = {t.task_id: t for t in trace.tasks}
        nodes = [NodeCapacity(node_id=n.node_id, ip="", total_gpus=n.gpus, free_gpus=n.gpus, total_cpus=n.cpus,
                              free_cpus=n.cpus, gpu_type=n.gpu_type) for n in trace.nodes]
        self.ray = FakeRay(nodes, clock=lambda: self.now, placement_lag_s=lag, stop_grace_s=sched.preempt_grace_s,
                           demand_of=lambda p: self.tasks[p.metadata["argus_task_id"]].demand)
        self.reactor: Turner = (make_reactor or SimReactor)(self.ray, sched)
        self.events: list[tuple[float, int, int, str]] = []
        self.began: dict[str, float] = {}  # submission id -> when its job started
        self.attempts: dict[str, list[str]] = {}  # task id -> its jobs' submission ids
        self.first_start: dict[str, float] = {}
        self.from_work: dict[str, float] = {}  # submission id -> the task's saved work it began from
        self.lost: dict[str, float] = {}  # task id -> seconds of its work stops threw away
        self.etas = EtaSampler(eta_every, sched)
        self.capacity_gpus = sum(n.gpus for n in trace.nodes)
        self.instants: list[float] = []

    async def run(self, policy: str) -> SimResult:
        for seq, task in enumerate(self.trace.tasks, start=1):
            heapq.heappush(self.events, (task.arrival, _ARRIVAL, seq, task.task_id))
            if task.cancel_at is not None:
                heapq.heappush(self.events, (max(task.cancel_at, task.arrival), _CANCEL, seq, task.task_id))
        busy_used = busy_capacity = arriving_used = arriving_capacity = 0.0
        last = 0.0
        last_arrival = max((t.arrival for t in self.trace.tasks), default=0.0)
        while self.events:
            now = self.events[0][0]
            if self.reactor.state.has_waiting():
                used = self.capacity_gpus - sum(n.free_gpus for n in self.ray.free_nodes())
                busy_used += (now - last) * used
                busy_capacity += (now - last) * self.capacity_gpus
                if now <= last_arrival:
                    arriving_used += (now - last) * used
                    arriving_capacity += (now - last) * self.capacity_gpus
            self.now = last = now
            await self._instant(now)
            if self.progress is not None and len(self.instants) % 500 == 0:
                self.progress(now, len(self.first_start), len(self.trace.tasks))
        etas = self.etas.result(self.first_start, {t.task_id: t.arrival for t in self.trace.tasks})
        log = self.reactor.decisions if isinstance(self.reactor, SimReactor) else []
        return SimResult(
            policy=policy, outcomes=self._outcomes(), capacity_gpus=self.capacity_gpus,
            decisions=self.reactor.plans, contended_used_gpu_s=busy_used, contended_capacity_gpu_s=busy_capacity,
            arriving_used_gpu_s=arriving_used, arriving_capacity_gpu_s=arriving_capacity,
            decision_log=log, instants=self.instants, eta_errors=etas.errors,
            eta_waits=etas.waits, eta_coarse=etas.coarse, eta_unknown=etas.unknown, eta_inside=etas.inside,
            eta_widths=etas.widths, eta_range_waits=etas.range_waits,
            promises=self.reactor.promises if isinstance(self.reactor, SimReactor) else [])

    async def _instant(self, now: float) -> None:
        """Everything that happens at ``now``: ends and arrivals, then the reactor's turns,
        then Ray starts what was submitted."""
        arrived: list[str] = []
        changed = False  # anything but saves: saves alone change no decision until the next turn
        while self.events and self.events[0][0] == now:
            _, kind, number, task_id = heapq.heappop(self.events)
            changed = changed or kind != _SAVE
            if kind == _SAVE:  # (task_id: the attempt's submission id; number: the step)
                self._saved(task_id, number, now)
            elif kind == _ARRIVAL:
                await self.reactor.arrive(self._submitted(self.tasks[task_id], now), now)
                arrived.append(task_id)
            elif kind == _CANCEL:
                await self.reactor.cancel(task_id, now)
            elif kind == _END:
                job = self.ray.jobs.get(task_id)  # an end carries its submission id
                if job is not None and job.status is AttemptStatus.RUNNING:  # not stopped meanwhile
                    self.ray.succeed(task_id)
        if not changed:
            return
        self.instants.append(now)
        for _ in range(_MAX_TURNS):
            if not await self.reactor.turn(now):
                break
        self._start_submitted(now)
        self._wake_for_what_comes(now)
        self.etas.sample(arrived, self.reactor.state, now, self.first_start)
        if self.observe is not None:
            state = self.reactor.state
            queue, running, _ = policy_inputs(waiting=state.waiting(), active=state.active(), capacity=None, now=now,
                                              config=self.sched, runtimes=state.runtimes)
            self.observe(now, queue, running)

    def _submitted(self, task: SimTask, now: float) -> TaskSubmitted:
        return TaskSubmitted(
            task_id=task.task_id, user=task.user, workload="trace", kind="advanced", spec_raw="", spec={},
            command_raw="", command="", demand=task.demand, priority=task.priority, preemptible=task.preemptible,
            time_limit_s=task.time_limit if task.time_limit is not None else task.runtime if self.exact else None,
            max_attempts=1_000_000, submitted_at=now)

    def _start_submitted(self, now: float) -> None:
        """Ray starts every job handed to it at once; it ends when its task's remaining run
        time is over (what earlier, preempted attempts ran is not run again)."""
        submitted, self.reactor.submitted = self.reactor.submitted, []
        for sid in submitted:
            if self.ray.jobs[sid].status is not AttemptStatus.PENDING:
                continue
            task_id = self.ray.jobs[sid].payload.metadata["argus_task_id"]
            done = self._resumes_from(task_id)
            self.ray.start(sid)
            self.began[sid] = now
            self.from_work[sid] = done
            self.first_start.setdefault(task_id, now)
            self.attempts.setdefault(task_id, []).append(sid)
            heapq.heappush(self.events, (now + max(0.0, self.tasks[task_id].runtime - done), _END, 0, sid))
            limit = self.tasks[task_id].time_limit
            if limit is not None:  # the reactor looks then, and stops it if it still runs
                heapq.heappush(self.events, (now + limit, _WAKE, 0, ""))
            self._next_save(sid, task_id, done, now)

    def _resumes_from(self, task_id: str) -> float:
        """The seconds of ``task_id``'s work its next attempt starts from: what its last
        attempt had done when stopped, down to its last checkpoint (the rest is lost)."""
        attempts = self.attempts.get(task_id)
        if not attempts:
            return 0.0
        sid = attempts[-1]
        end = self.ray.jobs[sid].end_time
        done = self.from_work[sid] + (end - self.began[sid] if end is not None else 0.0)
        every = self.checkpoint_every_s
        kept = max(self.from_work[sid], done // every * every) if every > 0 else done
        self.lost[task_id] = self.lost.get(task_id, 0.0) + done - kept
        return kept

    def _next_save(self, sid: str, task_id: str, done: float, now: float) -> None:
        """Schedule the attempt's next checkpoint (after every ``checkpoint_every_s`` of its
        task's work), when it can be stopped at all and will not have ended first."""
        every, task = self.checkpoint_every_s, self.tasks[task_id]
        if every <= 0 or not (self.sched.preemption and task.preemptible):
            return
        step = int(done // every) + 1
        if step * every < task.runtime:
            heapq.heappush(self.events, (now + step * every - done, _SAVE, step, sid))

    def _saved(self, sid: str, step: int, now: float) -> None:
        """The attempt ``sid`` saved checkpoint ``step``, if it still runs: the reactor's
        next turn finds it (and records it, if the attempt runs as far as it knows), and
        the next one is scheduled."""
        job = self.ray.jobs.get(sid)
        if job is None or job.status is not AttemptStatus.RUNNING or not isinstance(self.reactor, SimReactor):
            return
        self.reactor.saved(sid, Found(step=step, folder=f"checkpoints/global_step_{step}", mtime=now))
        self._next_save(sid, job.payload.metadata["argus_task_id"], step * self.checkpoint_every_s, now)

    def _wake_for_what_comes(self, now: float) -> None:
        """Instants the clock alone changes something at: a stop's grace ends, a gang is
        placed, the plan expires (a reservation moves, a retry's backoff ends)."""
        wakes = [at for at in self.ray.changes_due() if at > now]
        expiry = self.reactor.plan_expires_at
        if now < expiry < float("inf"):
            wakes.append(expiry)
        for at in set(wakes):
            heapq.heappush(self.events, (at, _WAKE, 0, ""))

    def _outcomes(self) -> list[TaskOutcome]:
        ends: dict[str, float] = {}
        stops: dict[str, int] = {}
        for job in self.ray.jobs.values():
            task_id = job.payload.metadata["argus_task_id"]
            if job.status is AttemptStatus.SUCCEEDED and job.end_time is not None:
                ends[task_id] = job.end_time
            elif job.status is AttemptStatus.STOPPED:
                stops[task_id] = stops.get(task_id, 0) + 1
        return [TaskOutcome(task_id=t.task_id, user=t.user, nnodes=t.demand.nnodes, gpus=t.demand.total_gpus,
                            arrival=t.arrival, runtime=t.runtime, start=self.first_start.get(t.task_id),
                            end=ends.get(t.task_id), preempted=stops.get(t.task_id, 0),
                            lost_s=self.lost.get(t.task_id, 0.0)) for t in self.trace.tasks]

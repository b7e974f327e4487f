"""A reactor turn, decided once: ``decide_turn`` for the reactor and for ``argus sim``.

A turn is a fixed sequence of decisions, each a pure function of what the log says (the
``ReactorState``), what the turn observed (``Observations``), the turn's one ``now`` and the
settings. Each stage needs the log as the stage before left it (a task whose attempt just
ended is no longer active when the policy plans), so ``decide_turn`` is a generator: it
yields a ``TurnPlan`` per stage, and the executor carries it out (records its events and
folds them into the state, sends its stops, reads the logs it asks for, starts its
attempts) before asking for the next. Two executors run it: ``Reactor`` (Ray and the
SQLite log) and ``argus.sim.turns.SimReactor`` (the fake Ray and an in-memory log).

The stages, in order:
1. the cluster: its count recorded when it changed (or while ended attempts await release);
   nodes quarantined, or let out, on their keepers' reports;
2. the followed attempts: placement timeouts, time limits and stalls marked (a stalled
   attempt's driver asked for its stacks, its stop sent once they came), stops sent once, and
   what Ray said made into events, or what the job's driver reported, when it says the
   command exited before Ray does (an attempt that failed on its own is classified from
   its log, which the plan asks the executor to read first);
3. checkpoints found and progress reported for running attempts;
4. cancels of tasks that hold no Ray job;
5. admission: the policy's plan (made again only when the log, the cluster or the clock
   could change it), preemptions, attempts to start, wait reasons.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import msgspec

from argus.config import SchedulerConfig
from argus.events import (
    AttemptEnded, AttemptOutputTruncated, AttemptPlacementTimedOut, AttemptPreempted, AttemptProgressed, AttemptRunning, AttemptStacksCaptured,
    AttemptTimeLimitReached, CapacityObserved, CheckpointObserved, ClusterUnreachable, EventBase, NodeCapacity,
    StackedProcess, TaskCanceled, TaskDeferred,
)
from argus.lifecycle import AttemptStatus, TaskState
from argus.rayjobs.gateway import JobObservation
from argus.nodepool.stacks import StacksSummary
from argus.rayjobs.reports import ExitReport, OutputSummary, ProgressReport
from argus.nodepool.keeper import NodeReport
from argus.reactor.attempts import outcome_events
from argus.reactor.holds import quarantine_news
from argus.reactor.checkpoints import Found
from argus.reactor.classify import classify_failure, last_step
from argus.reactor.plan import Classify, attempt_step, plan_turn, wait_news
from argus.reactor.stall import stalled
from argus.reactor.state import ReactorState
from argus.scheduler import Reason
from argus.scheduler.core import AdmissionPlan
from projections import TaskView

__all__ = ["Append", "Observations", "Start", "TurnMemory", "TurnPlan", "awaiting_stacks", "decide_turn", "followed"]

_FOLLOWED = (AttemptStatus.SUBMITTED, AttemptStatus.RUNNING)


class Observations(msgspec.Struct, kw_only=True):
    """What the executor saw at the start of the turn. ``capacity`` None: Ray did not
    answer its count (``unreachable`` says how). ``answering`` False: Ray stopped answering
    after its count (the executor sets it, also mid-turn): nothing more is followed or
    admitted in this turn."""

    capacity: tuple[NodeCapacity, ...] | None
    unreachable: str = ""
    answering: bool = True
    jobs: dict[str, JobObservation | None] = {}  # asked this turn; None: Ray has no such job
    placements_overdue: list[AttemptPlacementTimedOut] = []  # argus.reactor.watchdog
    checkpoints: dict[str, Found] = {}  # newest checkpoint found, by submission id
    exits: dict[str, ExitReport] = {}  # the drivers' reports of their commands' exits
    progress: dict[str, ProgressReport] = {}  # the drivers' reports of their training's progress
    stacks: dict[str, StacksSummary] = {}  # the drivers' stack dumps, of stalled attempts (awaiting_stacks)
    node_reports: list[NodeReport] = []  # the nodes' keepers' reports, when read this turn
    leftover_tasks: dict[str, TaskView] = {}  # the tasks those reports name, by id
    clearing: dict[str, str] = {}  # nodes an ended attempt's processes may still be on, and why
    log_tails: dict[str, str] = {}  # filled by the executor for a plan's ``read_logs``


class Append(NamedTuple):
    """Events for one stream: the task's (as decided on ``task``), or the cluster's
    (``task`` None). ``expect``: only if the task's stream is still at ``task``'s version."""

    task: TaskView | None
    events: list[EventBase]
    expect: bool = False


class Start(NamedTuple):
    """An admitted task to start an attempt of, on ``nodes`` (``note``: why it may pass)."""

    task: TaskView
    nodes: tuple[str, ...]
    note: str


class TurnPlan(msgspec.Struct, kw_only=True):
    """One stage's decisions, for the executor to carry out in this order: record
    ``appends`` (``together``: in one transaction, each stream at its version), ask the
    drivers of ``stack_requests`` for their stacks, send ``stops``, read ``read_logs`` into
    the observations, start ``starts``."""

    appends: list[Append] = []
    together: bool = False
    stack_requests: list[str] = []
    stops: list[str] = []
    read_logs: list[str] = []
    starts: list[Start] = []
    admission: AdmissionPlan[TaskView] | None = None  # the policy's plan, on the stage that made it


class TurnMemory:
    """What a turn remembers of earlier turns, kept by its executor: the stops already
    sent, and what the last plan was made on (the same log, cluster and clock would give
    the same plan: a steady turn with 10,000 waiting is then O(1), not a pass)."""

    def __init__(self) -> None:
        self.stops_sent: set[str] = set()
        self.stacks_asked: set[str] = set()
        self.planned_on: tuple[int, tuple[NodeCapacity, ...] | None, tuple[str, ...]] | None = None
        self.plan_expires_at = 0.0
        self.plans = 0  # plans made (calls of the policy)

    def forget(self) -> None:
        """A new leader, or a turn that failed: plan again at the next turn."""
        self.planned_on, self.plan_expires_at = None, 0.0


def awaiting_stacks(task: TaskView, sched: SchedulerConfig) -> bool:
    """Its attempt stalled and its stop waits for its driver's stack dumps (at most
    ``stall.stacks_wait_s``): a hung run's stacks are what tells why it hung."""
    attempt = task.latest_attempt
    return (attempt is not None and attempt.stalled_at is not None and attempt.stacks_at is None
            and sched.stall.stacks_wait_s > 0 and not attempt.ended and task.state is TaskState.RUNNING)


def followed(state: ReactorState) -> list[TaskView]:
    """The tasks whose latest attempt Ray may be running (SUBMITTED or RUNNING)."""
    return [t for t in state.active() if (a := t.latest_attempt) is not None and a.ray_status in _FOLLOWED]


def decide_turn(state: ReactorState, obs: Observations, now: float, sched: SchedulerConfig, memory: TurnMemory,
                *, driver_cpus: float = 0.0, waits: bool = True) -> Iterator[TurnPlan]:
    """The turn's plans, stage by stage; read ``state`` again after each is carried out.
    ``waits`` False: wait reasons are neither worked out nor recorded, except entering or
    leaving ``preempting``, which orders the queue (the simulator)."""
    cluster = _cluster_news(state, obs, now)
    if cluster is not None:
        yield TurnPlan(appends=[Append(None, [cluster])])
    if obs.node_reports and obs.capacity is not None:
        holds = quarantine_news(obs.node_reports, state.holds, obs.leftover_tasks, obs.capacity, now)
        if holds:
            yield TurnPlan(appends=[Append(None, holds)])
    if obs.capacity is not None and obs.answering:
        yield from _follow(state, obs, now, sched, memory)
    yield TurnPlan(appends=_merged(_checkpoints(state, obs, now) + _progress(state, obs, now, sched)
                                   + _output_news(state, obs, now)) + _cancels(state, now))
    yield from _admit(state, obs, now, sched, memory, driver_cpus, waits)


def _cluster_news(state: ReactorState, obs: Observations, now: float) -> EventBase | None:
    if obs.capacity is None:
        if state.cluster_reachable is False:
            return None
        return ClusterUnreachable(error=(obs.unreachable or "Ray did not answer")[:500], observed_at=now)
    # Recorded when it changed, and while the ledger holds ended attempts: this
    # observation is what releases them, and a replay must see it too.
    if state.cluster_reachable is not True or obs.capacity != state.last_capacity or state.releasing:
        return CapacityObserved(nodes=list(obs.capacity), observed_at=now)
    return None


def _follow(state: ReactorState, obs: Observations, now: float, sched: SchedulerConfig,
            memory: TurnMemory) -> Iterator[TurnPlan]:
    """Stage 2: mark what must stop, stop it once, and turn what Ray said into events."""
    asked = [t for t in followed(state) if t.attempts[-1].submission_id in obs.jobs]
    if not asked:
        return
    yield TurnPlan(appends=_marks(state, obs, asked, now, sched))
    asked = [t for t0 in asked if (t := state.tasks.get(t0.task_id)) is not None and t.attempts
             and t.attempts[-1].submission_id == t0.attempts[-1].submission_id]
    stops = [a.submission_id for t in asked if (a := t.attempts[-1]).submission_id not in memory.stops_sent
             and (t.state is TaskState.CANCELING or (a.stop_reason and not awaiting_stacks(t, sched)))]
    requests = [t.attempts[-1].submission_id for t in asked if awaiting_stacks(t, sched)]
    steps = [(task, attempt_step(task, _seen(task, obs), now, sched, obs.exits.get(task.attempts[-1].submission_id)))
             for task in asked]
    to_read = [t.attempts[-1].submission_id for t, step in steps if isinstance(step, Classify)]
    if to_read:
        yield TurnPlan(stops=stops, read_logs=to_read, stack_requests=requests)
        stops, requests = [], []
    appends = []
    for task, step in steps:
        events = _outcome(task, obs, now, sched) if isinstance(step, Classify) else step
        if events and isinstance(events[0], AttemptEnded) and _driver_says_it_ended(task, obs):
            events = [msgspec.structs.replace(events[0], reported_by="driver"), *events[1:]]
        if events and isinstance(events[0], AttemptEnded):
            report = obs.exits.get(task.attempts[-1].submission_id)
            if report is not None and report.output is not None:  # the whole count, before its end
                events = [_truncated(task, report.output, now, final=True), *events]
        if events and isinstance(events[0], AttemptRunning):
            node = events[0].driver_node_id
            ip = next((n.ip for n in obs.capacity or () if n.node_id == node), "")
            events = [msgspec.structs.replace(events[0], driver_node_ip=ip)]
        if events:
            appends.append(Append(task, events))
    yield TurnPlan(appends=appends, stops=stops, stack_requests=requests)


def _seen(task: TaskView, obs: Observations) -> JobObservation | None:
    """What Ray said of the attempt, unless its driver reported that the command exited
    and Ray has not yet said it ended: the driver's word ends it now (the next look at Ray
    would come up to a poll later). An attempt being stopped ends by Ray's word: its
    command's exit is the stop's doing, and Ray says how the stop went."""
    attempt = task.attempts[-1]
    ray = obs.jobs.get(attempt.submission_id)
    report = obs.exits.get(attempt.submission_id)
    if report is None or not _driver_says_it_ended(task, obs):
        return ray
    assert ray is not None
    return JobObservation(
        submission_id=attempt.submission_id,
        status=AttemptStatus.SUCCEEDED if report.exit_code == 0 else AttemptStatus.FAILED,
        message=f"the command exited with code {report.exit_code} (its driver's report)",
        start_time=ray.start_time, end_time=report.exited_at, driver_exit_code=report.exit_code,
        driver_node_id=ray.driver_node_id)


def _driver_says_it_ended(task: TaskView, obs: Observations) -> bool:
    """Its driver reported the command's exit while Ray still has the job running. Where
    Ray has no such job (a head that came back as another cluster), Ray's word decides:
    the command died with the cluster, and its exit says no more than that."""
    attempt = task.attempts[-1]
    ray = obs.jobs.get(attempt.submission_id)
    return (attempt.submission_id in obs.exits and ray is not None and not ray.is_terminal
            and task.state is not TaskState.CANCELING and not attempt.stop_reason)


def _marks(state: ReactorState, obs: Observations, asked: Sequence[TaskView], now: float,
           sched: SchedulerConfig) -> list[Append]:
    """Time limits reached, stalls and placement timeouts (the watchdogs'), at most one per
    attempt, in that order: each stops its attempt (a stop reason), and says how its end
    will be classified (a time limit, the user's own bound, is not retried)."""
    marks: dict[str, EventBase] = {}
    for task in asked:
        attempt, limit = task.attempts[-1], task.time_limit_s
        observed = obs.jobs.get(attempt.submission_id)
        if observed is None or observed.is_terminal:
            continue
        if (limit is not None and attempt.started_at is not None and attempt.time_limit_reached_at is None
                and now - attempt.started_at >= limit):
            marks[task.task_id] = AttemptTimeLimitReached(
                task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
                time_limit_s=limit, ran_s=now - attempt.started_at, reached_at=now)
        elif task.state is TaskState.RUNNING and (stall := stalled(task, now, sched.stall)) is not None:
            marks[task.task_id] = stall  # Ray says it runs; its steps say it does not
        elif awaiting_stacks(task, sched) and (stacks := _stacks_taken(task, obs, now, sched)) is not None:
            marks[task.task_id] = stacks  # its stop goes out in this turn
    for event in obs.placements_overdue:
        placed = state.tasks.get(event.task_id)
        if (placed is not None and placed.attempts and placed.attempts[-1].submission_id == event.submission_id
                and placed.task_id not in marks):
            marks[placed.task_id] = event
    return [Append(state.tasks[task_id], [event], expect=True) for task_id, event in marks.items()]


def _stacks_taken(task: TaskView, obs: Observations, now: float,
                  sched: SchedulerConfig) -> AttemptStacksCaptured | None:
    """The stalled attempt's stacks, once its driver and the keepers of its other nodes
    saved them (what came, once ``stacks_wait_s`` passed), or word that none came in that
    time (its driver may be as hung as its command)."""
    attempt = task.attempts[-1]
    assert attempt.stalled_at is not None
    summary = obs.stacks.get(attempt.submission_id)
    waited = now - attempt.stalled_at >= sched.stall.stacks_wait_s
    if summary is not None and (waited or not summary.missing):
        missing = f"no answer from the keepers of node(s) {', '.join(summary.missing)}" if summary.missing else ""
        return AttemptStacksCaptured(
            task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
            hostname=summary.hostname, processes=[StackedProcess(pid=p.pid, command=p.command, top_frame=p.top_frame)
                                                  for p in summary.processes],
            skipped=summary.skipped, dump_bytes=summary.dump_bytes,
            note="; ".join(n for n in (summary.note, missing) if n), captured_at=now)
    if not waited:
        return None
    return AttemptStacksCaptured(
        task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
        note=f"its driver saved no stacks within {sched.stall.stacks_wait_s:g} s (v2.scheduler.stall.stacks_wait_s)",
        captured_at=now)


def _outcome(task: TaskView, obs: Observations, now: float, sched: SchedulerConfig) -> list[EventBase]:
    """The events of an attempt that failed on its own: its kind read from Ray's words
    and its log (``argus.reactor.classify``)."""
    attempt = task.attempts[-1]
    observed = _seen(task, obs)
    assert observed is not None
    tail = obs.log_tails.get(attempt.submission_id, "")
    kind, evidence = classify_failure(observed.status, observed.message, tail, observed.driver_exit_code,
                                      error_type=observed.error_type)
    return outcome_events(task, ray_status=observed.status, exit_code=observed.driver_exit_code, kind=kind,
                          evidence=evidence, now=now, config=sched, step=last_step(tail))


def _checkpoints(state: ReactorState, obs: Observations, now: float) -> list[Append]:
    """Stage 3: a checkpoint found for a running attempt, when it is a step not yet
    recorded. Its time is the job's to set, so it is kept between the attempt's start and
    now: a job can make its checkpoint look no older than its start, which is what a job
    that never saves gets anyway."""
    appends = []
    for sid, found in obs.checkpoints.items():
        task = state.tasks.get(sid.rsplit("--a", 1)[0])
        attempt = task.latest_attempt if task is not None else None
        if (task is None or attempt is None or attempt.submission_id != sid or task.state is not TaskState.RUNNING
                or found.step == attempt.checkpoint_step):
            continue
        began = attempt.started_at or attempt.decided_at
        appends.append(Append(task, [CheckpointObserved(
            task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=sid, step=found.step,
            folder=found.folder, saved_at=min(max(found.mtime, began), now), observed_at=now)], expect=True))
    return appends


def _progress(state: ReactorState, obs: Observations, now: float, sched: SchedulerConfig) -> list[Append]:
    """Stage 3, too: a running attempt's progress, when its step (or its total) moved, and
    no sooner than ``progress_record_s`` after the last one recorded (by the driver's clock,
    on which both steps were timed)."""
    appends = []
    for sid, report in obs.progress.items():
        task = state.tasks.get(sid.rsplit("--a", 1)[0])
        attempt = task.latest_attempt if task is not None else None
        if (task is None or attempt is None or attempt.submission_id != sid or task.state is not TaskState.RUNNING
                or (report.step is None and report.total_steps is None) or sched.progress_record_s <= 0):
            continue
        if (report.step, report.total_steps) == (attempt.step, attempt.total_steps):
            continue
        if (attempt.step_at is not None and report.step_at is not None
                and report.step_at - attempt.step_at < sched.progress_record_s):
            continue
        appends.append(Append(task, [AttemptProgressed(
            task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=sid, step=report.step,
            step_at=report.step_at, first_step=report.first_step, total_steps=report.total_steps,
            step_time_s=report.step_time_s, observed_at=now)], expect=True))
    return appends


def _truncated(task: TaskView, output: OutputSummary, now: float, final: bool) -> AttemptOutputTruncated:
    attempt = task.attempts[-1]
    return AttemptOutputTruncated(
        task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
        budget_bytes=output.budget_bytes, total_bytes=output.total_bytes, kept_bytes=output.kept_bytes,
        dropped_bytes=output.dropped_bytes, final=final, stopped=output.stopped, observed_at=now)


def _output_news(state: ReactorState, obs: Observations, now: float) -> list[Append]:
    """Stage 3, too: a running attempt whose output just passed its budget (once: the
    whole count is recorded at its end)."""
    appends = []
    for sid, report in obs.progress.items():
        task = state.tasks.get(sid.rsplit("--a", 1)[0])
        attempt = task.latest_attempt if task is not None else None
        if (task is None or attempt is None or attempt.submission_id != sid or task.state is not TaskState.RUNNING
                or report.output is None or attempt.output_bytes is not None):
            continue
        appends.append(Append(task, [_truncated(task, report.output, now, final=False)], expect=True))
    return appends


def _merged(appends: list[Append]) -> list[Append]:
    """One append per task (each is made on the task's version as the turn read it)."""
    by_task: dict[str, Append] = {}
    for append in appends:
        assert append.task is not None
        seen = by_task.get(append.task.task_id)
        by_task[append.task.task_id] = append if seen is None else seen._replace(events=seen.events + append.events)
    return list(by_task.values())


def _cancels(state: ReactorState, now: float) -> list[Append]:
    """Stage 4: a cancel request on a task with no live Ray job ends it at once."""
    return [Append(task, [TaskCanceled(task_id=task.task_id, by=task.cancel_requested_by or "?", canceled_at=now)])
            for task in state.active() if task.state is TaskState.CANCELING
            and (task.latest_attempt is None or task.latest_attempt.ended)]


def _admit(state: ReactorState, obs: Observations, now: float, sched: SchedulerConfig, memory: TurnMemory,
           driver_cpus: float, waits: bool) -> Iterator[TurnPlan]:
    """Stage 5: the policy's plan, when the log, the cluster or the clock could change it."""
    capacity = obs.capacity if obs.answering else None
    inputs = (state.position, capacity, tuple(sorted(obs.clearing)))
    if inputs == memory.planned_on and now < memory.plan_expires_at:
        return
    plan = plan_turn(state, capacity, now, sched, driver_cpus, waits=waits, clearing=obs.clearing)
    if plan is None:
        return
    memory.plans += 1
    # Usage grows with the clock alone: a fair-share order is made again within a minute.
    fair = sched.policy == "fairshare"
    memory.planned_on, memory.plan_expires_at = inputs, min(plan.expires_at, now + 60.0) if fair else plan.expires_at
    preempted = []
    for task, p in plan.preemptions:  # who is stopped for whom; the stop goes out next turn
        attempt = task.latest_attempt
        if attempt is not None and not attempt.ended and not attempt.stop_reason:
            preempted.append(Append(task, [AttemptPreempted(
                task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
                by_task_id=p.for_task, by_user=p.for_user, reason=p.reason, message=p.message,
                preempted_at=now)], expect=True))
    yield TurnPlan(appends=preempted)
    # Admissions before wait reasons: they never wait for the reasons of thousands of others.
    starts = [Start(current, plan.placed.get(current.task_id, ()), plan.notes.get(current.task_id, ""))
              for task in plan.admitted
              if (current := state.tasks.get(task.task_id)) is not None and current.state.is_waiting()]
    yield TurnPlan(starts=starts)
    news = (wait_news(plan, now, sched.deferrals_per_turn) if waits else _queue_order_news(plan, now))
    yield TurnPlan(appends=[Append(task, [event], expect=True) for task, event in news], together=True,
                   admission=plan)


def _queue_order_news(plan: AdmissionPlan[TaskView], now: float) -> list[tuple[TaskView, TaskDeferred]]:
    """Without wait reasons, only entering or leaving ``preempting``: it orders the queue."""
    return [(task, TaskDeferred(task_id=task.task_id, reason=d.reason, message=d.message, needed=task.demand,
                                decided_at=now))
            for task, d in plan.deferrals if (d.reason == Reason.PREEMPTING) != (task.wait_reason == Reason.PREEMPTING)]

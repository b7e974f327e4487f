"""The simulator's reactor turn: the reactor's own state fold and decision core, with an
in-memory log and the fake Ray port in place of SQLite and Ray.

Each turn does what ``argus.reactor.Reactor.turn`` does, in its order, through the same
functions: observe the cluster (recorded when it changed, or while the ledger holds ended
attempts), follow the attempts (``attempt_step``), plan (``plan_turn``: the ledger, the
policy) and carry the plan out (preemptions, intents, submissions). Events are folded into
a ``ReactorState`` as the reactor folds its log, so the policy sees what it would see.

What the simulator leaves out: wait reasons are not recorded (they change nothing the
policy reads), except entering or leaving ``preempting``, which orders the queue.
"""

from __future__ import annotations

from collections.abc import Sequence

from argus.config import SchedulerConfig
from argus.events import (
    AttemptPreempted, AttemptStarting, AttemptSubmitted, CapacityObserved, EventBase, EventMeta, NodeCapacity,
    Recorded, SubmissionPayload, TaskDeferred, TaskSubmitted, cluster_stream, task_stream,
)
from argus.lifecycle import AttemptStatus, TaskState
from argus.rayjobs.fake import FakeRay
from argus.reactor.attempts import outcome_events
from argus.reactor.classify import classify_failure
from argus.reactor.plan import Classify, attempt_step, plan_turn
from argus.reactor.state import ReactorState
from argus.scheduler import Reason
from argus.scheduler.core import AdmissionPlan
from projections import TaskView

__all__ = ["SimReactor"]

_META = EventMeta(actor="reactor:sim")
_FOLLOWED = (AttemptStatus.SUBMITTED, AttemptStatus.RUNNING)


class SimReactor:
    """The reactor's turn on an in-memory log: ``state`` is what it has folded, ``decisions``
    the admissions and preemptions it made, in order (``(now, task id, kind, nodes)``)."""

    def __init__(self, ray: FakeRay, sched: SchedulerConfig, driver_cpus: float = 0.0) -> None:
        self.ray, self.sched, self.driver_cpus = ray, sched, driver_cpus
        self.state = ReactorState(sched.fairshare.half_life_s, driver_cpus)
        self.versions: dict[str, int] = {}
        self.decisions: list[tuple[float, str, str, tuple[str, ...]]] = []
        self.plans = 0
        self._planned_on: tuple[int, tuple[NodeCapacity, ...]] | None = None
        self._plan_expires_at = 0.0
        self._stop_sent: set[str] = set()
        self._watch: set[str] = set()  # submission ids to follow in the next turn
        self._ended_seen = 0  # how much of the fake Ray's list of ended jobs was followed
        self.submitted: list[str] = []  # submission ids handed to Ray, not yet taken by the caller
        # "At the latest" bounds (Defer.reserved_latest): the earliest given to each waiting
        # task, and, once it started, whether it started by then (task id, bound, start).
        self.promised: dict[str, float] = {}
        self.promises: list[tuple[str, float, float]] = []

    @property
    def plan_expires_at(self) -> float:
        """Until then the same log and cluster give the same plan."""
        return self._plan_expires_at

    async def arrive(self, event: TaskSubmitted, now: float) -> None:
        """A task is submitted (the API's ``TaskSubmitted``)."""
        self.record(task_stream(event.task_id), [event], now)

    def record(self, stream: str, events: Sequence[EventBase], now: float) -> None:
        """Append ``events`` to the in-memory log: fold them as the reactor folds its log."""
        for event in events:
            version = self.versions.get(stream, 0) + 1
            self.versions[stream] = version
            self.state.fold(Recorded(position=self.state.position + 1, stream=stream, version=version,
                                     type=type(event).__name__, event=event, meta=_META, owner=None,
                                     recorded_at=now))

    async def turn(self, now: float) -> bool:
        """One turn at ``now``; True when it recorded anything (the reactor would then turn
        again at once: its own appends wake it)."""
        before = self.state.position
        nodes = await self.ray.capacity()
        if (self.state.cluster_reachable is not True or tuple(nodes) != self.state.last_capacity
                or self.state.releasing):
            self.record(cluster_stream, [CapacityObserved(nodes=nodes, observed_at=now)], now)
        await self._follow(now)
        inputs = (self.state.position, tuple(nodes))
        if inputs != self._planned_on or now >= self._plan_expires_at:
            plan = plan_turn(self.state, nodes, now, self.sched, self.driver_cpus, waits=False)
            if plan is not None:
                self.plans += 1
                fair = self.sched.policy == "fairshare"
                self._planned_on = inputs
                self._plan_expires_at = min(plan.expires_at, now + 60.0) if fair else plan.expires_at
                await self._carry_out(plan, now)
        return self.state.position != before

    async def _follow(self, now: float) -> None:
        # The reactor asks Ray about every attempt it follows; an attempt whose job runs,
        # seen running and not being stopped, gives nothing new. The simulator, which sees
        # into its Ray, follows only the attempts something happened to: just submitted,
        # to be stopped, or ended (a turn over 1,000 running jobs would cost most of a run).
        ended, self._ended_seen = self.ray.ended[self._ended_seen:], len(self.ray.ended)
        watch, self._watch = self._watch | set(ended), set()
        followed = sorted((t for sid in watch if (t := self.state.tasks.get(sid.rsplit("--a", 1)[0])) is not None
                           and (a := t.latest_attempt) is not None and a.submission_id == sid
                           and a.ray_status in _FOLLOWED), key=lambda t: t.seq)  # the reactor's order
        if not followed:
            return
        seen = await self.ray.statuses([t.attempts[-1].submission_id for t in followed])
        for task in followed:
            attempt = task.attempts[-1]
            stopping = task.state is TaskState.CANCELING or bool(attempt.stop_reason)
            if stopping and attempt.submission_id not in self._stop_sent:
                await self.ray.stop(attempt.submission_id)
                self._stop_sent.add(attempt.submission_id)
            observed = seen.get(attempt.submission_id)
            step = attempt_step(task, observed, now, self.sched)
            if isinstance(step, Classify):
                assert observed is not None
                tail = await self.ray.logs_tail(attempt.submission_id)
                kind, evidence = classify_failure(observed.status, observed.message, tail,
                                                  observed.driver_exit_code, error_type=observed.error_type)
                step = outcome_events(task, ray_status=observed.status, exit_code=observed.driver_exit_code,
                                      kind=kind, evidence=evidence, now=now, config=self.sched)
            if step:
                self.record(task_stream(task.task_id), step, now)
            elif attempt.ray_status == AttemptStatus.SUBMITTED:
                self._watch.add(attempt.submission_id)  # not running yet: asked again next turn

    async def _carry_out(self, plan: AdmissionPlan, now: float) -> None:
        for task, p in plan.preemptions:
            attempt = task.latest_attempt
            if attempt is None or attempt.ended or attempt.stop_reason:
                continue
            self.decisions.append((now, task.task_id, "preempted", (p.for_task,)))
            self._watch.add(attempt.submission_id)  # its stop goes out in the next turn
            self.record(task_stream(task.task_id), [AttemptPreempted(
                task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
                by_task_id=p.for_task, by_user=p.for_user, reason=p.reason, message=p.message,
                preempted_at=now)], now)
        for task, d in plan.deferrals:  # only what orders the queue: entering or leaving ``preempting``
            if d.reserved_latest is not None:
                self.promised[task.task_id] = min(d.reserved_latest, self.promised.get(task.task_id, d.reserved_latest))
            if (d.reason == Reason.PREEMPTING) != (task.wait_reason == Reason.PREEMPTING):
                self.record(task_stream(task.task_id), [TaskDeferred(
                    task_id=task.task_id, reason=d.reason, message=d.message, needed=task.demand,
                    decided_at=now)], now)
        for admitted in plan.admitted:
            current = self.state.tasks.get(admitted.task_id)
            if current is not None and current.state.is_waiting():
                await self._start(current, plan.placed.get(current.task_id, ()), plan.notes.get(current.task_id, ""),
                                  now)

    async def _start(self, task: TaskView, nodes: tuple[str, ...], note: str, now: float) -> None:
        """The intent, the submission to (fake) Ray, and what it answered."""
        attempt_no = len(task.attempts) + 1
        sid = f"{task.task_id}--a{attempt_no:02d}"
        payload = SubmissionPayload(
            submission_id=sid, entrypoint="argus-sim", entrypoint_num_cpus=self.driver_cpus,
            entrypoint_resources={}, runtime_env={},
            metadata={"argus_task_id": task.task_id, "argus_nodes": ",".join(nodes)})
        self.decisions.append((now, task.task_id, "admitted", nodes))
        if task.task_id in self.promised:
            self.promises.append((task.task_id, self.promised.pop(task.task_id), now))
        stream = task_stream(task.task_id)
        self.record(stream, [AttemptStarting(task_id=task.task_id, attempt_no=attempt_no, submission_id=sid,
                                             payload=payload, decided_at=now, note=note, node_ids=list(nodes))], now)
        await self.ray.submit(payload)
        self.submitted.append(sid)
        self._watch.add(sid)
        self.record(stream, [AttemptSubmitted(task_id=task.task_id, attempt_no=attempt_no, submission_id=sid,
                                              submitted_at=now)], now)

"""The simulator's reactor: an executor of ``argus.reactor.turn.decide_turn`` (the reactor's
own decisions, written once) on an in-memory log and the fake Ray port in place of SQLite
and Ray.

Events are folded into a ``ReactorState`` as the reactor folds its log, so the policy sees
what it would see. What the simulator leaves out: wait reasons are not recorded (they
change nothing the policy reads), except entering or leaving ``preempting``, which orders
the queue (``decide_turn``'s ``waits=False``).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from argus.config import SchedulerConfig
from argus.events import (
    AttemptPreempted, AttemptRunning, AttemptStarting, AttemptSubmitted, EventBase, EventMeta, Recorded,
    SubmissionPayload, TaskSubmitted, cancel_events, cluster_stream, task_stream,
)
from argus.lifecycle import AttemptStatus
from argus.rayjobs.fake import FakeRay
from argus.reactor.checkpoints import Found
from argus.reactor.state import ReactorState
from argus.reactor.turn import Observations, TurnMemory, TurnPlan, decide_turn
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
        self.memory = TurnMemory()
        self._watch: set[str] = set()  # submission ids to follow in the next turn
        self._deadlines: list[tuple[float, str]] = []  # (time limit reached at, submission id)
        self._saves: dict[str, Found] = {}  # checkpoints saved since the last turn, by submission id
        self._ended_seen = 0  # how much of the fake Ray's list of ended jobs was followed
        self.submitted: list[str] = []  # submission ids handed to Ray, not yet taken by the caller
        # "At the latest" bounds (Defer.reserved_latest): the earliest given to each waiting
        # task, and, once it started, whether it started by then (task id, bound, start).
        self.promised: dict[str, float] = {}
        self.promises: list[tuple[str, float, float]] = []
        self.log: list[Recorded] | None = None  # a list: every event recorded is kept there too (tests)

    @property
    def plans(self) -> int:
        return self.memory.plans

    @property
    def plan_expires_at(self) -> float:
        """Until then the same log and cluster give the same plan."""
        return self.memory.plan_expires_at

    async def arrive(self, event: TaskSubmitted, now: float) -> None:
        """A task is submitted (the API's ``TaskSubmitted``)."""
        self.record(task_stream(event.task_id), [event], now)

    async def cancel(self, task_id: str, now: float) -> None:
        """Its user cancels the task (what the API records); its job is followed next turn."""
        task = self.state.tasks.get(task_id)
        if task is None:
            return
        self.record(task_stream(task_id), cancel_events(task_id, task.state, task.user, now), now)
        if task.latest_attempt is not None:
            self._watch.add(task.latest_attempt.submission_id)

    def saved(self, submission_id: str, found: Found) -> None:
        """A running job saved a checkpoint: the next turn finds it, as the reactor's look does."""
        self._saves[submission_id] = found

    def record(self, stream: str, events: Sequence[EventBase], now: float) -> None:
        """Append ``events`` to the in-memory log: fold them as the reactor folds its log."""
        for event in events:
            version = self.versions.get(stream, 0) + 1
            self.versions[stream] = version
            rec = Recorded(position=self.state.position + 1, stream=stream, version=version,
                           type=type(event).__name__, event=event, meta=_META, owner=None, recorded_at=now)
            self.state.fold(rec)
            if self.log is not None:
                self.log.append(rec)

    async def turn(self, now: float) -> bool:
        """One turn at ``now``; True when it recorded anything (the reactor would then turn
        again at once: its own appends wake it)."""
        before = self.state.position
        obs = Observations(capacity=tuple(await self.ray.capacity()), checkpoints=self._saves)
        self._saves = {}
        followed = self._followed(now)
        if followed:
            obs.jobs = await self.ray.statuses([t.attempts[-1].submission_id for t in followed])
        for plan in decide_turn(self.state, obs, now, self.sched, self.memory, driver_cpus=self.driver_cpus,
                                waits=False):
            await self._carry_out(plan, obs, now)
        for task in followed:  # not running yet: asked again next turn
            current = self.state.tasks.get(task.task_id)
            if current is not None and current.attempts and current.attempts[-1].ray_status == AttemptStatus.SUBMITTED:
                self._watch.add(current.attempts[-1].submission_id)
        return self.state.position != before

    def _followed(self, now: float) -> list[TaskView]:
        """The reactor asks Ray about every attempt it follows; an attempt whose job runs,
        seen running and not being stopped, gives nothing new. The simulator, which sees
        into its Ray, asks only about the attempts something happened to: just submitted,
        to be stopped, ended, or at their time limit (a turn over 1,000 running jobs would
        cost most of a run)."""
        ended, self._ended_seen = self.ray.ended[self._ended_seen:], len(self.ray.ended)
        watch, self._watch = self._watch | set(ended), set()
        while self._deadlines and self._deadlines[0][0] <= now:
            watch.add(heapq.heappop(self._deadlines)[1])
        return sorted((t for sid in watch if (t := self.state.tasks.get(sid.rsplit("--a", 1)[0])) is not None
                       and (a := t.latest_attempt) is not None and a.submission_id == sid
                       and a.ray_status in _FOLLOWED), key=lambda t: t.seq)  # the reactor's order

    async def _carry_out(self, plan: TurnPlan, obs: Observations, now: float) -> None:
        for append in plan.appends:
            stream = cluster_stream if append.task is None else task_stream(append.task.task_id)
            self.record(stream, append.events, now)
            for event in append.events:
                self._noted(event, now)
        for sid in plan.stops:
            await self.ray.stop(sid)
            self.memory.stops_sent.add(sid)
        for sid in plan.read_logs:
            obs.log_tails[sid] = await self.ray.logs_tail(sid)
        for d_task, d in plan.admission.deferrals if plan.admission is not None else ():
            if d.reserved_latest is not None:
                self.promised[d_task.task_id] = min(d.reserved_latest, self.promised.get(d_task.task_id, d.reserved_latest))
        for start in plan.starts:
            await self._start(start.task, start.nodes, start.note, now)

    def _noted(self, event: EventBase, now: float) -> None:
        """What the simulator keeps of a recorded event: preemptions in its decision log
        (their stops go out next turn), time limits of attempts seen running."""
        if isinstance(event, AttemptPreempted):
            self.decisions.append((now, event.task_id, "preempted", (event.by_task_id,)))
            self._watch.add(event.submission_id)
        elif isinstance(event, AttemptRunning):
            task = self.state.tasks.get(event.task_id)
            if task is not None and task.time_limit_s is not None:
                heapq.heappush(self._deadlines, (event.started_at + task.time_limit_s, event.submission_id))

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

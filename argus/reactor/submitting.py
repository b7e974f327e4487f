"""Handing admitted tasks to Ray, exactly once (docs/design.md §4): the intent is recorded
before Ray is called, so a leader that dies between the two leaves an intent the next
one settles by asking Ray (``_resolve_intents``).

A mixin of ``Reactor``: it uses the reactor's store, gateway, state and appends.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import msgspec

from argus.events import AttemptStarting, AttemptSubmitted, FailureKind, TaskSubmitted, task_stream
from argus.lifecycle import AttemptStatus, TaskState
from argus.rayjobs import DuplicateSubmission, RayUnavailable, build_submission, pinned_model
from argus.reactor.attempts import outcome_events
from argus.store import AppendBatch, ConcurrencyConflict, InvariantViolation
from projections import TaskView

if TYPE_CHECKING:
    from argus.config import ArgusConfig, SchedulerConfig
    from argus.events import EventBase, NodeCapacity
    from argus.rayjobs import RayPort
    from argus.reactor.state import ReactorState
    from argus.store import EventStore

__all__ = ["Sent", "Submitting"]

log = logging.getLogger("argus.reactor")


class Sent(msgspec.Struct, frozen=True, kw_only=True):
    """What Ray said to one submission it was reached for."""

    recovered: bool = False  # Ray had it already: an earlier call went through
    refused: str | None = None  # Ray refused the payload itself (the error)


class Submitting:
    """Starting attempts: intents, submissions, and what Ray answered."""

    if TYPE_CHECKING:  # what it uses of the Reactor it is part of
        store: EventStore
        gateway: RayPort
        config: ArgusConfig
        sched: SchedulerConfig
        state: ReactorState
        capacity: list[NodeCapacity] | None
        _submitted_events: dict[str, TaskSubmitted]

        async def _append(self, task: TaskView, events: list[EventBase], *, expect: bool = False) -> bool: ...
        async def _record(self, batches: list[AppendBatch]) -> None: ...
        async def _catch_up(self) -> None: ...
        def _crash_point(self, point: str) -> None: ...

    async def _submitted_event(self, task_id: str) -> TaskSubmitted:
        event = self._submitted_events.get(task_id)
        if event is None:
            first = (await self.store.read_stream(task_stream(task_id)))[0].event
            assert isinstance(first, TaskSubmitted)
            event = self._submitted_events[task_id] = first
        return event

    async def _start_attempts(self, tasks: list[TaskView], notes: dict[str, str], placed: dict[str, tuple[str, ...]],
                              now: float) -> None:
        """Admit ``tasks`` together: every intent in one transaction, then every submission
        to Ray at once, then what Ray said in one more transaction. (One by one, 50
        admissions were 100 fsyncs and 50 Ray round trips in a row.)"""
        intents: list[tuple[TaskView, AttemptStarting]] = []
        missing = [task_stream(t.task_id) for t in tasks if t.task_id not in self._submitted_events]
        if missing:  # one read for all of them, not one per task
            for rec in await self.store.read(0, len(missing), streams=missing, types=["TaskSubmitted"]):
                if isinstance(rec.event, TaskSubmitted):
                    self._submitted_events[rec.event.task_id] = rec.event
        ips = {n.node_id: n.ip for n in self.capacity or ()}
        models = {n.node_id: n.gpu_type for n in self.capacity or ()}
        for task in tasks:
            submitted = await self._submitted_event(task.task_id)
            nodes = list(placed.get(task.task_id, ()))
            attempt_no = len(task.attempts) + 1
            payload = build_submission(
                task_id=task.task_id, attempt_no=attempt_no, user=task.user, command=submitted.command,
                config=self.config, spec_raw=submitted.spec_raw, spec=submitted.spec,
                command_raw=submitted.command_raw, python=self.config.v2.taskspec.python, node_ids=tuple(nodes),
                gpu_type=pinned_model(submitted.demand, [models.get(n, "") for n in nodes]),
            )
            intents.append((task, AttemptStarting(
                task_id=task.task_id, attempt_no=attempt_no, submission_id=payload.submission_id,
                payload=payload, decided_at=now, note=notes.get(task.task_id, ""),
                node_ids=nodes, node_ips=[ips.get(n, "") for n in nodes],
            )))
        if not intents:
            return
        self._crash_point("before_intent")
        try:
            await self._record([AppendBatch(stream=task_stream(task.task_id), expected_version=task.stream_version,
                                            events=[intent], owner=task.user) for task, intent in intents])
            recorded = [intent for _, intent in intents]
        except (ConcurrencyConflict, InvariantViolation) as exc:
            log.info("an admitted task moved on (%s); recording intents one by one", exc)
            await self._catch_up()
            recorded = [intent for task, intent in intents if await self._append(task, [intent], expect=True)]
        self._crash_point("after_intent")
        await self._submit(recorded, now)

    async def _submit(self, intents: list[AttemptStarting], now: float) -> None:
        """Hand recorded intents to Ray, all at once, and record each answer."""
        sent = await asyncio.gather(*(self._send(intent) for intent in intents))
        if any(outcome is not None and outcome.refused is None for outcome in sent):
            self._crash_point("after_submit")
        accepted: list[AppendBatch] = []
        for intent, outcome in zip(intents, sent):
            task = self.state.tasks.get(intent.task_id)
            if task is None or outcome is None:
                continue  # ended meanwhile / Ray unavailable: the intent stays open
            if outcome.refused is not None:  # Ray refused the payload itself: not worth retrying
                await self._append(task, outcome_events(
                    task, ray_status=AttemptStatus.NOT_SUBMITTED, exit_code=None, kind=FailureKind.RUNTIME_ERROR,
                    evidence=f"Ray refused the submission: {outcome.refused}"[:500], now=now,
                    config=self.sched,
                ))
                continue
            accepted.append(AppendBatch(stream=task_stream(task.task_id), expected_version=None, owner=task.user,
                                        events=[AttemptSubmitted(
                                            task_id=task.task_id, attempt_no=intent.attempt_no,
                                            submission_id=intent.submission_id, recovered=outcome.recovered,
                                            submitted_at=now)]))
        if accepted:
            await self._record(accepted)

    async def _send(self, intent: AttemptStarting) -> Sent | None:
        """One submission to Ray; None when Ray could not be reached."""
        try:
            await self.gateway.submit(intent.payload)
        except DuplicateSubmission:
            return Sent(recovered=True)  # Ray already has it: the first call went through
        except RayUnavailable as exc:
            log.warning("submit %s: Ray unavailable (%s); intent stays open", intent.submission_id, exc)
            self.capacity = None
            return None
        except Exception as exc:
            return Sent(refused=str(exc) or type(exc).__name__)
        return Sent()

    async def _resolve_intents(self, now: float) -> None:
        """Settle every attempt whose intent was recorded without an outcome."""
        for task in list(self.state.tasks.values()):
            attempt = task.latest_attempt
            if attempt is None or attempt.ray_status != AttemptStatus.STARTING:
                continue
            try:
                observed = await self.gateway.status(attempt.submission_id)
            except RayUnavailable:
                self.capacity = None
                return
            if observed is not None:
                await self._append(task, [AttemptSubmitted(
                    task_id=task.task_id, attempt_no=attempt.attempt_no,
                    submission_id=attempt.submission_id, recovered=True, submitted_at=now,
                )])
            elif task.state is TaskState.CANCELING:
                await self._append(task, outcome_events(
                    task, ray_status=AttemptStatus.NOT_SUBMITTED, exit_code=None, kind=FailureKind.CANCELED,
                    evidence="canceled before it reached Ray", now=now, config=self.sched,
                ))
            else:
                stream = await self.store.read_stream(task_stream(task.task_id))
                intent = next(
                    r.event for r in reversed(stream)
                    if isinstance(r.event, AttemptStarting) and r.event.attempt_no == attempt.attempt_no
                )
                await self._submit([intent], now)

"""The reactor: the single leader that turns the log into Ray actions and Ray into events.

One loop, in this order each turn: renew the lease, fold new events, look at the cluster,
follow the attempts it believes active, handle cancels, run the admission policy. It wakes
at once on an append in this process, else every ``poll_interval_s``.

Exactly-once submission (DESIGN.md §4): ``AttemptStarting`` (the intent, with the full
payload) is appended before Ray is called, the outcome after. An intent without an outcome
— the reactor died in between, or Ray was down — is resolved by asking Ray about that
submission id: known → record it as submitted; unknown → submit that same payload.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sqlite3
import time
import uuid
from typing import Callable

import msgspec

from argus.config import ArgusConfig
from argus.events import (
    AttemptPreempted,
    AttemptRunning,
    AttemptTimeLimitReached,
    CapacityObserved,
    ClusterUnreachable,
    EventBase,
    EventMeta,
    NodeCapacity,
    ReactorLeaderElected,
    ReactorLeaderReleased,
    TaskCanceled,
    TaskDeferred,
    TaskSubmitted,
    reactor_stream,
    task_stream,
    cluster_stream,
)
from argus.gcpause import collector_paused
from argus.lifecycle import AttemptStatus, TaskState
from argus.rayjobs import RayPort, RayUnavailable
from argus.reactor.plan import Classify, attempt_step, plan_turn, wait_news
from argus.reactor.attempts import outcome_events
from argus.reactor.checkpoints import CheckpointWatch
from argus.reactor.classify import classify_failure
from argus.scheduler import Preempt
from argus.reactor.submitting import Submitting
from argus.reactor.watchdog import PlacementWatchdog
from argus.reactor.state import ReactorState
from argus.store import AppendBatch, ConcurrencyConflict, EventStore, InvariantViolation, LogUnreachable
from projections import TaskView

__all__ = ["CRASH_POINTS", "Reactor"]

log = logging.getLogger("argus.reactor")

LEASE_NAME = "reactor"
# Fault injection for crash tests: ARGUS_REACTOR_CRASH_AT=<point> makes the reactor SIGKILL
# itself the first time it reaches that point of a submission.
CRASH_POINTS = ("before_intent", "after_intent", "after_submit")


class Reactor(Submitting):
    """Run with ``await Reactor(store, gateway, config).run()``; stop with ``stop()``.

    ``gateway``: any ``RayPort`` (the real ``AsyncRayGateway``, or ``FakeRay`` in tests);
    ``clock``: the time of every decision and of the lease, injectable for tests."""

    def __init__(
        self,
        store: EventStore,
        gateway: RayPort,
        config: ArgusConfig,
        *,
        reactor_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.gateway = gateway
        self.config = config
        self.sched = config.v2.scheduler
        self.reactor_id = reactor_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.clock = clock
        self.meta = EventMeta(actor=f"reactor:{self.reactor_id}")
        self.state = ReactorState(self.sched.fairshare.half_life_s, config.entrypoint_num_cpus)
        self.capacity: list[NodeCapacity] | None = None  # None: unknown (Ray unreachable)
        self.is_leader = False
        self._stopping = asyncio.Event()
        self._stop_sent: set[str] = set()
        self._submitted_events: dict[str, TaskSubmitted] = {}
        self._crash_at = os.environ.get("ARGUS_REACTOR_CRASH_AT", "")
        self.watchdog = PlacementWatchdog(self.sched)
        self.checkpoints = CheckpointWatch(config.shared_root, self.sched.checkpoint_check_s, clock)
        self._planned_on: tuple[int, tuple[NodeCapacity, ...] | None] | None = None
        self._plan_expires_at = 0.0

    # ------------------------------------------------------------------ run / leadership
    async def run(self) -> None:
        """Wait for the lease (standby), lead while it is held, until ``stop()``."""
        while not self._stopping.is_set():
            if await self._claim():
                try:
                    await self._lead()
                finally:
                    self.is_leader = False
            else:
                await self._sleep(self.sched.lease_ttl_s / 3)

    async def stop(self) -> None:
        self._stopping.set()

    def _load_state(self, db: sqlite3.Connection) -> ReactorState:
        return ReactorState.load(db, self.sched.fairshare.half_life_s, self.config.entrypoint_num_cpus)

    async def _claim(self) -> bool:
        now = self.clock()
        elected = AppendBatch(
            stream=reactor_stream, expected_version=None,
            events=[ReactorLeaderElected(
                reactor_id=self.reactor_id, host=socket.gethostname(), pid=os.getpid(),
                lease_until=now + self.sched.lease_ttl_s, elected_at=now,
            )],
        )
        # The lease runs on the reactor's clock too: with an injected clock, expiry and
        # renewal stay on one timeline (a wall clock here would mix two).
        try:
            return await self.store.claim_lease(
                LEASE_NAME, self.reactor_id, self.sched.lease_ttl_s, on_new_leader=elected, now=now
            )
        except LogUnreachable as exc:  # a lease that cannot be renewed is not held: stand by
            log.warning("reactor %s: %s", self.reactor_id, exc)
            return False

    async def _lead(self) -> None:
        self.is_leader = True
        log.info("reactor %s leads", self.reactor_id)
        self.state = await self.store.read_snapshot(self._load_state)
        # Unknown until the first turn observes the cluster; that turn then settles the
        # intents a crashed leader left (as it does whenever Ray comes back).
        self.capacity = None
        renew_at = self.clock() + self.sched.lease_ttl_s / 3
        while not self._stopping.is_set():
            signal_ = self.store.append_signal()
            if self.clock() >= renew_at:
                if not await self._claim():
                    log.warning("reactor %s lost the lease; standing by", self.reactor_id)
                    return
                renew_at = self.clock() + self.sched.lease_ttl_s / 3
            try:
                await self.turn()
            except Exception:  # a bug or a surprise from Ray must not end the leader: the
                # next turn starts from the log again (the reactor keeps no other state)
                log.exception("reactor turn failed; trying again after %.1f s", self.sched.poll_interval_s)
                self.state = await self.store.read_snapshot(self._load_state)
                self.capacity = None
            try:
                await asyncio.wait_for(signal_.wait(), self.sched.poll_interval_s)
            except asyncio.TimeoutError:
                pass
        await self.store.append(
            reactor_stream, None,
            [ReactorLeaderReleased(reactor_id=self.reactor_id, released_at=self.clock())], meta=self.meta,
        )
        await self.store.release_lease(LEASE_NAME, self.reactor_id)

    async def turn(self) -> None:
        """One pass of the loop (also called directly by tests)."""
        with collector_paused():  # a turn's allocations are a burst: see argus.gcpause
            await self._turn()

    async def _turn(self) -> None:
        await self._catch_up()
        # Finished tasks need their TaskSubmitted no more: a long-lived reactor would
        # otherwise keep every task's spec and command it ever started.
        for task_id in self._submitted_events.keys() - self.state.tasks.keys():
            del self._submitted_events[task_id]
        was_reachable = self.capacity is not None
        await self._observe_cluster()
        if self.capacity is not None and not was_reachable:
            await self._resolve_intents()  # Ray is back: settle what was left hanging
        if self.capacity is not None:
            await self._follow_attempts()
        for task, event in await self.checkpoints.news(self.state.active()):
            await self._append(task, [event], expect=True)
        await self._handle_cancels()
        await self._schedule()

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    # ------------------------------------------------------------------ log plumbing
    async def _catch_up(self) -> None:
        # The next page is read (on the store's reader thread) while this one is folded.
        page = asyncio.ensure_future(self.store.read(self.state.position, 2000))
        try:
            while records := await page:
                page = asyncio.ensure_future(self.store.read(records[-1].position, 2000))
                for rec in records:
                    self.state.fold(rec)
        finally:
            page.cancel()

    async def _append(self, task: TaskView, events: list[EventBase], *, expect: bool = False) -> bool:
        """Append to the task's stream; with ``expect`` only if nobody else wrote to it since
        we read it. Returns False (after catching up) when the task moved on."""
        batch = AppendBatch(stream=task_stream(task.task_id), expected_version=task.stream_version if expect else None,
                            events=events, owner=task.user)
        try:
            await self._record([batch])
        except (ConcurrencyConflict, InvariantViolation) as exc:
            log.info("task %s moved on (%s); deciding again", task.task_id, exc)
            await self._catch_up()
            return False
        return True

    async def _record(self, batches: list[AppendBatch]) -> None:
        """Append ``batches`` in one transaction and fold them: straight from what the
        store recorded when nothing else was written since our position (10,000
        deferrals are not read back), else by catching up from the log."""
        records = await self.store.record_batches(batches, meta=self.meta)
        if records and records[0].position == self.state.position + 1:
            for rec in records:
                self.state.fold(rec)
        else:
            await self._catch_up()

    def _crash_point(self, point: str) -> None:
        if self._crash_at == point:
            self._crash_at = ""
            log.warning("fault injection: SIGKILL at %s", point)
            os.kill(os.getpid(), signal.SIGKILL)

    # ------------------------------------------------------------------ cluster
    async def _observe_cluster(self) -> None:
        try:
            # A GCS that does not answer can block inside Ray's client for a minute; the
            # loop must not: past the timeout, capacity is unknown for this turn.
            timeout = max(2.0, 5 * self.sched.poll_interval_s)
            nodes = sorted(await asyncio.wait_for(self.gateway.capacity(), timeout), key=lambda n: n.node_id)
        except (RayUnavailable, asyncio.TimeoutError) as exc:
            self.capacity = None
            if self.state.cluster_reachable is not False:
                await self._record([AppendBatch(stream=cluster_stream, expected_version=None, events=[
                    ClusterUnreachable(error=(str(exc) or type(exc).__name__)[:500], observed_at=self.clock())])])
            return
        self.capacity = nodes
        # Recorded when it changed, and while the ledger holds ended attempts: this
        # observation is what releases them, and a replay must see it too.
        if (self.state.cluster_reachable is not True or tuple(nodes) != self.state.last_capacity
                or self.state.releasing):
            await self._record([AppendBatch(stream=cluster_stream, expected_version=None,
                                            events=[CapacityObserved(nodes=nodes, observed_at=self.clock())])])

    # ------------------------------------------------------------------ following Ray
    async def _follow_attempts(self) -> None:
        """Ask Ray about the attempts believed active (and only those), all in one call."""
        followed = [
            (task, attempt) for task in self.state.active()
            if (attempt := task.latest_attempt) is not None
            and attempt.ray_status in (AttemptStatus.SUBMITTED, AttemptStatus.RUNNING)
        ]
        if not followed:
            return
        try:
            states = await self.gateway.statuses([attempt.submission_id for _, attempt in followed])
        except RayUnavailable:
            self.capacity = None
            return
        await self._watch_placements([t for t, a in followed if a.ray_status == AttemptStatus.RUNNING
                                      and (o := states.get(a.submission_id)) is not None and not o.is_terminal])
        for task, attempt in followed:
            observed = states.get(attempt.submission_id)
            now = self.clock()
            task = self.state.tasks.get(task.task_id, task)  # a watchdog event may have moved it
            attempt = task.attempts[-1]
            limit = task.time_limit_s
            if (limit is not None and attempt.started_at is not None and attempt.time_limit_reached_at is None
                    and observed is not None and not observed.is_terminal and now - attempt.started_at >= limit):
                if not await self._append(task, [AttemptTimeLimitReached(
                        task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
                        time_limit_s=limit, ran_s=now - attempt.started_at, reached_at=now)], expect=True):
                    continue  # the task moved on meanwhile: decided again next turn
                task = self.state.tasks[task.task_id]
                attempt = task.attempts[-1]
            stopping = task.state is TaskState.CANCELING or bool(attempt.stop_reason)
            try:
                if stopping and attempt.submission_id not in self._stop_sent:
                    await self.gateway.stop(attempt.submission_id)
                    self._stop_sent.add(attempt.submission_id)
            except RayUnavailable:
                self.capacity = None
                return
            step = attempt_step(task, observed, now, self.sched)
            if isinstance(step, Classify):  # it failed on its own: why, from its log
                assert observed is not None
                try:
                    tail = await self.gateway.logs_tail(attempt.submission_id)
                except RayUnavailable:
                    tail = ""
                kind, evidence = classify_failure(observed.status, observed.message, tail,
                                                  observed.driver_exit_code, error_type=observed.error_type)
                step = outcome_events(task, ray_status=observed.status, exit_code=observed.driver_exit_code,
                                      kind=kind, evidence=evidence, now=now, config=self.sched)
            if step and isinstance(step[0], AttemptRunning):
                step = [msgspec.structs.replace(step[0], driver_node_ip=self._ip_of(step[0].driver_node_id))]
            if step:
                await self._append(task, step)

    def _ip_of(self, node_id: str) -> str:
        return next((n.ip for n in self.capacity or () if n.node_id == node_id), "")

    async def _watch_placements(self, running: list[TaskView]) -> None:
        """Stop the running attempts whose placement groups Ray has not placed for too long
        (argus.reactor.watchdog): record why, then the stop goes out with the others."""
        try:
            overdue = await self.watchdog.overdue(running, self.gateway, self.clock())
        except RayUnavailable as exc:  # the state API is Ray's dashboard: it may be away alone
            log.warning("placement groups unknown this turn: %s", exc)
            return
        for event in overdue:
            task = self.state.tasks.get(event.task_id)
            if task is not None:
                await self._append(task, [event], expect=True)

    async def _defer_all(self, deferrals: list[tuple[TaskView, TaskDeferred]]) -> None:
        """Record every changed wait reason of a turn in one transaction (10,000 arrivals
        are one fsync, not 10,000). Each stream is checked at the version the decision was
        made on; if any task moved on meanwhile, nothing of the batch is written and each
        deferral is recorded on its own (a task that moved on is decided again next turn)."""
        if not deferrals:
            return
        batches = [AppendBatch(stream=task_stream(task.task_id), expected_version=task.stream_version,
                               events=[event], owner=task.user) for task, event in deferrals]
        try:
            await self._record(batches)
        except (ConcurrencyConflict, InvariantViolation) as exc:
            log.info("a deferred task moved on (%s); recording deferrals one by one", exc)
            await self._catch_up()
            for task, event in deferrals:
                current = self.state.tasks.get(task.task_id)
                if current is not None and current.stream_version == task.stream_version:
                    await self._append(current, [event], expect=True)

    async def _preempt(self, preemptions: list[tuple[TaskView, Preempt]], now: float) -> None:
        """Record who is stopped for whom; the stop goes to Ray with the others (the
        next turn follows at once, woken by this append)."""
        for task, p in preemptions:
            attempt = task.latest_attempt
            if attempt is None or attempt.ended or attempt.stop_reason:
                continue
            await self._append(task, [AttemptPreempted(
                task_id=task.task_id, attempt_no=attempt.attempt_no, submission_id=attempt.submission_id,
                by_task_id=p.for_task, by_user=p.for_user, reason=p.reason, message=p.message,
                preempted_at=now)], expect=True)

    async def _handle_cancels(self) -> None:
        """A cancel request on a task with no live Ray job ends it at once."""
        for task in list(self.state.tasks.values()):
            if task.state is not TaskState.CANCELING:
                continue
            attempt = task.latest_attempt
            if attempt is None or attempt.ended:
                await self._append(task, [TaskCanceled(
                    task_id=task.task_id, by=task.cancel_requested_by or "?", canceled_at=self.clock()
                )])

    # ------------------------------------------------------------------ admission
    async def _schedule(self) -> None:
        # The plan is a pure function of the log (our position in it), the capacity and
        # the clock; a turn where none of them changed would decide the same: skip it
        # (a steady turn with 10,000 waiting is then O(1), not a pass over the queue).
        now = self.clock()
        inputs = (self.state.position, None if self.capacity is None else tuple(self.capacity))
        if inputs == self._planned_on and now < self._plan_expires_at:
            return
        plan = plan_turn(self.state, self.capacity, now, self.sched, self.config.entrypoint_num_cpus)
        if plan is None:
            return
        fair = self.sched.policy == "fairshare"
        # Usage grows with the clock alone: a fair-share order is made again within a minute.
        self._planned_on, self._plan_expires_at = inputs, min(plan.expires_at, now + 60.0) if fair else plan.expires_at
        await self._preempt(plan.preemptions, now)
        # Admissions first: they never wait for the wait reasons of thousands of others.
        admitted = [self.state.tasks.get(task.task_id) for task in plan.admitted]
        await self._start_attempts([task for task in admitted if task is not None and task.state.is_waiting()],
                                   plan.notes, plan.placed)
        await self._defer_all(wait_news(plan, now, self.sched.deferrals_per_turn))

"""The reactor: the single leader that turns the log into Ray actions and Ray into events.

One loop, each turn: renew the lease, fold new events, observe Ray (its count, the
followed attempts, their placement groups and checkpoints), then carry out what
``argus.reactor.turn.decide_turn`` decides, stage by stage: the decisions are written there
once, for this reactor and for ``argus sim``. It wakes at once on an append in this
process, else every ``poll_interval_s``.

Exactly-once submission (docs/design.md §4): ``AttemptStarting`` (the intent, with the full
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
import time
import uuid
from typing import Callable, Literal

from argus.config import ArgusConfig
from argus.events import (
    EventBase, EventMeta, NodeCapacity, ReactorLeaderElected, ReactorLeaderReleased, TaskSubmitted, cluster_stream,
    reactor_stream, task_stream,
)
from argus.gcpause import collector_paused
from argus.lifecycle import AttemptStatus
from argus.rayjobs import RayPort, RayUnavailable
from argus.nodepool.stacks import StacksSummary, merge_summaries, read_node_summaries, read_summary, request_stacks
from argus.reactor.checkpoints import CheckpointWatch
from argus.reactor.hygiene import NodeWatch
from argus.reactor.reports import ExitNotifier, ReportWatch
from argus.reactor.retention import Retention
from argus.reactor.state import ReactorState
from argus.reactor.submitting import Submitting
from argus.reactor.turn import Append, Observations, TurnMemory, TurnPlan, awaiting_stacks, decide_turn, followed
from argus.reactor.watchdog import PlacementWatchdog
from argus.store import AppendBatch, ConcurrencyConflict, EventStore, InvariantViolation, LogUnreachable
from argus.views.reads import ViewReads
from projections import AttemptView, TaskView

__all__ = ["CRASH_POINTS", "Reactor"]

log = logging.getLogger("argus.reactor")
_CLEAR_LOOK_S = 0.1  # how often a node still clearing is looked at between turns

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
        self.reads = ViewReads(store, config)
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
        self._submitted_events: dict[str, TaskSubmitted] = {}
        self._crash_at = os.environ.get("ARGUS_REACTOR_CRASH_AT", "")
        self.watchdog = PlacementWatchdog(self.sched)
        self.checkpoints = CheckpointWatch(config.shared_root, self.sched.checkpoint_check_s, clock)
        self.reports = ReportWatch(config.shared_root, self.sched.progress_check_s, clock)
        self._exit_notifier: ExitNotifier | Literal[False] | None = None  # None: not opened yet; False: none
        self.memory = TurnMemory()
        self.nodes = NodeWatch(config.shared_root, clock)
        self.retention = Retention(config.shared_root, config.v2.retention, clock)

    # ------------------------------------------------------------------ run / leadership
    async def run(self) -> None:
        """Wait for the lease (standby), lead while it is held, until ``stop()``."""
        try:
            while not self._stopping.is_set():
                if await self._claim():
                    try:
                        await self._lead()
                    finally:
                        self.is_leader = False
                else:
                    await self._sleep(self.sched.lease_ttl_s / 3)
        finally:
            if self._exit_notifier:
                self._exit_notifier.close()
            self._exit_notifier = None

    async def stop(self) -> None:
        self._stopping.set()

    async def _load_state(self) -> ReactorState:
        """What the log's projections say now (``argus.views.reactor_start``)."""
        return ReactorState.load(await self.reads.reactor_start(), self.sched.fairshare.half_life_s,
                                 self.config.entrypoint_num_cpus)

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
        self.state = await self._load_state()
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
                self.state = await self._load_state()
                self.capacity = None
                self.memory.forget()
            await self._wait_for_news(signal_)
        await self.store.append(
            reactor_stream, None,
            [ReactorLeaderReleased(reactor_id=self.reactor_id, released_at=self.clock())], meta=self.meta,
        )
        await self.store.release_lease(LEASE_NAME, self.reactor_id)

    async def _wait_for_news(self, appended: asyncio.Event) -> None:
        """Until something was appended in this process, a job's driver reported its
        command's exit (the kernel says so: ``ExitNotifier``; else a stat every
        ``exit_watch_s`` while attempts run), ``stop()`` was called, or ``poll_interval_s``
        passed."""
        loop = asyncio.get_running_loop()
        exited = asyncio.Event()
        timer: list[asyncio.TimerHandle] = []
        if self.sched.exit_watch_s > 0 and self._exit_notifier is None:
            self._exit_notifier = ExitNotifier.open(self.config.shared_root, loop) or False
        if self._exit_notifier:
            exited = self._exit_notifier.event
            if self.reports.exits_changed():  # came since the turn's look
                exited.set()
        elif self.sched.exit_watch_s > 0 and followed(self.state):
            def look() -> None:
                if self.reports.exits_changed():
                    exited.set()
                else:
                    timer[0] = loop.call_later(self.sched.exit_watch_s, look)

            timer.append(loop.call_later(self.sched.exit_watch_s, look))
        if self.nodes.ended:  # a node clears when its keeper says so: a stat per node, often
            def clear_look() -> None:
                if self.nodes.reports_changed():
                    exited.set()
                else:
                    timer.append(loop.call_later(_CLEAR_LOOK_S, clear_look))

            timer.append(loop.call_later(_CLEAR_LOOK_S, clear_look))
        waiters = {asyncio.ensure_future(appended.wait()), asyncio.ensure_future(exited.wait()),
                   asyncio.ensure_future(self._stopping.wait())}
        try:
            await asyncio.wait(waiters, timeout=self.sched.poll_interval_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.clear()
            for handle in timer:
                handle.cancel()
            for waiter in waiters:
                waiter.cancel()

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
        now = self.clock()  # read once: every decision of the turn is made at this instant
        obs = await self._observe(now)
        for plan in decide_turn(self.state, obs, now, self.sched, self.memory,
                                driver_cpus=self.config.entrypoint_num_cpus):
            await self._carry_out(plan, obs, now)
        await self.nodes.publish(self.state, obs.exits, self.memory.stacks_asked)
        if self.retention.due(now):
            await self._retain(now)

    async def _retain(self, now: float) -> None:
        """A pass of the retention policy (argus.reactor.retention): what it deleted is
        recorded, one event a deletion; a failure waits for the next pass."""
        try:
            batches = await self.retention.apply(self.store, now)
        except OSError as exc:
            log.warning("retention pass failed: %s", exc)
            return
        if batches:
            await self._record(batches)

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

    # ------------------------------------------------------------------ observing
    async def _observe(self, now: float) -> Observations:
        """What the turn decides on: the drivers' exit reports, Ray's count, then (Ray
        answering) the intents left open settled, what Ray says of each followed attempt,
        their placement groups, checkpoints and progress. Ray stopping to answer midway
        leaves the rest unasked."""
        was_reachable = self.capacity is not None
        # Looked at first, in every turn: what the wait between turns compares against.
        exits = await self.reports.exits([t.attempts[-1].submission_id for t in followed(self.state)])
        try:
            # A GCS that does not answer can block inside Ray's client for a minute; the
            # loop must not: past the timeout, capacity is unknown for this turn.
            timeout = max(2.0, 5 * self.sched.poll_interval_s)
            nodes = sorted(await asyncio.wait_for(self.gateway.capacity(), timeout), key=lambda n: n.node_id)
        except (RayUnavailable, asyncio.TimeoutError) as exc:
            self.capacity = None
            return Observations(capacity=None, unreachable=str(exc) or type(exc).__name__)
        self.capacity = nodes
        if not was_reachable:
            await self._resolve_intents(now)  # Ray is back: settle what was left hanging
        obs = Observations(capacity=tuple(nodes), answering=self.capacity is not None, exits=exits)
        obs.node_reports, obs.leftover_tasks = await self.nodes.reports(self.state, self.store)
        obs.clearing = await self.nodes.clearing()
        tasks = followed(self.state)
        if not obs.answering or not tasks:
            return obs
        try:
            obs.jobs = await self.gateway.statuses([t.attempts[-1].submission_id for t in tasks])
        except RayUnavailable:
            self.capacity, obs.answering = None, False
            return obs
        running = [t for t in tasks if t.attempts[-1].ray_status == AttemptStatus.RUNNING
                   and (o := obs.jobs.get(t.attempts[-1].submission_id)) is not None and not o.is_terminal]
        try:
            obs.placements_overdue = await self.watchdog.overdue(running, self.gateway, now)
        except RayUnavailable as exc:  # the state API is Ray's dashboard: it may be away alone
            log.warning("placement groups unknown this turn: %s", exc)
        obs.checkpoints = await self.checkpoints.found(self.state.active())
        obs.progress = await self.reports.progress(self.state.active())
        awaiting = [t.attempts[-1] for t in tasks if awaiting_stacks(t, self.sched)]
        if awaiting:
            obs.stacks = await asyncio.to_thread(self._stacks, awaiting, now)
        return obs

    def _stacks(self, attempts: list[AttemptView], now: float) -> dict[str, StacksSummary]:
        """The stalled attempts' stacks as their drivers and the keepers of their nodes
        saved them: one summary each, naming the nodes whose keepers have not answered
        (those with a fresh report; a node without a keeper has nobody to ask)."""
        keepers = self.nodes.keepers(now)
        found = {}
        for attempt in attempts:
            expected = {n for n in (*attempt.node_ids, attempt.driver_node_id) if n in keepers}
            merged = merge_summaries(read_summary(self.config.shared_root, attempt.submission_id),
                                     read_node_summaries(self.config.shared_root, attempt.submission_id), expected)
            if merged is not None:
                found[attempt.submission_id] = merged
        return found

    # ------------------------------------------------------------------ carrying out
    async def _carry_out(self, plan: TurnPlan, obs: Observations, now: float) -> None:
        """One stage of the turn's decisions (argus.reactor.turn): record, stop, read, start."""
        if plan.together:
            await self._record_together(plan.appends)
        else:
            for append in plan.appends:
                if append.task is None:
                    await self._record([AppendBatch(stream=cluster_stream, expected_version=None,
                                                    events=append.events)])
                else:
                    await self._append(append.task, append.events, expect=append.expect)
        for sid in plan.stack_requests:
            if sid not in self.memory.stacks_asked:
                try:
                    await asyncio.to_thread(request_stacks, self.config.shared_root, sid)
                    self.memory.stacks_asked.add(sid)
                except OSError as exc:  # the stop then goes out after stacks_wait_s, without them
                    log.warning("could not ask %s for its stacks: %s", sid, exc)
        for sid in plan.stops:
            if not obs.answering:
                break
            try:
                await self.gateway.stop(sid)
                self.memory.stops_sent.add(sid)
            except RayUnavailable:
                self.capacity, obs.answering = None, False
        for sid in plan.read_logs:
            try:
                obs.log_tails[sid] = await self.gateway.logs_tail(sid)
            except RayUnavailable:
                obs.log_tails[sid] = ""
        if plan.starts:
            await self._start_attempts([s.task for s in plan.starts],
                                       {s.task.task_id: s.note for s in plan.starts},
                                       {s.task.task_id: s.nodes for s in plan.starts}, now)

    async def _record_together(self, appends: list[Append]) -> None:
        """Record a stage's appends in one transaction (10,000 wait reasons are one fsync,
        not 10,000). Each stream is checked at the version the decision was made on; if any
        task moved on meanwhile, nothing of the batch is written and each is recorded on its
        own (a task that moved on is decided again next turn)."""
        if not appends:
            return
        batches = [AppendBatch(stream=task_stream(a.task.task_id), expected_version=a.task.stream_version,
                               events=a.events, owner=a.task.user) for a in appends if a.task is not None]
        try:
            await self._record(batches)
        except (ConcurrencyConflict, InvariantViolation) as exc:
            log.info("a task moved on (%s); recording one by one", exc)
            await self._catch_up()
            for a in appends:
                current = self.state.tasks.get(a.task.task_id) if a.task is not None else None
                if current is not None and a.task is not None and current.stream_version == a.task.stream_version:
                    await self._append(current, a.events, expect=True)

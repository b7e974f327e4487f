"""Command handlers: submit, cancel, users and tokens → events.

Each handler validates against the read models, decides the events, and appends them
with optimistic concurrency. Errors are :class:`CommandError` (``status`` is the HTTP
status the API answers with); nothing is written when one is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import msgspec

from argus.events import (
    Demand,
    EventBase,
    EventMeta,
    HoldKind,
    NodeHeld,
    NodeReleased,
    TaskSubmitted,
    TokenIssued,
    TokenRevoked,
    TokenUsed,
    UserCreated,
    UserDisabled,
    UserEnabled,
    UserLimitsSet,
    cancel_events,
    cluster_stream,
    task_stream,
    user_stream,
)
from argus import layout
from argus.lifecycle import IllegalTransition, TaskState, check_transition
from argus.service.auth import AuthCache, Principal, hash_token, new_token
from argus.service.ids import new_task_id, new_token_id, user_id_problem
from argus.service.limits import UserLimits, limit_problem, queue_full, queue_guard, resolve_preemptible
from argus.service.taskdir import TaskDirs
from argus.store import (
    AppendBatch, ConcurrencyConflict, GroupCommitLog, InvariantViolation, LimitReached, PayloadTooLarge,
)
from projections.cluster import ClusterView
from projections.reads import ProjectionReads

if TYPE_CHECKING:
    from argus.config import ArgusConfig
    from argus.store import EventStore
    from argus.taskspec import TaskSpecError
    from projections import TaskView

log = logging.getLogger(__name__)

__all__ = ["CommandError", "Commands", "NotFound", "SubmitResult", "USER_DIRS"]

USER_DIRS = layout.USER_DIRS
# How long the cluster as observed may serve the gang check before it is read again.
CLUSTER_MEMO_S = 1.0


class CommandError(Exception):
    """A refused command: ``status`` (4xx), ``detail`` (what to change), ``extra``."""

    def __init__(self, status: int, detail: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.extra = extra or {}


class NotFound(CommandError):
    def __init__(self, what: str) -> None:
        super().__init__(404, f"{what} not found")


class SubmitResult(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    state: str
    warnings: list[str]


_decode_task = msgspec.json.Decoder().decode


def _spec_refused(exc: "TaskSpecError") -> CommandError:
    """A refused TaskSpec as a 400: ``extra.errors`` lists every problem; ``detail``
    names the one, or counts them and lists them all (for clients that show only it)."""
    errors = [{"field": p.field, "message": p.message} for p in exc.problems]
    lines = [f"{p.field}: {p.message}" for p in exc.problems]
    detail = lines[0] if len(lines) == 1 else (
        f"the TaskSpec has {len(lines)} problems: " + "; ".join(lines))
    return CommandError(400, detail, {"errors": errors})


class Commands:
    """The write side of the API."""

    def __init__(
        self, store: "EventStore", config: "ArgusConfig", auth: AuthCache,
        *, group_commit: bool = True, observe: Callable[[float, int], None] | None = None,
    ) -> None:
        self.store = store
        self.reads = ProjectionReads(store)
        self.config = config
        self.auth = auth
        self.shared_root = Path(config.shared_root)
        # Every write goes through the log's group commit; without it, a caller a transaction.
        self.log = GroupCommitLog(store, max_batches=256 if group_commit else 1, observe=observe)
        self.task_dirs = TaskDirs(self.shared_root)
        self._cluster: ClusterView | None = None  # as last read, for the gang check
        self._cluster_read_at = -math.inf  # time.monotonic() of that read
        self._token_uses: dict[str, float] = {}  # token id -> when its use was last recorded
        self._token_writes: set[asyncio.Task[None]] = set()
        self._submit_locks: dict[str, asyncio.Lock] = {}  # by user, on a copy of a shared log

    async def close(self) -> None:
        await self.log.close()
        await self.task_dirs.close()
        for task in list(self._token_writes):
            with contextlib.suppress(BaseException):
                await task

    # ------------------------------------------------------------------ token use
    def note_token_use(self, who: Principal, now: float | None = None) -> None:
        """Record that ``who``'s token was used, at most once per
        ``v2.auth.token_use_resolution_s`` per token (a TokenUsed event, appended in the
        background: the request does not wait for it)."""
        resolution = self.config.v2.auth.token_use_resolution_s
        if not who.token_id or resolution <= 0:
            return
        now = time.time() if now is None else now
        last = self._token_uses.get(who.token_id, who.token_last_used_at or 0.0)
        if now - last < resolution:
            return
        self._token_uses[who.token_id] = now
        task = asyncio.get_running_loop().create_task(self._record_token_use(who, now))
        self._token_writes.add(task)
        task.add_done_callback(self._token_writes.discard)

    async def _record_token_use(self, who: Principal, now: float) -> None:
        event = TokenUsed(user_id=who.user_id, token_id=who.token_id, at=now)
        try:
            await self.log.append(user_stream(who.user_id), None, [event], owner=who.user_id,
                                  meta=EventMeta(actor=who.actor))
        except Exception as exc:  # a missed note is not worth failing anything for
            log.warning("could not record the use of token %s: %s", who.token_id, exc)

    async def _append(self, batches: list[AppendBatch], meta: EventMeta) -> list[int]:
        return await self.log.append_batches(batches, meta=meta)

    # ------------------------------------------------------------------ tasks
    def prepare(self, document: str | dict[str, Any], user: str, task_id: str | None = None) -> Any:
        """Parse and check a TaskSpec for ``user``; raises CommandError(400/413)."""
        from argus.taskspec import TaskSpecError, parse_taskspec_with_warnings, prepare_task

        cfg = self.config.v2.taskspec
        try:
            try:
                parsed = parse_taskspec_with_warnings(document, config=cfg)  # once: the id needs the workload
            except TaskSpecError:
                # Check on without a spec: prepare_task collects every problem it can find
                # (the paths and command of the fields that are fine) and raises them all.
                prepare_task(document, user=user, task_id=f"{user}-check",
                             shared_root=self.shared_root, config=cfg, hub_offline=self.config.v2.hub.offline)
                raise
            if task_id is None:
                task_id = new_task_id(user, parsed[0].workload)
            prepared = prepare_task(
                document, user=user, task_id=task_id, shared_root=self.shared_root, config=cfg, parsed=parsed,
                hub_offline=self.config.v2.hub.offline,
            )
            cap = self.config.v2.output.max_budget_bytes
            if prepared.output_budget_bytes is not None and prepared.output_budget_bytes > cap:
                raise TaskSpecError("output_budget", f"{prepared.output_budget_bytes} bytes is over the most a "
                                    f"task may keep, {cap} bytes (v2.output.max_budget_bytes): ask for less")
            return task_id, prepared
        except TaskSpecError as exc:
            raise _spec_refused(exc) from exc

    async def check_gang(self, demand: "Demand") -> None:
        """Refuse a gang that no node of the cluster could ever hold (CommandError 400): it
        would wait for ever. Judged against the worker nodes as last observed, else the
        configured shape (v2.scheduler.assumed_*), else not at all.

        Every submission asks, so the observation is read at most once a
        ``CLUSTER_MEMO_S``, and again before any refusal: a gang is never refused on a
        stale view, and one accepted on a view a moment old is no different from one
        submitted just before the cluster shrank (it waits, told why)."""
        now = time.monotonic()
        fresh = now - self._cluster_read_at > CLUSTER_MEMO_S
        if fresh:
            self._cluster, self._cluster_read_at = await self.reads.cluster(), now
        unfit = self._unfit(demand, self._cluster)
        if unfit is not None and not fresh:
            self._cluster, self._cluster_read_at = await self.reads.cluster(), now
            unfit = self._unfit(demand, self._cluster)
        if unfit is not None:
            field, reason = unfit
            raise CommandError(400, f"{field}: {reason}", {"errors": [{"field": field, "message": reason}]})

    def _unfit(self, demand: "Demand", seen: ClusterView | None) -> tuple[str, str] | None:
        from argus.scheduler.shape import assumed_nodes, unfit_reason

        nodes = list(seen.nodes) if seen is not None else []
        where = "as last observed"
        if not nodes:
            sched = self.config.v2.scheduler
            nodes = assumed_nodes(sched.assumed_nodes, sched.assumed_node_gpus, sched.assumed_node_cpus,
                                  sched.assumed_node_gpu_type)
            where = "as configured"
            if not sched.assumed_node_gpu_type:  # models not configured: judged once nodes are seen
                demand = msgspec.structs.replace(demand, gpu_types=())
        return unfit_reason(demand, nodes, where)

    async def prepare_admissible(self, document: str | dict[str, Any], user: str,
                                 task_id: str | None = None) -> Any:
        """``prepare``, then refuse a gang that could never fit the cluster."""
        task_id, prepared = self.prepare(document, user, task_id)
        await self.check_gang(prepared.demand)
        return task_id, prepared

    def queue_cap(self, who: Principal) -> int:
        """How many of ``who``'s tasks may wait at once: their own cap, else the default
        (``v2.api.default_max_queued``); 0: no cap (admins are not capped)."""
        if who.is_admin:
            return 0
        return who.max_queued or self.config.v2.api.default_max_queued

    async def check_limits(self, who: Principal, prepared: Any) -> None:
        """Refuse a task that asks for more than its user may have (argus.service.limits),
        or a user whose tasks already fill their queue cap. The cap is checked here as
        a courtesy (validation says it too), and again inside the append's transaction
        (``limits.queue_guard``), where concurrent submissions cannot both pass it."""
        problem = limit_problem(who, prepared.priority, prepared.preemptible, prepared.demand.total_gpus)
        if problem is not None:
            field, message = problem
            raise CommandError(403, message, {"errors": [{"field": field, "message": message}]})
        cap = self.queue_cap(who)
        if cap > 0:
            waiting = await self.reads.waiting_count(who.user_id)
            if waiting >= cap:
                raise CommandError(409, queue_full(waiting, cap, who))

    async def submit(self, who: Principal, document: str | dict[str, Any],
                     request_id: str = "") -> SubmitResult:
        """Validate the TaskSpec and append TaskSubmitted (the task enters the queue)."""
        task_id, prepared = await self.prepare_admissible(document, who.user_id)
        await self.check_limits(who, prepared)
        raw = document if isinstance(document, str) else msgspec.json.encode(document).decode()
        meta = EventMeta(actor=who.actor, request_id=request_id)
        guard = queue_guard(who, self.queue_cap(who))
        for _ in range(5):
            event = TaskSubmitted(
                task_id=task_id, user=who.user_id, workload=prepared.workload,
                kind=prepared.kind, spec_raw=raw, spec=dict(prepared.spec),
                command_raw=prepared.command_raw, command=prepared.command,
                demand=prepared.demand, priority=prepared.priority,
                max_attempts=prepared.max_attempts, warnings=list(prepared.warnings),
                time_limit_s=prepared.time_limit_s, stall_timeout_s=prepared.stall_timeout_s, preemptible=resolve_preemptible(who, prepared.preemptible),
                submitted_at=time.time(),
            )
            batch = AppendBatch(stream=task_stream(task_id), expected_version=0,
                                events=[event], owner=who.user_id, meta=meta, guard=guard)
            try:
                async with self._one_submission_of(who.user_id):
                    await self._append([batch], meta)
            except ConcurrencyConflict:
                # The id was taken: prepare again under a new one (the command names the task).
                task_id, prepared = self.prepare(document, who.user_id)
                continue
            except LimitReached as exc:
                raise CommandError(409, str(exc)) from exc
            except PayloadTooLarge as exc:
                raise CommandError(413, f"the task is too large to record: {exc}") from exc
            await self._make_task_dir(who.user_id, task_id, raw)
            return SubmitResult(task_id=task_id, state=TaskState.QUEUED.value,
                                warnings=list(prepared.warnings))
        raise CommandError(409, "could not allocate a unique task id; submit again")

    def _one_submission_of(self, user: str) -> contextlib.AbstractAsyncContextManager[Any]:
        """On a copy of a shared log, one submission of ``user`` at a time in this process:
        the copy only tries an append (the guard's count sees no other trial), and the
        shared log folds nothing. On a log of its own the guard is exact: no wait."""
        if not self.store.is_copy:
            return contextlib.nullcontext()
        return self._submit_locks.setdefault(user, asyncio.Lock())

    async def _make_task_dir(self, user: str, task_id: str, spec_raw: str) -> None:
        """The task's directory with its spec, once the task exists. A failure here (a full
        disk, a link planted by a job) is logged, not the user's error: the task is
        recorded, and its attempts make their own directories."""
        problem = await self.task_dirs.make(user, task_id, spec_raw)
        if problem is not None:
            log.warning("task %s: could not make its directory: %s", task_id, problem)

    async def load_task(self, who: Principal, task_id: str) -> "TaskView":
        """The task if ``who`` may see it; else NotFound (never 403: ids must not leak)."""
        view = await self.reads.task(task_id)
        # Not on a copy of a shared log: it may have been submitted through another host a
        # moment ago (behind one load balancer); one look at the log settles it.
        if view is None and await self.store.catch_up():
            view = await self.reads.task(task_id)
        if view is None or (view.user != who.user_id and not who.is_admin):
            raise NotFound("task")  # no echo: another user's id must look like a typo
        return view

    async def cancel(self, who: Principal, task_id: str, request_id: str = "") -> str:
        """Ask to cancel. A task without a Ray job is canceled at once; otherwise the
        reactor stops its job and records TaskCanceled. Returns the state after."""
        for _ in range(5):
            view = await self.load_task(who, task_id)
            if view.state is TaskState.CANCELING:
                return view.state.value
            try:
                check_transition(view.state, "TaskCancelRequested")
            except IllegalTransition as exc:
                raise CommandError(409, f"task {task_id} is already {view.state.value}; "
                                   "only unfinished tasks can be canceled") from exc
            now = time.time()
            events = cancel_events(task_id, view.state, who.user_id, now)
            batch = AppendBatch(stream=task_stream(task_id), expected_version=view.stream_version,
                                events=events, owner=view.user)
            try:
                await self._append([batch], EventMeta(actor=who.actor, request_id=request_id))
            except (ConcurrencyConflict, InvariantViolation):
                continue  # the reactor moved it meanwhile: look again
            return (TaskState.CANCELED if len(events) == 2 else TaskState.CANCELING).value
        raise CommandError(409, f"task {task_id} keeps changing; try again")

    # ------------------------------------------------------------------ users
    def ensure_user_dirs(self, user_id: str) -> None:
        home = Path(layout.home(str(self.shared_root), user_id))
        for name in USER_DIRS:
            (home / name).mkdir(parents=True, exist_ok=True)

    async def user_exists(self, user_id: str) -> tuple[bool, bool]:
        user = await self.reads.user(user_id)
        return (user is not None, user.disabled if user is not None else False)

    async def _user_append(self, user_id: str, events: list[Any], who: str, request_id: str,
                           expected: int | None = None) -> None:
        batch = AppendBatch(stream=user_stream(user_id), expected_version=expected,
                            events=events, owner=user_id)
        try:
            await self._append([batch], EventMeta(actor=who, request_id=request_id))
        except ConcurrencyConflict as exc:
            raise CommandError(409, f"user {user_id!r} already exists") from exc
        except InvariantViolation as exc:
            raise CommandError(409, str(exc)) from exc
        finally:
            self.auth.invalidate()

    async def create_user(self, who: str, user_id: str, display_name: str = "",
                          is_admin: bool = False, request_id: str = "") -> None:
        problem = user_id_problem(user_id)
        if problem is not None:
            raise CommandError(400, problem)
        event = UserCreated(user_id=user_id, display_name=display_name, is_admin=is_admin,
                            by=who, created_at=time.time())
        await self._user_append(user_id, [event], who, request_id, expected=0)
        self.ensure_user_dirs(user_id)

    async def set_disabled(self, who: Principal, user_id: str, disabled: bool,
                           request_id: str = "") -> None:
        exists, is_disabled = await self.user_exists(user_id)
        if not exists:
            raise NotFound(f"user {user_id!r}")
        if disabled and user_id == who.user_id:
            raise CommandError(409, "you cannot disable yourself; ask another admin")
        if is_disabled == disabled:
            return  # already so: nothing to record
        now = time.time()
        event: Any = (UserDisabled if disabled else UserEnabled)(user_id=user_id, by=who.user_id, at=now)
        await self._user_append(user_id, [event], who.actor, request_id)

    async def set_limits(self, who: Principal, user_id: str, limits: UserLimits, request_id: str = "") -> None:
        """Record what ``user_id``'s tasks may ask for (admin)."""
        exists, _ = await self.user_exists(user_id)
        if not exists:
            raise NotFound(f"user {user_id!r}")
        event = UserLimitsSet(user_id=user_id, max_priority=int(limits.max_priority), may_pin=limits.may_pin,
                              max_queued=int(limits.max_queued), max_gpus=float(limits.max_gpus), by=who.user_id,
                              at=time.time())
        await self._user_append(user_id, [event], who.actor, request_id)

    async def issue_token(self, who: str, user_id: str, label: str = "",
                          token: str | None = None, request_id: str = "") -> tuple[str, str]:
        """Issue a token (random unless given); returns ``(token_id, token)``."""
        exists, _ = await self.user_exists(user_id)
        if not exists:
            raise NotFound(f"user {user_id!r}")
        token = token or new_token()
        token_id = new_token_id()
        event = TokenIssued(user_id=user_id, token_id=token_id, token_hash=hash_token(token),
                            label=label, by=who, issued_at=time.time())
        await self._user_append(user_id, [event], who, request_id)
        return token_id, token

    async def revoke_token(self, who: Principal, user_id: str, token_id: str,
                           request_id: str = "") -> None:
        token = await self.reads.token(user_id, token_id)
        if token is None:
            raise NotFound(f"token {token_id!r}")
        if token.revoked:
            return
        event = TokenRevoked(user_id=user_id, token_id=token_id, by=who.user_id, at=time.time())
        await self._user_append(user_id, [event], who.actor, request_id)

    async def hold_node(self, who: Principal, node_id: str, drain: bool, reason: str = "",
                        request_id: str = "") -> ClusterView:
        """Drain a node (``drain``: it admits no new attempt; its running ones go on) or
        undrain it (admin). Idempotent: a drained node drained again keeps its first reason."""
        cluster = await self.reads.cluster()
        node = next((n for n in cluster.nodes if n.node_id == node_id), None) if cluster else None
        if cluster is None or node is None:
            raise NotFound(f"node {node_id!r} (argus cluster lists the nodes; use the full node id)")
        held = any(h.node_id == node_id and h.kind is HoldKind.DRAIN for h in cluster.holds)
        now = time.time()
        if drain and not held:
            event: EventBase = NodeHeld(node_id=node_id, ip=node.ip, kind=HoldKind.DRAIN, reason=reason or "drained",
                                        by=who.user_id, held_at=now)
        elif not drain and held:
            event = NodeReleased(node_id=node_id, kind=HoldKind.DRAIN, by=who.user_id, released_at=now)
        else:
            return cluster
        await self._append([AppendBatch(stream=cluster_stream, expected_version=None, events=[event])],
                           EventMeta(actor=who.actor, request_id=request_id))
        return await self.reads.cluster() or cluster

    async def bootstrap_admin(self, token: str) -> None:
        """Make sure the admin user exists and ``token`` is one of its tokens (idempotent)."""
        admin = self.config.v2.auth.admin_user
        exists, _ = await self.user_exists(admin)
        if not exists:
            await self.create_user("system", admin, "bootstrap admin", True)
        digest = hash_token(token)
        if await self.reads.token_holder(digest, revoked=True) is None:
            await self.issue_token("system", admin, "bootstrap", token=token)
        self.ensure_user_dirs(admin)

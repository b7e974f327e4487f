"""The task stream's events (``task-<task_id>``): a task's life from submission to its end,
its attempts and what the reactor observed of them; and ``FailureKind``, why an attempt
failed. The rules every event follows are in ``argus.events.catalog``."""

from __future__ import annotations

import enum

from argus.events.base import EventBase
from argus.events.values import Demand, StackedProcess, SubmissionPayload

class FailureKind(str, enum.Enum):
    """Why an attempt failed; decides whether the task is retried."""

    INSUFFICIENT_RESOURCES = "INSUFFICIENT_RESOURCES"
    USER_ERROR = "USER_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    CLUSTER_LOST = "CLUSTER_LOST"
    CANCELED = "CANCELED"
    TIME_LIMIT = "TIME_LIMIT"  # stopped at the spec's time_limit: not retried (it would run as long again)
    PREEMPTED = "PREEMPTED"  # stopped to make room: back to its place in line, not counted
    # Stopped by the operator (``argus up`` shut down with it running): resumed first, at
    # once, from its last checkpoint when Argus is back; not counted.
    INTERRUPTED = "INTERRUPTED"
    # What large training runs hit now and then, and a resume from the last checkpoint
    # often gets past: a collective that timed out (a peer stalled, a link flapped), a GPU
    # or a host out of memory (fragmentation, a long sequence, a neighbour on the node).
    NCCL_TIMEOUT = "NCCL_TIMEOUT"  # PyTorch's NCCL watchdog caught a collective timing out
    STALLED = "STALLED"  # no new step for its bound (Argus's stall watchdog stopped it)
    CUDA_OOM = "CUDA_OOM"  # PyTorch's caching allocator: CUDA out of memory
    HOST_OOM = "HOST_OOM"  # Ray's memory monitor killed a worker: the node ran low on memory
    UNKNOWN = "UNKNOWN"

    def is_retryable(self) -> bool:
        """Resource races, lost clusters and transient faults are worth another attempt;
        user and runtime errors are not (retrying would hide the error)."""
        return self in (FailureKind.INSUFFICIENT_RESOURCES, FailureKind.CLUSTER_LOST, FailureKind.PREEMPTED,
                        FailureKind.INTERRUPTED, *TRANSIENT_KINDS)

    def is_transient(self) -> bool:
        """A fault of the run itself that a resume from its last checkpoint often gets
        past: retried up to ``v2.scheduler.transient_retries`` times, never twice at one step."""
        return self in TRANSIENT_KINDS


TRANSIENT_KINDS = frozenset({FailureKind.NCCL_TIMEOUT, FailureKind.CUDA_OOM, FailureKind.HOST_OOM,
                             FailureKind.STALLED})



# ---------------------------------------------------------------------------------------
# Task stream: task-<task_id>


class TaskSubmitted(EventBase, frozen=True, kw_only=True, tag="TaskSubmitted"):
    """A user submitted a task (API). It enters the queue as QUEUED."""

    task_id: str
    user: str
    workload: str
    kind: str  # "basic" | "advanced"
    spec_raw: str  # the document exactly as the user sent it
    spec: dict[str, object]  # the parsed, validated spec (msgspec-encoded TaskSpec)
    command_raw: str  # advanced: the user's command; basic: the generated one
    command: str  # with $HOME macros expanded: what the driver runs
    demand: Demand
    priority: int = 0
    max_attempts: int = 3
    warnings: list[str] = []
    time_limit_s: float | None = None  # how long one attempt may run (the spec's time_limit)
    preemptible: bool = False  # may be stopped to make room (the spec's preemptible)
    stall_timeout_s: float | None = None  # no new step for this long: stalled (the spec's stall_timeout)
    submitted_at: float


class TaskDeferred(EventBase, frozen=True, kw_only=True, tag="TaskDeferred"):
    """The scheduler looked at the task and could not admit it (reactor). Appended only
    when ``reason`` changes, so the log answers "why is my task not running?"."""

    task_id: str
    reason: str  # machine code: no_capacity_per_node, max_running, capacity_unknown, ...
    message: str  # what was needed and what was free, in words
    needed: Demand
    # Free GPUs per node, recorded where they are the reason (no_capacity_per_node: enough
    # in total, not on one node); elsewhere the message's totals say it (events recorded
    # before 2026-11-27 have the list on every deferral).
    free_gpus_per_node: list[float] = []
    # The first task that does not fit under reserve-backfill: when and where its gang is
    # expected to fit (its estimated start).
    reserved_from: float | None = None
    reserved_nodes: list[str] = []
    # When it starts at the latest, where known: every task the reservation waits for has
    # an enforced time limit (argus.scheduler.reserve.Reservation.firm).
    reserved_latest: float | None = None
    decided_at: float


class AttemptStarting(EventBase, frozen=True, kw_only=True, tag="AttemptStarting"):
    """Intent: the reactor is about to submit this attempt to Ray (before calling Ray)."""

    task_id: str
    attempt_no: int
    submission_id: str
    payload: SubmissionPayload
    decided_at: float
    note: str = ""  # why it may pass the reserved head of the queue (backfill), when it does
    # The nodes the scheduler placed the gang on, and their hosts: the ledger holds its
    # demand there from now until it ends (argus.scheduler.ledger). Empty in older logs.
    node_ids: list[str] = []
    node_ips: list[str] = []


class AttemptSubmitted(EventBase, frozen=True, kw_only=True, tag="AttemptSubmitted"):
    """Ray accepted the submission (or already had it, after a crash: ``recovered``)."""

    task_id: str
    attempt_no: int
    submission_id: str
    recovered: bool = False
    submitted_at: float


class AttemptRunning(EventBase, frozen=True, kw_only=True, tag="AttemptRunning"):
    """Ray reports the job RUNNING."""

    task_id: str
    attempt_no: int
    submission_id: str
    started_at: float  # Ray's start_time: when Ray accepted the job, not when it began running
    seen_at: float | None = None  # when the reactor first saw it RUNNING
    driver_node_id: str = ""  # the node Ray runs the job's driver on (its host below)
    driver_node_ip: str = ""


class AttemptTimeLimitReached(EventBase, frozen=True, kw_only=True, tag="AttemptTimeLimitReached"):
    """The running attempt reached the task's ``time_limit_s`` (reactor): its Ray job is
    being stopped, and its end will be TIME_LIMIT."""

    task_id: str
    attempt_no: int
    submission_id: str
    time_limit_s: float
    ran_s: float  # since Ray reported it running
    reached_at: float


class AttemptStalled(EventBase, frozen=True, kw_only=True, tag="AttemptStalled"):
    """The running attempt made no new step for ``bound_s`` (reactor's stall watchdog,
    docs/runs.md): its last ``step`` (None: none yet) came at ``since``. Its Ray job is
    being stopped; its end will be STALLED, resumed from its last checkpoint."""

    task_id: str
    attempt_no: int
    submission_id: str
    step: int | None = None
    since: float
    bound_s: float
    why: str  # how the bound was set, in words
    reached_at: float


class AttemptInterrupted(EventBase, frozen=True, kw_only=True, tag="AttemptInterrupted"):
    """The operator stopped Argus with this attempt running (``argus up`` shut down: its Ray
    nodes go with it). When Argus is back and Ray has no such job, the attempt ends
    ``INTERRUPTED``, and the task is resumed first, at once, from its last checkpoint."""

    task_id: str
    attempt_no: int
    submission_id: str
    by: str
    reason: str
    interrupted_at: float


class AttemptStacksCaptured(EventBase, frozen=True, kw_only=True, tag="AttemptStacksCaptured"):
    """Before a stalled attempt is stopped, its driver dumped the Python stacks of its
    processes on its node (``argus.nodepool.stacks``; the dumps are in the control plane's
    folder, served by ``GET /tasks/{id}/stacks``). ``processes`` empty: none could be taken,
    ``note`` says why (none came within ``v2.scheduler.stall.stacks_wait_s``, no py-spy, ...)."""

    task_id: str
    attempt_no: int
    submission_id: str
    hostname: str = ""
    processes: list[StackedProcess] = []
    skipped: int = 0  # processes of the attempt found but not dumped (not Python)
    dump_bytes: int = 0
    note: str = ""
    captured_at: float


class AttemptPlacementTimedOut(EventBase, frozen=True, kw_only=True, tag="AttemptPlacementTimedOut"):
    """The running attempt's placement groups stayed PENDING for ``placement_timeout_s``
    (reactor): verl >= 0.6 would wait for them for ever. Its Ray job is being stopped; its
    end will be INSUFFICIENT_RESOURCES, and retried."""

    task_id: str
    attempt_no: int
    submission_id: str
    placement_groups: list[str]  # the ones still PENDING
    pending_s: float
    timeout_s: float
    reached_at: float


class AttemptProgressed(EventBase, frozen=True, kw_only=True, tag="AttemptProgressed"):
    """How far the running attempt's training got (reactor), from its driver's report
    (``argus.rayjobs.reports``): the last ``step`` it printed and when, the ``total_steps``
    it said it will train, and the median time of its recent steps. Recorded when the step
    moved, at most every ``v2.scheduler.progress_record_s`` per attempt."""

    task_id: str
    attempt_no: int
    submission_id: str
    step: int | None = None  # None: its trainer announced its total, and has printed no step yet
    step_at: float | None = None  # when the driver saw the step printed
    first_step: int | None = None  # the first step this attempt printed (a resume starts past 1)
    total_steps: int | None = None
    step_time_s: float | None = None
    observed_at: float


class AttemptOutputTruncated(EventBase, frozen=True, kw_only=True, tag="AttemptOutputTruncated"):
    """The attempt's output passed its budget (reactor), from its driver's report
    (``argus.rayjobs.output``): of ``total_bytes`` printed, its first and last bytes are kept
    in ``driver.log`` (``kept_bytes``) and ``dropped_bytes`` between them are not. Recorded
    once when its driver first reports it (``final`` False), and once more with the whole
    count when the command ended (``final`` True). ``stopped``: the driver stopped the
    command for it (``v2.output.on_exceed: stop``)."""

    task_id: str
    attempt_no: int
    submission_id: str
    budget_bytes: int
    total_bytes: int
    kept_bytes: int
    dropped_bytes: int
    final: bool = False
    stopped: bool = False
    observed_at: float


class CheckpointObserved(EventBase, frozen=True, kw_only=True, tag="CheckpointObserved"):
    """The running attempt saved a checkpoint that a resume can start from (reactor): verl's
    ``latest_checkpointed_iteration.txt`` names ``step`` and its ``global_step_<step>/``
    folder is there, in ``folder`` (relative to the attempt's job dir). ``saved_at``: the
    tracker's modification time, kept between the attempt's start and ``observed_at`` (a
    job may set any time on its files). Preemption stops the attempt with the least work
    since its last checkpoint first."""

    task_id: str
    attempt_no: int
    submission_id: str
    step: int
    folder: str
    saved_at: float
    observed_at: float


class AttemptPreempted(EventBase, frozen=True, kw_only=True, tag="AttemptPreempted"):
    """The scheduler stops this preemptible attempt to admit ``by_task_id`` (reactor): its
    Ray job gets SIGTERM, then is killed after the grace period; its end is PREEMPTED and
    the task goes back to its place in the queue, its attempt not counted."""

    task_id: str
    attempt_no: int
    submission_id: str
    by_task_id: str  # the waiting task it makes room for
    by_user: str
    reason: str  # "priority" | "fair_share" | "quota" | "moves" (it fits elsewhere now: argus.scheduler.preempt)
    message: str  # who preempted whom and why, in words
    preempted_at: float


class AttemptEnded(EventBase, frozen=True, kw_only=True, tag="AttemptEnded"):
    """The attempt reached a terminal Ray status (or could not be submitted at all)."""

    task_id: str
    attempt_no: int
    submission_id: str
    ray_status: str  # SUCCEEDED | FAILED | STOPPED | NOT_SUBMITTED | LOST
    exit_code: int | None = None
    failure_kind: FailureKind | None = None
    evidence: str = ""  # the message excerpt that decided failure_kind
    ended_at: float
    # The last training step its log showed (verl's ``step:N`` lines), else its last
    # checkpoint's: where a transient fault struck (the same kind at the same step twice
    # is not transient). None: not known.
    step: int | None = None
    # Who said it ended: "driver" (its driver's exit report: argus.rayjobs.reports), or
    # "" (Ray, or Argus for an attempt that never reached Ray).
    reported_by: str = ""


class RetryScheduled(EventBase, frozen=True, kw_only=True, tag="RetryScheduled"):
    """A retryable failure puts the task back to PENDING_RESOURCES until ``next_run_at``."""

    task_id: str
    failed_attempt_no: int
    failure_kind: FailureKind
    next_run_at: float
    delay_s: float


class TaskSucceeded(EventBase, frozen=True, kw_only=True, tag="TaskSucceeded"):
    task_id: str
    attempt_no: int
    finished_at: float


class TaskIncomplete(EventBase, frozen=True, kw_only=True, tag="TaskIncomplete"):
    """Terminal: the command exited 0 short of its last training step (``step`` of
    ``total_steps``), or a resumed attempt exited 0 without training a step (docs/runs.md)."""

    task_id: str
    attempt_no: int
    step: int | None = None  # the last step reached (None: none this attempt nor saved before)
    total_steps: int | None = None
    reason: str
    finished_at: float


class TaskFailed(EventBase, frozen=True, kw_only=True, tag="TaskFailed"):
    """Terminal failure: not retryable, or out of attempts."""

    task_id: str
    attempt_no: int
    failure_kind: FailureKind
    error_summary: str
    finished_at: float


class TaskCancelRequested(EventBase, frozen=True, kw_only=True, tag="TaskCancelRequested"):
    """A user asked to cancel (API); the reactor stops the Ray job if there is one."""

    task_id: str
    by: str
    requested_at: float


class TaskCanceled(EventBase, frozen=True, kw_only=True, tag="TaskCanceled"):
    """The task is canceled: at once when it had no Ray job, else after Ray stopped it."""

    task_id: str
    by: str
    ray_status: str | None = None
    canceled_at: float


class AttemptOutputsRemoved(EventBase, frozen=True, kw_only=True, tag="AttemptOutputsRemoved"):
    """Files a finished task wrote under its user's ``jobs/`` were deleted: by their owner
    (``rule`` "owner", ``by`` the user) or by the retention policy (``rule``
    "max_age_days" or "keep_checkpoints", ``by`` "retention"; docs/data.md,
    "Retention"). ``paths``: what was deleted, relative to ``jobs/``
    (``<submission_id>`` for a whole attempt folder, ``<task_id>`` for the task's own);
    ``entries`` and ``bytes``: what they held. ``attempt_no`` None: the task's folder.
    ``complete`` False: a tree too large for one pass, partly deleted (the rest follows)."""

    task_id: str
    attempt_no: int | None = None
    paths: list[str]
    entries: int
    bytes: int
    complete: bool = True
    rule: str  # "owner" | "max_age_days" | "keep_checkpoints"
    reason: str = ""  # the policy's words: "finished 31.2 days ago (max_age_days 30)"
    by: str
    removed_at: float

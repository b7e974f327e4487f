"""The scheduling policy's values: what it is given (waiting and running tasks, the
cluster's free capacity, its configuration) and what it decides (admit, defer, preempt).
Plain frozen structs, so a pass is a pure function of them (``argus.scheduler.policy``)."""

from __future__ import annotations

from typing import Union

import msgspec

from argus.config import ChurnGuard, SchedulerConfig
from argus.events.catalog import Demand, NodeCapacity

__all__ = ["Admit", "Capacity", "Decision", "Defer", "PolicyConfig", "Preempt", "QueuedTask", "Reason", "RunningTask"]


class Reason:
    """Deferral reason codes (stable strings: they are stored in TaskDeferred events)."""

    NO_CAPACITY_PER_NODE = "no_capacity_per_node"
    INSUFFICIENT_GPUS = "insufficient_gpus"
    MAX_RUNNING = "max_running"
    USER_LIMIT = "user_limit"
    USER_GPU_LIMIT = "user_gpu_limit"  # its user's running tasks hold what their GPU cap allows
    CAPACITY_UNKNOWN = "capacity_unknown"
    RETRY_BACKOFF = "retry_backoff"
    BLOCKED_BY_HEAD = "blocked_by_head"
    NEVER_FITS = "never_fits"
    BEHIND_RESERVATION = "behind_reservation"
    PREEMPTING = "preempting"  # preemptible tasks are being stopped to make room for it
    # it may not be preempted, and fits now only on rare nodes it does not need (Pool.keeps_off)
    KEEPS_OFF_RARE = "keeps_off_rare_nodes"

    @staticmethod
    def is_per_node(reason: str) -> bool:
        """Whether the reason is how the free GPUs lie across nodes (enough in total, no
        node with enough): only then does the list of free GPUs per node explain it."""
        return reason == Reason.NO_CAPACITY_PER_NODE


class QueuedTask(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A waiting task (QUEUED or PENDING_RESOURCES). ``seq``: its submission's log
    position (arrival order; tasks with equal ``seq`` keep the order they are given in)."""

    task_id: str
    demand: Demand
    seq: int = 0
    priority: int = 0
    user: str = ""
    next_run_at: float | None = None
    estimate_s: float | None = None  # expected run time (time limit or history); None: the default
    # The estimate is an enforced time limit: the task is stopped by it, so it may run on
    # a reservation's nodes before the reservation starts (argus.scheduler.reserve).
    limited: bool = False
    # When room began to be made for it (its deferrals since say ``preempting``); None: no
    # room is being made. Such tasks go first, in this order: rooms are made in turn and
    # free in turn (one grace period each), so each goes to the task it was made for.
    preempting_since: float | None = None
    waiting_since: float | None = None  # since when it waits (fair share's age term)
    preemptible: bool = True  # may be stopped once it runs (false: it keeps off rare nodes it does not need)
    # The operator stopped Argus while it ran (``INTERRUPTED``): it goes before every other
    # waiting task, under every policy, so that a planned restart costs no run its place.
    resume_first: bool = False


class RunningTask(msgspec.Struct, frozen=True, kw_only=True):
    """A task holding (or about to hold) a Ray job. ``node_ids``: where it was admitted,
    when known. Its demand is already off the capacity the policy is given (the ledger,
    ``argus.scheduler.ledger``). ``settled=False``: it has not run for long yet (not seen
    running, or for less than ``preempt_min_run_s``): not stopped to make
    room, since stopping a job that is still starting wastes its start for nothing."""

    task_id: str
    demand: Demand
    user: str = ""
    node_ids: tuple[str, ...] = ()
    settled: bool = True
    expected_end: float | None = None  # argus.scheduler.running_end; None: now + the default
    priority: int = 0
    preemptible: bool = False  # may be stopped to make room (argus.scheduler.preempt)
    stopping: bool = False  # being stopped already (preempted, time limit, ...): gives its GPUs back soon
    preempted: int = 0  # times it was stopped to make room so far (``max_preemptions`` caps it)
    started_at: float | None = None
    limited: bool = False  # ``expected_end`` is its enforced time limit: it ends by then
    by_progress: bool = False  # ``expected_end`` is from its own progress: once past, it ends any moment
    settles_at: float | None = None  # when it becomes ``settled``, while that is ahead (else None)
    checkpointed_at: float | None = None  # its last checkpoint a resume can use (None: none seen)

    def unsaved_since(self) -> float:
        """When the work it would lose if stopped now began: its last checkpoint, else its
        start (preemption stops the latest first: the least work lost)."""
        return max(self.started_at or 0.0, self.checkpointed_at or 0.0)


class Capacity(msgspec.Struct, frozen=True, kw_only=True):
    """Free resources of the alive worker nodes, as the Ray gateway observed them.
    ``releasing``: the gangs (node ids, demand per node) of attempts that ended but that
    the ledger holds until Ray is seen to have them back: off ``nodes``' free resources,
    and free again as soon as that is seen (a reservation counts them as ending now)."""

    nodes: tuple[NodeCapacity, ...]
    releasing: tuple[tuple[tuple[str, ...], Demand], ...] = ()


class PolicyConfig(msgspec.Struct, frozen=True, kw_only=True):
    policy: str = "fifo"
    max_running_tasks: int = 32  # as SchedulerConfig's (argus.config: why 32)
    max_running_per_user: int = 0  # 0: no per-user limit
    # GPUs each user's admitted tasks may hold at once, by user (UserLimitsSet, set by an
    # admin; not listed: no cap). An input of the pass like ``usage``: it changes as admins act.
    gpu_caps: dict[str, float] = {}
    backfill: bool = False
    reserve: bool = False  # the first task that does not fit gets a reservation (argus.scheduler.reserve)
    # ... and so does the first of each set of GPU models (argus.scheduler.per_model)
    reserve_per_model: bool = True
    minor_models_last: bool = True  # a task of any model goes on the minor models' nodes last (per_model)
    default_runtime_s: float = 3600.0  # a task's expected run time when nothing better is known
    preemption: bool = False  # priority / fairshare may stop preemptible tasks (argus.scheduler.preempt)
    preempt_grace_s: float = 30.0  # from the stop to the kill: when the victims' GPUs are back
    max_preemptions: int = 0  # a task is stopped to make room at most this often (0: no cap)
    move_after_s: float = 0.0  # preemption may move tasks for one that would wait this long (0: never)
    evict_after_s: float = 0.0  # a waiting task stops or moves no one before it waited this long
    user_guards: dict[str, ChurnGuard] = {}  # per-user guards in place of the global ones (argus.scheduler.guards)
    shares: dict[str, float] = {}  # fairshare: each user's share (1 when not listed)
    quotas: dict[str, float] = {}  # fairshare: GPUs guaranteed to a user
    max_wait_s: float = 12 * 3600.0  # fairshare: waited this long, it goes first (0: off)
    # fairshare: each user's decayed GPU-seconds now (projections.usage). An input of the
    # pass like the queue, carried here so every policy keeps one signature.
    usage: dict[str, float] = {}
    # Placement: "bestfit" (fewest free GPUs left), or "fragmentation" (argus.scheduler.
    # fragmentation: for the simulator only; it lost to best-fit on the trace, see there).
    placement: str = "bestfit"
    # fragmentation: how often each per-node shape (GPUs, CPUs, weight) comes, when known
    # from elsewhere (the FGD mode); empty: the pass's own queue front and running tasks.
    shape_mix: tuple[tuple[float, float, float], ...] = ()
    # Whether the pass says why every task that waits waits (the reactor records it). False:
    # only the admissions, the preemptions and the deferrals of tasks that are or become
    # ``preempting`` (what orders the queue): the simulator, which records nothing else,
    # and on a long queue the messages were most of its time. The admissions are the same.
    waits: bool = True

    @classmethod
    def from_scheduler(cls, cfg: SchedulerConfig, **overrides: object) -> "PolicyConfig":
        settings: dict[str, object] = dict(
            policy=cfg.policy, max_running_tasks=cfg.max_running_tasks,
            max_running_per_user=cfg.max_running_per_user, backfill=cfg.backfill,
            default_runtime_s=cfg.default_runtime_s, preemption=cfg.preemption,
            preempt_grace_s=cfg.preempt_grace_s, max_preemptions=cfg.max_preemptions, move_after_s=cfg.move_after_s,
            reserve_per_model=cfg.reserve_per_model, evict_after_s=cfg.evict_after_s,
            user_guards=dict(cfg.user_guards), minor_models_last=cfg.minor_models_last,
            shares=dict(cfg.fairshare.shares),
            quotas=dict(cfg.fairshare.quotas), max_wait_s=cfg.fairshare.max_wait_s, placement=cfg.placement)
        return cls(**{**settings, **overrides})  # type: ignore[arg-type]


# gc=False: a pass creates one decision per queued task; these hold only strings and
# tuples (no cycles), and keeping them out of the cyclic GC avoids multi-ms collections.
class Admit(msgspec.Struct, frozen=True, kw_only=True, tag="admit", gc=False):
    task_id: str
    node_ids: tuple[str, ...]  # one per gang member, distinct
    note: str = ""  # why it may pass a reservation (backfill), when it does


class Defer(msgspec.Struct, frozen=True, kw_only=True, tag="defer", gc=False):
    task_id: str
    reason: str
    message: str
    free_gpus_per_node: tuple[float, ...] = ()
    reserved_from: float | None = None  # the head's reservation: when its gang is expected to fit
    reserved_nodes: tuple[str, ...] = ()
    # ... and when it starts at the latest, where that is known: every task whose end the
    # reservation waits for is stopped by an enforced time limit (argus.scheduler.reserve)
    reserved_latest: float | None = None


class Preempt(msgspec.Struct, frozen=True, kw_only=True, tag="preempt", gc=False):
    """Stop the running ``task_id`` to make room for the waiting ``for_task``."""

    task_id: str
    for_task: str
    for_user: str
    reason: str  # priority | quota | fair_share
    message: str


Decision = Union[Admit, Defer, Preempt]

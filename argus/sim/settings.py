"""How one simulation runs (``SimSettings``): the scheduler settings it sets, under the
names ``v2.scheduler`` gives them, and the simulator's own. ``argus sim`` builds one from
its options; ``simulate`` takes it whole."""

from __future__ import annotations

from typing import Literal

import msgspec

from argus.config import ChurnGuard, FairShareConfig, SchedulerConfig

__all__ = ["SimSettings", "sim_config"]


class SimSettings(msgspec.Struct, frozen=True, kw_only=True):
    """One run's settings. The first group is ``v2.scheduler``'s (docs/scheduling.md); the
    rest is the simulator's: ``eta_every`` N > 0 gives every Nth arriving task that has to
    wait an ETA to compare with its real start; ``estimates`` ``exact`` tells the policy
    each task's real run time, as an exact time limit would; ``placement_lag_s``: a gang is
    placed that long after its job started; ``checkpoint_every_s`` C > 0: a task saves a
    checkpoint every C seconds of its work (0: a stopped task resumes where it stopped)."""

    max_running_tasks: int = 1_000_000
    backfill: bool = False
    max_running_per_user: int = 0
    default_runtime_s: float = 3600.0
    preemption: bool = False
    preempt_grace_s: float = 30.0
    preempt_min_run_s: float = 15.0
    max_preemptions: int = 0
    move_after_s: float = 3600.0
    placement: Literal["bestfit", "fragmentation"] = "bestfit"
    fairshare: FairShareConfig = msgspec.field(default_factory=FairShareConfig)
    reserve_per_model: bool = True
    minor_models_last: bool = True
    evict_after_s: float = 0.0
    user_guards: dict[str, ChurnGuard] = {}
    eta_every: int = 0
    estimates: Literal["history", "exact"] = "history"
    placement_lag_s: float = 0.0
    checkpoint_every_s: float = 0.0


# The scheduler's settings among SimSettings' fields: the same names as SchedulerConfig's.
_SCHEDULER_FIELDS = ("max_running_tasks", "backfill", "max_running_per_user", "default_runtime_s", "preemption",
                     "preempt_grace_s", "preempt_min_run_s", "max_preemptions", "move_after_s", "placement",
                     "fairshare", "reserve_per_model", "minor_models_last", "evict_after_s", "user_guards")


def sim_config(policy: str, settings: SimSettings | None = None) -> SchedulerConfig:
    """The reactor's scheduler settings for a simulation: ``settings``' own, nodes that
    never rejoin (no settling), and nothing that gives up waiting."""
    settings = settings or SimSettings()
    return msgspec.convert(dict(policy=policy, node_settle_s=0.0, max_pending_s=0.0,
                                **{name: getattr(settings, name) for name in _SCHEDULER_FIELDS}), SchedulerConfig)

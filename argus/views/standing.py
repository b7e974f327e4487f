"""Each user's standing under fair share: share, quota, fair share of the GPUs, what they
hold and wait for, and their recent (decayed) GPU use — what ``GET /shares``, ``argus
shares`` and the WebUI show, from the same functions the ``fairshare`` policy uses, over
the projections (hence here, on the read side, and not in the pure ``argus.scheduler``)."""

from __future__ import annotations

import sqlite3

import msgspec

from argus.config import SchedulerConfig
from argus.scheduler import PolicyConfig
from argus.scheduler.fairshare import fair_pass, share_of
from argus.views.fair_inputs import read_fair_inputs
from projections.cluster import read_cluster

__all__ = ["Standing", "UserStanding", "read_standing"]


class UserStanding(msgspec.Struct, frozen=True, kw_only=True):
    user: str
    share: float  # relative to the others' (v2.scheduler.fairshare.shares; 1 when not listed)
    quota_gpus: float  # guaranteed (v2.scheduler.fairshare.quotas; 0: none)
    fair_gpus: float  # the cluster's GPUs × share / the shares of every user with work now
    held_gpus: float  # GPUs of its tasks holding Ray jobs now
    waiting_tasks: int
    running_tasks: int
    usage_gpu_hours: float  # GPU-hours, each decayed by half every half_life_s


class Standing(msgspec.Struct, frozen=True, kw_only=True):
    policy: str
    half_life_s: float
    total_gpus: float  # of the worker nodes as last observed
    at: float
    users: list[UserStanding]


def read_standing(db: sqlite3.Connection, sched: SchedulerConfig, now: float) -> Standing:
    """Every user with work now, recent use, a share or a quota, by name."""
    waiting, active, queue, running, usage = read_fair_inputs(db, sched, now)
    cluster = read_cluster(db)
    total = sum(n.total_gpus for n in cluster.nodes) if cluster is not None else 0.0
    fair = sched.fairshare
    shares = fair_pass(queue, running, now, PolicyConfig.from_scheduler(sched, usage=usage), total).shares
    users = sorted({t.user for t in waiting} | {t.user for t in active} | set(fair.shares) | set(fair.quotas)
                   | {u for u, v in usage.items() if v >= 1.0})
    return Standing(policy=sched.policy, half_life_s=fair.half_life_s, total_gpus=total, at=now, users=[
        UserStanding(user=u, share=share_of(u, fair.shares), quota_gpus=float(fair.quotas.get(u, 0.0)),
                     fair_gpus=round(shares.fair.get(u, 0.0), 3), held_gpus=shares.held.get(u, 0.0),
                     waiting_tasks=sum(1 for t in waiting if t.user == u),
                     running_tasks=sum(1 for t in active if t.user == u),
                     usage_gpu_hours=round(usage.get(u, 0.0) / 3600.0, 3))
        for u in users])

"""Scheduling: the pure admission policy (``policy``) the reactor consults every tick."""

from argus.scheduler.policy import (
    POLICIES,
    Admit,
    Capacity,
    Decision,
    Defer,
    PolicyConfig,
    QueuedTask,
    Reason,
    RunningTask,
    decide,
    register_policy,
)

__all__ = [
    "Admit",
    "Capacity",
    "Decision",
    "Defer",
    "POLICIES",
    "PolicyConfig",
    "QueuedTask",
    "Reason",
    "RunningTask",
    "decide",
    "register_policy",
]

"""Scheduling: the pure admission policy (``policy``) the reactor consults every turn, and
the one order in which each policy considers waiting tasks (``order``)."""

from argus.scheduler.order import ORDERS, SortKey, Waiting, order_key, queue_order, register_order

from argus.scheduler.policy import (
    POLICIES,
    Admit,
    Capacity,
    Decision,
    Defer,
    PolicyConfig,
    Preempt,
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
    "ORDERS",
    "POLICIES",
    "PolicyConfig",
    "Preempt",
    "QueuedTask",
    "Reason",
    "RunningTask",
    "SortKey",
    "Waiting",
    "decide",
    "order_key",
    "queue_order",
    "register_order",
    "register_policy",
]

"""The order in which a policy considers waiting tasks: one function, used everywhere.

The reactor hands the policy its queue in this order; ``/queue``, a task's
``queue_position``, the WebUI and ``argus replay at`` show the queue in this order. So
what a user is told ("3rd in line") is what the scheduler will do, for every policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

__all__ = ["ORDERS", "Waiting", "queue_order", "register_order"]


class Waiting(Protocol):
    """What ordering needs of a waiting task: where it arrived, and its priority."""

    @property
    def seq(self) -> int: ...

    @property
    def priority(self) -> int: ...


W = TypeVar("W", bound=Waiting)
OrderKey = Callable[[Waiting], tuple[int, ...]]

# Policy name -> sort key. Keys end with ``seq`` (the log position of the submission), so
# every order is total and ties fall back to arrival.
ORDERS: dict[str, OrderKey] = {}


def register_order(policy: str, key: OrderKey) -> None:
    """Declare the order in which ``policy`` considers waiting tasks."""
    ORDERS[policy] = key


def queue_order(policy: str, waiting: Iterable[W]) -> list[W]:
    """``waiting`` in the order ``policy`` considers them (KeyError for an unknown
    policy: every registered policy registers its order)."""
    return sorted(waiting, key=ORDERS[policy])


register_order("fifo", lambda t: (t.seq,))  # arrival only: priorities are ignored
register_order("priority", lambda t: (-t.priority, t.seq))  # higher first, FIFO within one

"""What the store asks of the read models it keeps in its append transactions.

The store is the lowest layer above the events: it knows the log, never the tables kept
from it. Read models (the ``projections`` package) plug in through ``ReadModels``; the
store calls them inside its own transactions, so an append and the read models it changes
commit together, and a rebuild happens in one transaction at open.
"""

from __future__ import annotations

import sqlite3
from typing import Protocol, Sequence

from argus.events import Recorded

__all__ = ["ReadModels"]


class ReadModels(Protocol):
    """Read models kept inline by an ``EventStore``."""

    def folds(self, event_type: str) -> bool:
        """Whether ``apply`` needs events of this type (the store decodes only those)."""
        ...

    def apply(self, db: sqlite3.Connection, records: Sequence[Recorded]) -> None:
        """Fold one transaction's events into the tables, inside that transaction. Raise
        ``argus.store.InvariantViolation`` for an event the read models do not allow: the
        store then rolls the whole append back."""
        ...

    def catch_up(self, db: sqlite3.Connection) -> list[str]:
        """At open, inside a write transaction: bring every read model level with the log
        (rebuild what changed version or fell behind). Returns the names rebuilt."""
        ...

    def rebuild(self, db: sqlite3.Connection) -> int:
        """Recompute every read model from the log, inside the caller's transaction;
        returns the last position folded."""
        ...


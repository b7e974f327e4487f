"""The event log: append-only SQLite store, its errors, migrations and rebuild."""

from argus.store.errors import (
    ConcurrencyConflict,
    EventDecodeError,
    InvalidEvent,
    InvariantViolation,
    PayloadTooLarge,
    StoreError,
    UnknownEventType,
)
from argus.store.migrate import MigrationError, current_version, migrate
from argus.store.rows import decode_row, iter_log, rebuild_projections
from argus.store.sqlite import SYNCHRONOUS_MODES, AppendBatch, EventStore

__all__ = [
    "AppendBatch",
    "ConcurrencyConflict",
    "EventDecodeError",
    "EventStore",
    "InvalidEvent",
    "InvariantViolation",
    "MigrationError",
    "PayloadTooLarge",
    "SYNCHRONOUS_MODES",
    "StoreError",
    "UnknownEventType",
    "current_version",
    "decode_row",
    "iter_log",
    "migrate",
    "rebuild_projections",
]

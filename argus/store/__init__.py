"""The event log: append-only SQLite store, its errors, migrations, and the hook through
which read models are kept in its transactions. It knows nothing of the read models' tables."""

from argus.store.errors import (
    ConcurrencyConflict,
    EventDecodeError,
    InvalidEvent,
    InvariantViolation,
    PayloadTooLarge,
    StoreError,
    UnknownEventType,
)
from argus.store.hooks import ReadModels
from argus.store.log import EVENT_COLUMNS, Share, decode_row, head_position, iter_log, log_rows, read_stream
from argus.store.migrate import MigrationError, current_version, migrate
from argus.store.sqlite import SYNCHRONOUS_MODES, AppendBatch, EventStore

__all__ = [
    "AppendBatch",
    "ConcurrencyConflict",
    "EVENT_COLUMNS",
    "EventDecodeError",
    "EventStore",
    "InvalidEvent",
    "InvariantViolation",
    "MigrationError",
    "PayloadTooLarge",
    "ReadModels",
    "SYNCHRONOUS_MODES",
    "Share",
    "StoreError",
    "UnknownEventType",
    "current_version",
    "decode_row",
    "head_position",
    "iter_log",
    "log_rows",
    "migrate",
    "read_stream",
]

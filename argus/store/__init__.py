"""The event log: append-only SQLite store, its errors, migrations, and the hook through
which read models are kept in its transactions. It knows nothing of the read models' tables."""

from argus.store.errors import (
    ConcurrencyConflict,
    EventDecodeError,
    InvalidEvent,
    InvariantViolation,
    IsACopy,
    LimitReached,
    LogUnreachable,
    PayloadTooLarge,
    StorageFull,
    StoreError,
    UnknownEventType,
)
from argus.store.dbfile import (
    DatabaseFacts,
    LoadedLog,
    NotEmpty,
    database_facts,
    event_recorded_at,
    load_log,
    open_read_only,
    position_at_time,
    read_transaction,
    scratch_database,
)
from argus.store.group import GroupCommitLog
from argus.store.integrity import Damage, LogDamaged
from argus.store.hooks import ReadModels
from argus.store.log import EVENT_COLUMNS, Share, decode_row, head_position, iter_log, log_rows, read_stream
from argus.store.protocol import EventLog, Snapshots
from argus.store.migrate import MigrationError, available_migrations, current_version, migrate
from argus.store.sqlite import SYNCHRONOUS_MODES, AppendBatch, EventStore

__all__ = [
    "AppendBatch",
    "ConcurrencyConflict",
    "Damage",
    "DatabaseFacts",
    "EVENT_COLUMNS",
    "EventDecodeError",
    "EventLog",
    "EventStore",
    "GroupCommitLog",
    "InvalidEvent",
    "InvariantViolation",
    "IsACopy",
    "LimitReached",
    "LogDamaged",
    "LogUnreachable",
    "LoadedLog",
    "MigrationError",
    "NotEmpty",
    "PayloadTooLarge",
    "ReadModels",
    "SYNCHRONOUS_MODES",
    "StorageFull",
    "Share",
    "Snapshots",
    "StoreError",
    "UnknownEventType",
    "available_migrations",
    "current_version",
    "database_facts",
    "decode_row",
    "event_recorded_at",
    "head_position",
    "iter_log",
    "load_log",
    "log_rows",
    "migrate",
    "open_read_only",
    "position_at_time",
    "read_stream",
    "read_transaction",
    "scratch_database",
]

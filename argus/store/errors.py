"""Named errors of the event store. Nothing is written when any of them is raised, but
``LogUnreachable`` (a database that stopped answering cannot say whether it committed)."""

from __future__ import annotations

from argus.events.codec import EventDecodeError, UnknownEventType

__all__ = [
    "ConcurrencyConflict",
    "EventDecodeError",
    "InvalidEvent",
    "InvariantViolation",
    "IsACopy",
    "LimitReached",
    "LogUnreachable",
    "PayloadTooLarge",
    "StorageFull",
    "StoreError",
    "UnknownEventType",
]


class StoreError(Exception):
    """Base of the store's own errors."""


class ConcurrencyConflict(StoreError):
    """The stream moved on since the caller read it: re-read, decide again, retry."""

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(
            f"stream {stream!r} is at version {actual}, the append expected {expected}"
        )
        self.stream = stream
        self.expected = expected
        self.actual = actual


class PayloadTooLarge(StoreError):
    """One event's encoded payload exceeds the store's limit."""

    def __init__(self, event_type: str, size: int, limit: int) -> None:
        super().__init__(f"{event_type} payload is {size} bytes; the limit is {limit}")
        self.size = size
        self.limit = limit


class InvalidEvent(StoreError):
    """An event whose fields do not match its type (a str where it says int, say): it
    would not decode when read back, and the log cannot be corrected afterwards."""


class LogUnreachable(StoreError):
    """The shared log (PostgreSQL, ``argus.store.mirror``) did not answer. Raised before
    the append was sent, nothing was written; raised by the append itself, the database
    may have committed it before the connection broke (the copy will show it if so)."""


class InvariantViolation(StoreError):
    """A projection refused the event (an illegal state transition, a duplicate user...)."""


class IsACopy(StoreError):
    """The SQLite file is a host's copy of a log shared through PostgreSQL: opened alone,
    as a log of its own, its writes would reach no other host and it would stop being a copy."""


class StorageFull(StoreError):
    """A write refused for lack of space on the disk that holds the log (or a file the
    server writes): nothing was written. Reads go on; writes succeed again once there is
    space. ``free_bytes``: what the filesystem had left, when it could be told."""

    def __init__(self, cause: str, free_bytes: int | None = None) -> None:
        super().__init__(f"the server's disk is full ({cause}): nothing was written")
        self.cause = cause
        self.free_bytes = free_bytes


class LimitReached(StoreError):
    """An append's own condition (``AppendBatch.guard``, a user's queue cap), checked in
    the append's transaction once its events are folded, did not hold: nothing was written."""

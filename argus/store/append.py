"""What an append does: make its events ready before the transaction, then write them.

``Appender.prepare`` encodes and validates every event outside the write lock;
``Appender.write`` is the transaction's body: check each stream's version, number the
events, insert them, and fold them into the projections kept inline. Both run once per
event of every append, so their loops are kept free of calls that are not needed.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Callable, Sequence

import msgspec

from argus.events import EventBase, EventMeta, Recorded
from argus.events.codec import event_codec
from argus.store.sqlbatch import BatchInsert
from argus.store.errors import ConcurrencyConflict, InvalidEvent, PayloadTooLarge
from argus.store.hooks import ReadModels
from argus.store.integrity import digest_row
from argus.store.log import EVENT_COLUMNS

__all__ = ["AppendBatch", "Appender", "PreparedBatch"]

_encode = msgspec.json.Encoder().encode
# Each row with its digest (argus.store.integrity): a row changed in place is told by it.
_INSERT_EVENTS = BatchInsert("events", EVENT_COLUMNS + ", digest")

# How one event class is written: (type, schema, decode, whether a projection folds it).
_Codec = tuple[str, int, Callable[[bytes], EventBase], bool]


class AppendBatch(msgspec.Struct, frozen=True, kw_only=True):
    """Events for one stream, appended only if the stream is at ``expected_version``
    (None: no check). ``owner`` is the user the events belong to (who may see them);
    ``meta`` (who caused them) defaults to the append's. ``guard(db)``, when given, runs
    inside the append's transaction once every event of it is folded into the read
    models, and raises ``LimitReached`` to refuse the whole append: a cap on what the read
    models count (a user's waiting tasks) holds however many appends race for it."""

    stream: str
    expected_version: int | None
    events: Sequence[EventBase]
    owner: str | None = None
    meta: EventMeta | None = None
    guard: Callable[[sqlite3.Connection], None] | None = None


class PreparedBatch(msgspec.Struct, frozen=True):
    """A batch made ready before its transaction: each event as (type, schema, data, the
    event as a reader will decode it, whether a projection of this store folds it), and
    its meta as stored and as folded."""

    batch: AppendBatch
    events: list[tuple[str, int, bytes, EventBase, bool]]
    meta: EventMeta
    meta_bytes: bytes


class Appender:
    """Prepares and writes appends for a store keeping ``read_models`` inline."""

    def __init__(self, read_models: ReadModels, max_payload_bytes: int) -> None:
        self.read_models = read_models
        self.max_payload_bytes = max_payload_bytes
        self._codecs: dict[type, _Codec] = {}

    def prepare(self, batches: Sequence[AppendBatch], meta: EventMeta | None) -> list[PreparedBatch]:
        """Encode and validate every event (raises PayloadTooLarge or InvalidEvent);
        batches without events are left out."""
        default = meta or EventMeta()
        default_bytes = _encode(default)
        codecs = self._codecs
        limit = self.max_payload_bytes
        out = []
        for batch in batches:
            if not batch.events:
                continue
            events = []
            # One loop, no call per event: this is most of an append's Python work.
            for event in batch.events:
                type_, schema, decode, folded = codecs.get(type(event)) or self._codec(type(event))
                data = _encode(event)
                if len(data) > limit:
                    raise PayloadTooLarge(type_, len(data), limit)
                # Decoded here, as every reader will decode it: an event that would not
                # decode must never reach the log. Folds take the decoded event, not the
                # caller's object (an int where the type says float, say), so inline
                # projections equal a rebuild.
                try:
                    decoded = decode(data)
                except msgspec.DecodeError as exc:
                    raise InvalidEvent(f"{type_} does not match its type: {exc}") from exc
                events.append((type_, schema, data, decoded, folded))
            m = batch.meta or default
            out.append(PreparedBatch(batch, events, m, default_bytes if m is default else _encode(m)))
        return out

    def _codec(self, cls: type[EventBase]) -> _Codec:
        found = event_codec(cls)
        codec = self._codecs[cls] = (found.type, found.schema, found.decode, self.read_models.folds(found.type))
        return codec

    def write(
        self,
        db: sqlite3.Connection,
        prepared: list[PreparedBatch],
        checkpoint: tuple[str, int] | None,
    ) -> list[Recorded]:
        """The body of an append, inside a write transaction the caller holds: returns
        the events as recorded (a reader would read the same). Raises ConcurrencyConflict
        or InvariantViolation (the caller rolls back)."""
        position, versions = _head_and_versions(db, {item.batch.stream: None for item in prepared})
        rows, records, folded = number_events(prepared, position, versions, time.time())
        _INSERT_EVENTS.run(db, [(*row, digest_row(row)) for row in rows])
        if folded:  # the read models raise InvariantViolation for an event they refuse
            self.read_models.apply(db, folded)
        for item in prepared:  # after every fold: a guard counts what this append adds
            if item.batch.guard is not None:
                item.batch.guard(db)
        if checkpoint is not None:
            db.execute(
                "INSERT INTO subscriber_checkpoints VALUES (?, ?) ON CONFLICT (name) "
                "DO UPDATE SET position = max(position, excluded.position)",
                checkpoint,
            )
        return records


def number_events(prepared: list[PreparedBatch], head: int, versions: dict[str, int],
                  now: float) -> tuple[list[tuple[object, ...]], list[Recorded], list[Recorded]]:
    """Positions after ``head`` and each stream's next versions for ``prepared``: the rows
    to insert, the events as recorded, and those a read model folds. Raises
    ConcurrencyConflict where a batch expects another version of its stream. The same
    numbering for every backend (SQLite's store, the PostgreSQL log)."""
    rows: list[tuple[object, ...]] = []
    records: list[Recorded] = []
    folded: list[Recorded] = []
    position = head
    for item in prepared:
        stream, owner = item.batch.stream, item.batch.owner
        version = versions[stream]
        expected = item.batch.expected_version
        if expected is not None and version != expected:
            raise ConcurrencyConflict(stream, expected, version)
        for type_, schema, data, event, folds in item.events:
            position += 1
            version += 1
            rows.append((position, stream, version, type_, schema, data, item.meta_bytes, owner, now))
            rec = Recorded(position=position, stream=stream, version=version, type=type_,
                           event=event, meta=item.meta, owner=owner, recorded_at=now)
            records.append(rec)
            if folds:
                folded.append(rec)
        versions[stream] = version  # a later batch of the same stream follows on
    return rows, records, folded


# Streams looked up per statement: full chunks share one SQL text, so SQLite's statement
# cache prepares it once (10,000 deferrals were one statement of 10,000 VALUES, parsed anew).
_VERSIONS_CHUNK = 256
# The last position used: positions an admin accepted as lost (log_losses) are never
# given again, so the head is past them too.
_HEAD = ("SELECT max(coalesce((SELECT max(position) FROM events), 0), "
         "coalesce((SELECT max(last) FROM log_losses), 0))")


def _versions_sql(n: int) -> str:
    values = ",".join(["(?)"] * n)
    return (f"SELECT s.column1, (SELECT coalesce(max(version), 0) FROM events WHERE stream = s.column1) "
            f"FROM (VALUES {values}) AS s")


def _head_and_versions(db: sqlite3.Connection, streams: dict[str, None]) -> tuple[int, dict[str, int]]:
    """The log's last position, and each stream's current version (0: new); each version
    is the index's max of one stream, however long the stream."""
    head = db.execute(_HEAD).fetchone()[0]
    names = list(streams)
    versions: dict[str, int] = {}
    for k in range(0, len(names), _VERSIONS_CHUNK):
        chunk = names[k:k + _VERSIONS_CHUNK]
        versions.update(db.execute(_versions_sql(len(chunk)), chunk).fetchall())
    return head, versions

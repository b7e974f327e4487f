-- The append-only event log: the only source of truth (DESIGN.md §3).
CREATE TABLE events (
    position       INTEGER PRIMARY KEY,          -- global, gapless, strictly increasing
    stream         TEXT    NOT NULL,             -- task-<id> | user-<id> | cluster | reactor
    version        INTEGER NOT NULL,             -- 1, 2, ... within the stream
    type           TEXT    NOT NULL,             -- event class name (the union tag)
    schema_version INTEGER NOT NULL,             -- payload schema, upcast on read
    data           BLOB    NOT NULL,             -- msgspec JSON of the event
    meta           BLOB    NOT NULL,             -- msgspec JSON of EventMeta (actor, request id)
    owner          TEXT,                         -- user the event belongs to (visibility), or NULL
    recorded_at    REAL    NOT NULL,             -- UNIX seconds, UTC
    UNIQUE (stream, version)
);
CREATE INDEX events_owner ON events (owner, position);
CREATE INDEX events_type ON events (type, position);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events is append-only: UPDATE is not allowed');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events is append-only: DELETE is not allowed');
END;

-- The append-only event log on PostgreSQL: the same rows as SQLite's (0001, 0006).
CREATE TABLE events (
    position       BIGINT  PRIMARY KEY,          -- global, gapless, strictly increasing
    stream         TEXT    NOT NULL,
    version        INTEGER NOT NULL,
    type           TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    data           BYTEA   NOT NULL,             -- msgspec JSON of the event
    meta           BYTEA   NOT NULL,
    owner          TEXT,
    recorded_at    DOUBLE PRECISION NOT NULL,
    UNIQUE (stream, version)
);
CREATE INDEX events_owner ON events (owner, position);
CREATE INDEX events_type ON events (type, position);

-- Append-only, enforced by the database: no UPDATE (INSERT ... ON CONFLICT DO UPDATE is
-- one), DELETE or TRUNCATE; an INSERT adds gapless positions right after the head (into
-- an empty log, from any first position: a partial import), checked once per statement
-- over the statement's new rows.
CREATE FUNCTION events_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events is append-only: % is not allowed', TG_OP;
END $$;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events FOR EACH ROW EXECUTE FUNCTION events_refuse();
CREATE TRIGGER events_no_delete BEFORE DELETE ON events FOR EACH ROW EXECUTE FUNCTION events_refuse();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events FOR EACH STATEMENT EXECUTE FUNCTION events_refuse();

CREATE FUNCTION events_after_head() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lo BIGINT; hi BIGINT; n BIGINT; below BIGINT;
BEGIN
    SELECT min(position), max(position), count(*) INTO lo, hi, n FROM new_rows;
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    SELECT coalesce(max(position), 0) INTO below FROM events WHERE position < lo;
    IF hi - lo + 1 <> n OR (below > 0 AND below <> lo - 1) OR EXISTS (SELECT 1 FROM events WHERE position > hi) THEN
        RAISE EXCEPTION 'events is append-only: an INSERT must add gapless events after the head';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER events_insert_after_head AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION events_after_head();

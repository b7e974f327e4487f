-- One append in one round trip: the rows, numbered by the client from the head and stream
-- versions it read, are inserted only if the log has not moved since (else SQLSTATE AG001:
-- the client reads again and renumbers). Called outside an explicit transaction, the call
-- is its own transaction: the lock below holds until it commits, so appends commit one
-- after another, in position order. (A transaction of BEGIN, lock, reads, INSERT and
-- COMMIT took six round trips: 0.78x eventsourcing's single-event appends.)
-- Each append notifies channel argus_events with its last position, delivered at its
-- commit, so subscribers in any process on any host learn of it without polling.
CREATE FUNCTION argus_append(
    p_position BIGINT[], p_stream TEXT[], p_version INTEGER[], p_type TEXT[], p_schema INTEGER[],
    p_data BYTEA[], p_meta BYTEA[], p_owner TEXT[], p_recorded_at DOUBLE PRECISION[], p_table_lock BOOLEAN
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_table_lock THEN
        LOCK TABLE events IN EXCLUSIVE MODE;
    ELSE
        PERFORM pg_advisory_xact_lock(1095911253);  -- 0x41524755, argus.store.postgres.APPEND_LOCK
    END IF;
    IF p_position[1] <> (SELECT coalesce(max(position), 0) FROM events) + 1
       OR EXISTS (SELECT 1 FROM (SELECT s, min(v) AS first FROM unnest(p_stream, p_version) AS x(s, v) GROUP BY s) f
                  WHERE f.first <> (SELECT coalesce(max(version), 0) FROM events WHERE stream = f.s) + 1) THEN
        RAISE EXCEPTION 'the log moved since it was read' USING ERRCODE = 'AG001';
    END IF;
    INSERT INTO events (position, stream, version, type, schema_version, data, meta, owner, recorded_at)
    SELECT * FROM unnest(p_position, p_stream, p_version, p_type, p_schema, p_data, p_meta, p_owner, p_recorded_at);
    PERFORM pg_notify('argus_events', p_position[array_length(p_position, 1)]::text);
END $$;

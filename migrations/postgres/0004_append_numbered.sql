-- One append in one round trip, numbered here: under the append lock, the head and each
-- stream's version are read and the rows numbered from them, so nothing can move in
-- between and nothing is read before the call (argus_append, 0002, needed the client to
-- read them first: two round trips, 0.93x eventsourcing's single-event appends).
-- Per event: its stream, p_k (it is the k-th event of its stream in this append: its
-- version is the stream's version before the append + k) and p_expected (the version the
-- stream must be at before it, for the first event of a batch that checks it; NULL: no
-- check). A mismatch raises SQLSTATE AG002, DETAIL 'stream expected actual', and writes
-- nothing. Returns the head before the append and each stream's version before it, from
-- which the client numbers the events as recorded exactly as here
-- (argus.store.append.number_events).
CREATE FUNCTION argus_append_numbered(
    p_stream TEXT[], p_k INTEGER[], p_expected INTEGER[], p_type TEXT[], p_schema INTEGER[],
    p_data BYTEA[], p_meta BYTEA[], p_owner TEXT[], p_recorded_at DOUBLE PRECISION, p_table_lock BOOLEAN
) RETURNS TABLE (head BIGINT, stream TEXT, version INTEGER) LANGUAGE plpgsql AS $$
DECLARE
    v_head BIGINT;
    v_streams TEXT[];
    v_bases INTEGER[];
    v_bad RECORD;
BEGIN
    IF p_table_lock THEN
        LOCK TABLE events IN EXCLUSIVE MODE;
    ELSE
        PERFORM pg_advisory_xact_lock(1095911253);  -- 0x41524755, argus.store.postgres.APPEND_LOCK
    END IF;
    SELECT coalesce(max(e.position), 0) INTO v_head FROM events e;
    SELECT array_agg(d.s), array_agg((SELECT coalesce(max(e.version), 0) FROM events e WHERE e.stream = d.s))
    INTO v_streams, v_bases FROM (SELECT DISTINCT u.s FROM unnest(p_stream) AS u(s)) d;
    SELECT x.s, x.expected, b.base + x.k - 1 AS actual INTO v_bad
    FROM unnest(p_stream, p_k, p_expected) WITH ORDINALITY AS x(s, k, expected, ord)
    JOIN unnest(v_streams, v_bases) AS b(s, base) ON b.s = x.s
    WHERE x.expected IS NOT NULL AND x.expected <> b.base + x.k - 1 ORDER BY x.ord LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'stream % is at version %, not %', v_bad.s, v_bad.actual, v_bad.expected
            USING ERRCODE = 'AG002', DETAIL = v_bad.s || ' ' || v_bad.expected || ' ' || v_bad.actual;
    END IF;
    INSERT INTO events (position, stream, version, type, schema_version, data, meta, owner, recorded_at)
    SELECT v_head + x.ord, x.s, b.base + x.k, x.t, x.sc, x.d, x.m, x.o, p_recorded_at
    FROM unnest(p_stream, p_k, p_type, p_schema, p_data, p_meta, p_owner) WITH ORDINALITY AS x(s, k, t, sc, d, m, o, ord)
    JOIN unnest(v_streams, v_bases) AS b(s, base) ON b.s = x.s
    ORDER BY x.ord;
    PERFORM pg_notify('argus_events', (v_head + array_length(p_stream, 1))::text);
    RETURN QUERY SELECT v_head, b.s, b.base FROM unnest(v_streams, v_bases) AS b(s, base);
END $$;

-- An INSERT must add the next position, not merely one after the head: a row that left a
-- gap (position 7 after head 2) was accepted, and a reader that takes the log as gapless
-- (catch-up by position, the PostgreSQL log's contract) would miss what was never there.
-- Into an empty log any first position is allowed (a partial import starts where its
-- range does: argus replay import --allow-partial). One more max(position) probe per row.
DROP TRIGGER events_insert_after_head;
CREATE TRIGGER events_insert_after_head BEFORE INSERT ON events
WHEN NEW.position IS NULL
  OR NEW.position <= coalesce((SELECT max(position) FROM events), 0)
  OR NEW.position > coalesce((SELECT max(position) FROM events) + 1, NEW.position)
  OR EXISTS (SELECT 1 FROM events WHERE stream = NEW.stream AND version = NEW.version)
BEGIN
    SELECT RAISE(ABORT, 'events is append-only: an INSERT must add the next event after the head');
END;

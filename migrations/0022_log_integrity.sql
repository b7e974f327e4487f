-- The log under damage (issue 54): what a start checks, and what it takes to notice an
-- event changed in place or a lost tail (docs/operations.md, "A damaged log").
--
-- Each event's digest: BLAKE2b-128 of its columns (argus.store.integrity.event_digest),
-- written with the event. A row changed in place (a user rewritten, bytes garbled) no
-- longer matches it; `argus replay verify` names the position. NULL: written before this
-- migration (nothing to compare with).
ALTER TABLE events ADD COLUMN digest BLOB;

-- Where the last start's check ended: the next start decodes only the events after it.
CREATE TABLE log_verified (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    position INTEGER NOT NULL,
    checked_at REAL NOT NULL
);

-- Positions an admin acknowledged as lost (`argus db accept-loss`): the log's tail was
-- behind the high-water mark of acknowledged positions. They are never used again: the
-- next append goes after `last`, the one gap the insert trigger allows.
CREATE TABLE log_losses (
    first INTEGER PRIMARY KEY,
    last INTEGER NOT NULL,
    acknowledged_at REAL NOT NULL,
    acknowledged_by TEXT NOT NULL,
    CHECK (last >= first)
);

DROP TRIGGER events_insert_after_head;
CREATE TRIGGER events_insert_after_head BEFORE INSERT ON events
WHEN NEW.position IS NULL
  OR NEW.position <= coalesce((SELECT max(position) FROM events), 0)
  OR (NEW.position > coalesce((SELECT max(position) FROM events) + 1, NEW.position)
      AND NOT EXISTS (SELECT 1 FROM log_losses
                      WHERE first = coalesce((SELECT max(position) FROM events), 0) + 1
                        AND last = NEW.position - 1))
  OR EXISTS (SELECT 1 FROM events WHERE stream = NEW.stream AND version = NEW.version)
BEGIN
    SELECT RAISE(ABORT, 'events is append-only: an INSERT must add the next event after the head');
END;

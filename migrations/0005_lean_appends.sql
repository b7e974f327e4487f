-- Fewer pages per commit, again: an fsync'd page is most of what a durable append costs.

-- 1. A projection kept inline is current with the log by construction: every append folds
-- it in the same transaction. Writing its checkpoint on every append cost a page per
-- commit, so the checkpoint now stays where the last rebuild left it and ``live`` says the
-- projection has followed every append since. A store that does not keep a projection
-- clears ``live`` (and moves the checkpoint to the head it was exact at) before its first
-- append; the next store that keeps it rebuilds it.
ALTER TABLE projection_state ADD COLUMN live INTEGER NOT NULL DEFAULT 0;
-- A projection at the head now is live; one behind is rebuilt on the next open, as before.
UPDATE projection_state SET live = (checkpoint = (SELECT coalesce(max(position), 0) FROM events));

-- 2. The (owner, position) index cost a b-tree insert per event, a third of a bare insert,
-- for one reader: a non-admin's SSE catch-up from a cursor older than the server's ring.
-- That read now walks the log from the cursor by position (SQLite filters on ``owner``
-- without decoding), which is linear in the events since the cursor, as the catch-up is.
DROP INDEX events_owner;

-- 3. ``attempts.submission_id`` was UNIQUE: an index written at a random place per new
-- attempt, for a rule that holds by construction (the id is ``<task_id>--aNN``, made from
-- the primary key) and a lookup nothing does.
CREATE TABLE attempts_v5 (
    task_id       TEXT NOT NULL,
    attempt_no    INTEGER NOT NULL,
    submission_id TEXT NOT NULL,
    ray_status    TEXT NOT NULL,
    failure_kind  TEXT,
    evidence      TEXT,
    exit_code     INTEGER,
    started_at    REAL,
    ended_at      REAL,
    PRIMARY KEY (task_id, attempt_no)
) WITHOUT ROWID;
INSERT INTO attempts_v5 SELECT * FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v5 RENAME TO attempts;

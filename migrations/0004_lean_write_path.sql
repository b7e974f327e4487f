-- Fewer b-trees written per append: each is at least one more page in the WAL, and every
-- durable commit fsyncs those pages (an append wrote 16 pages where a bare insert writes 4).

-- Nothing reads events by type through an index: readers walk the log in position order
-- and filter (an index on type made SQLite sort every remaining row of a long log).
DROP INDEX events_type;

-- Small rows keyed by their primary key: WITHOUT ROWID keeps each table in one b-tree
-- instead of a rowid table plus its primary-key index. Rows are copied as they are.
CREATE TABLE attempts_v4 (
    task_id       TEXT NOT NULL,
    attempt_no    INTEGER NOT NULL,
    submission_id TEXT NOT NULL UNIQUE,
    ray_status    TEXT NOT NULL,
    failure_kind  TEXT,
    evidence      TEXT,
    exit_code     INTEGER,
    started_at    REAL,
    ended_at      REAL,
    PRIMARY KEY (task_id, attempt_no)
) WITHOUT ROWID;
INSERT INTO attempts_v4 SELECT * FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v4 RENAME TO attempts;

CREATE TABLE user_task_counts_v4 (
    user  TEXT NOT NULL,
    state TEXT NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (user, state)
) WITHOUT ROWID;
INSERT INTO user_task_counts_v4 SELECT * FROM user_task_counts;
DROP TABLE user_task_counts;
ALTER TABLE user_task_counts_v4 RENAME TO user_task_counts;

CREATE TABLE queue_v4 (
    task_id      TEXT PRIMARY KEY,
    seq          INTEGER NOT NULL,               -- log position of TaskSubmitted: FIFO order
    user         TEXT NOT NULL,
    priority     INTEGER NOT NULL,
    state        TEXT NOT NULL,
    waiting      INTEGER NOT NULL,               -- 1 while QUEUED or PENDING_RESOURCES
    nnodes       INTEGER NOT NULL,
    n_gpus_per_node INTEGER NOT NULL,
    cpus_per_node REAL NOT NULL,
    next_run_at  REAL,
    wait_reason  TEXT,
    wait_message TEXT,
    waiting_since REAL
) WITHOUT ROWID;
INSERT INTO queue_v4 SELECT * FROM queue;
DROP TABLE queue;
ALTER TABLE queue_v4 RENAME TO queue;
CREATE INDEX queue_order ON queue (waiting, priority DESC, seq);

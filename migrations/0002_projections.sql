-- Read models. Each is a projection of the log, written in the same transaction as the
-- events it reflects, and can be dropped and rebuilt from the log at any time.
CREATE TABLE projection_state (
    name       TEXT PRIMARY KEY,
    version    INTEGER NOT NULL,                 -- code version of the projection's fold
    checkpoint INTEGER NOT NULL DEFAULT 0        -- last log position folded in
);

CREATE TABLE tasks (
    task_id           TEXT PRIMARY KEY,
    user              TEXT NOT NULL,
    workload          TEXT NOT NULL,
    kind              TEXT NOT NULL,
    state             TEXT NOT NULL,
    priority          INTEGER NOT NULL,
    created_at        REAL NOT NULL,
    updated_at        REAL NOT NULL,
    next_run_at       REAL,
    latest_attempt_no INTEGER NOT NULL DEFAULT 0,
    failure_kind      TEXT,
    error_summary     TEXT,
    wait_reason       TEXT,
    stream_version    INTEGER NOT NULL,
    view              BLOB NOT NULL               -- msgspec JSON of projections.tasks.TaskView
);
CREATE INDEX tasks_user_created ON tasks (user, created_at DESC);
CREATE INDEX tasks_state ON tasks (state);

CREATE TABLE attempts (
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
);

CREATE TABLE user_task_counts (
    user  TEXT NOT NULL,
    state TEXT NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (user, state)
);

CREATE TABLE queue (
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
);
CREATE INDEX queue_order ON queue (waiting, priority DESC, seq);

CREATE TABLE users (
    user_id      TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    is_admin     INTEGER NOT NULL,
    disabled     INTEGER NOT NULL,
    created_at   REAL NOT NULL
);

CREATE TABLE tokens (
    token_id   TEXT PRIMARY KEY,
    user_id    TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    label      TEXT NOT NULL,
    revoked    INTEGER NOT NULL,
    issued_at  REAL NOT NULL
);
CREATE INDEX tokens_user ON tokens (user_id);

CREATE TABLE cluster_nodes (
    node_id     TEXT PRIMARY KEY,
    ip          TEXT NOT NULL,
    total_gpus  REAL NOT NULL,
    free_gpus   REAL NOT NULL,
    total_cpus  REAL NOT NULL,
    free_cpus   REAL NOT NULL,
    observed_at REAL NOT NULL
);

CREATE TABLE cluster_status (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    reachable   INTEGER NOT NULL,
    error       TEXT,
    observed_at REAL NOT NULL
);

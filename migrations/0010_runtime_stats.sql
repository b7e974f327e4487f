-- How long each user's finished tasks ran, per workload and gang shape: the run-time
-- estimate the scheduler uses for a task without a time_limit (reservations, ETAs).
CREATE TABLE runtime_stats (
    user             TEXT NOT NULL,
    workload         TEXT NOT NULL,
    nnodes           INTEGER NOT NULL,
    n_gpus_per_node  INTEGER NOT NULL,
    n                INTEGER NOT NULL,
    total_s          REAL NOT NULL,
    PRIMARY KEY (user, workload, nnodes, n_gpus_per_node)
) WITHOUT ROWID;

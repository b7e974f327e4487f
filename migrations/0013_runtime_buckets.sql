-- How many of each user's finished tasks (per workload and gang shape) ran for a time in
-- each bucket: bucket b holds run times in [r^b, r^(b+1)) seconds, r = 2^(1/4) (about 19 %
-- wide). The median run time comes from these counts: run times are heavy-tailed, and
-- their mean (runtime_stats) overestimates most runs.
CREATE TABLE runtime_buckets (
    user             TEXT NOT NULL,
    workload         TEXT NOT NULL,
    nnodes           INTEGER NOT NULL,
    n_gpus_per_node  INTEGER NOT NULL,
    bucket           INTEGER NOT NULL,
    n                INTEGER NOT NULL,
    PRIMARY KEY (user, workload, nnodes, n_gpus_per_node, bucket)
) WITHOUT ROWID;

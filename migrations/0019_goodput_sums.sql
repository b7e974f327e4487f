-- Each user's finished tasks' goodput, summed (projections.goodput): the GPU time they held
-- and where it went, and how long they waited, in integer milliseconds (GPU-ms; waiting:
-- wall ms). Integers add exactly in any order, so the sums kept as tasks finish equal a
-- rebuild's; one row per user, so /metrics and /goodput read a few rows, not every task.
-- Unfinished tasks are not kept: their figures grow with the clock, readers add them.
CREATE TABLE goodput_sums (
    user        TEXT PRIMARY KEY,
    tasks       INTEGER NOT NULL,
    held        INTEGER NOT NULL,
    productive  INTEGER NOT NULL,
    placement   INTEGER NOT NULL,
    startup     INTEGER NOT NULL,
    stalled     INTEGER NOT NULL,
    lost        INTEGER NOT NULL,
    failed      INTEGER NOT NULL,
    other       INTEGER NOT NULL,
    waiting_s   INTEGER NOT NULL,
    lost_steps  INTEGER NOT NULL
) WITHOUT ROWID;

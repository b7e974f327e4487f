-- Each finished task's goodput (projections.goodput): the GPU-seconds it held and where
-- they went, and how long it waited (wall seconds). Unfinished tasks are not kept here:
-- their figures grow with the clock, so readers compute them from the task's view.
CREATE TABLE task_goodput (
    task_id     TEXT PRIMARY KEY,
    user        TEXT NOT NULL,
    held        REAL NOT NULL,
    productive  REAL NOT NULL,
    placement   REAL NOT NULL,
    startup     REAL NOT NULL,
    stalled     REAL NOT NULL,
    lost        REAL NOT NULL,
    failed      REAL NOT NULL,
    other       REAL NOT NULL,
    waiting_s   REAL NOT NULL,
    lost_steps  INTEGER NOT NULL
) WITHOUT ROWID;

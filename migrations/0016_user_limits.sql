-- What each user's tasks may ask for (issue 36, governance), from UserLimitsSet events:
-- the highest priority, whether they may be `preemptible: false`, how many may wait at
-- once (0: no cap). The users projection's version moved to 3: it is rebuilt on open.
ALTER TABLE users ADD COLUMN max_priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN may_pin INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN max_queued INTEGER NOT NULL DEFAULT 0;
